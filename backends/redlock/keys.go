package redlock

// sep joins a lock key to the names of its companion keys. 0xFF never
// occurs in valid UTF-8 and lock keys are valid UTF-8 (TryAcquire checks),
// so no lock key can ever equal another lock's fence, void key or channel.
const sep = "\xff:"

// keys are the Redis names used for one lock on every primary. See the
// package doc.
type keys struct {
	lock    string // the lock key: the (prefixed) name exactly as given
	fence   string // this primary's fence counter; no TTL, never deleted
	channel string // the pub/sub channel Release publishes to
	queue   string // on the lead primary: blocked Acquires in arrival order (sorted set)
	queueDL string // on the lead primary: each queued Acquire's deadline (hash)
}

// void is the key that marks an abandoned acquire attempt's token.
func (k keys) void(token string) string { return k.lock + sep + "void:" + token }

// label is the key holding the label of the lease granted to token.
func (k keys) label(token string) string { return k.lock + sep + "label:" + token }

func keysFor(lock string) keys {
	return keys{lock: lock, fence: lock + sep + "fence", channel: lock + sep + "released", queue: lock + sep + "queue", queueDL: lock + sep + "queue:deadlines"}
}
