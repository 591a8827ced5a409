package redlock

// Keys and redsync interop (internals; the package doc in doc.go has what users need).
//
// For a lock whose store key is K (the name, after Options.Prefix), on
// every primary:
//
//   - Lock key K, exactly as named, holding the owner token (32 hex
//     characters, new for every grant) with a PX expiry: redsync's layout
//     (and redis-py's, and every Redlock client's), so a redsync Mutex and
//     a fencelock Redlock lock on the same name and primaries exclude each
//     other both ways; redsync's release and extend are owner-checked like
//     ours. A key without an expiry is never taken over.
//   - Fence key K "\xff:fence" (K, the byte 0xFF, ":fence"): the
//     primary's counter as a decimal integer, no TTL, never deleted.
//   - Void key K "\xff:void:" token, only for an abandoned attempt whose
//     acquire reply never came; it expires after 5 minutes.
//   - Release channel K "\xff:released": Release PUBLISHes K on it. On
//     the lead primary, the release also names the next waiter in the
//     queue (K, a newline, its id) there and on that waiter's Client's own
//     channel, K "\xff:released:" and the Client's id (see waitLead).
//     Waiter ids are the Client's id (32 hex characters), a dot and a
//     number.
//   - On the lead primary (the first one given) only, the queue of blocked
//     Acquires: K "\xff:queue", a sorted set of waiter ids scored by
//     arrival order (0: the waiter the lead granted), and K
//     "\xff:queue:deadlines", a hash of each waiter's deadline (server
//     ms); both expire 500 ms after the last waiter's last attempt (see
//     Waiting, atop waiter.go); and K "\xff:gone", the token of the last
//     lease whose release handed the lock to the next waiter (see
//     Hand-off in lease.go), expiring with that lease's key.
//
// 0xFF never occurs in UTF-8, and lock keys must be valid UTF-8, so no
// lock key can be another lock's fence, void key or channel.

// sep joins a lock key to the names of its companion keys. 0xFF never
// occurs in valid UTF-8 and lock keys are valid UTF-8 (TryAcquire checks),
// so no lock key can ever equal another lock's fence, void key or channel.
const sep = "\xff:"

// keys are the Redis names used for one lock on every primary. See the
// comment atop this file.
type keys struct {
	lock    string // the lock key: the (prefixed) name exactly as given
	fence   string // this primary's fence counter; no TTL, never deleted
	channel string // the pub/sub channel Release publishes to
	queue   string // on the lead primary: blocked Acquires in arrival order (sorted set)
	queueDL string // on the lead primary: each queued Acquire's deadline (hash)
	gone    string // on the lead primary: the token of the last lease its release handed off
}

// void is the key that marks an abandoned acquire attempt's token.
func (k keys) void(token string) string { return k.lock + sep + "void:" + token }

// own is the release channel of the Client whose waiter ids start with
// client and a dot: the lead's release notices naming one of its waiters
// are published there too.
func (k keys) own(client string) string { return k.channel + ":" + client }

// label is the key holding the label of the lease granted to token.
func (k keys) label(token string) string { return k.lock + sep + "label:" + token }

func keysFor(lock string) keys {
	return keys{lock: lock, fence: lock + sep + "fence", channel: lock + sep + "released", queue: lock + sep + "queue", queueDL: lock + sep + "queue:deadlines", gone: lock + sep + "gone"}
}
