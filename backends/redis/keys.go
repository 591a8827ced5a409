package redis

// Keys (internals; the package doc in doc.go has what users need).
//
// For a lock whose store key is K (the name, after Options.Prefix):
//
//   - Lock key K, exactly as named (but see Reserved names). While held it
//     is a string holding the
//     owner token (32 hex characters, new for every grant) with a PX
//     expiry: the same shape as redis-py's Lock and redsync, so a Python or
//     redsync worker locking the same key string excludes fencelock clients
//     and is excluded by them. A key that exists is never taken over, and
//     a key without an expiry (redis-py timeout=None) is never freed by
//     fencelock: TryAcquire reports it and waits.
//   - Fence key B:fence, where B is K if K holds a valid hash tag ("{...}"
//     with something inside), else {K} if K has no '}', else {T}K where T
//     is the smallest integer, written in base 36, whose hash slot is K's.
//     For K = "orders:42" it is "{orders:42}:fence"; for "{user:7}:jobs" it
//     is "{user:7}:jobs:fence". It holds the last fence as a decimal
//     integer, has no TTL and is never deleted (release and expiry leave it;
//     one small key per lock name ever used).
//   - Release channel B:released: a release that found waiters' entries
//     but none of them live PUBLISHes K on it (see Waiting, atop waiter.go).
//   - Label key B:label:<token> ("<fence> <label>"), while a labelled
//     grant is held: written by the script that grants, deleted by the
//     release or abandon that frees the grant, else expiring with the lock
//     (see Labels and Inspect, atop inspect.go).
//   - Void key B:void:<token>, only after an acquire attempt whose reply was
//     lost (see Operations, atop redis.go); it expires after 5 minutes.
//   - Waiter line B:waiters:fencelock if B is K itself (K has a hash tag),
//     else B:waiters:k:fencelock, and liveness keys B:wait:<token>, only
//     while Acquire calls wait (see Waiting, atop waiter.go). Two lock keys can share B
//     ("x" and "{x}"); the two suffixes keep their lines apart.
//
// All these keys share a hash tag of K's slot, so every script touches one
// Redis Cluster slot.
//
// The scripts use GETDEL and SET ... GET: the backend needs Redis 6.2 or
// later (or a server compatible with it).
//
// Reserved names (internals; the package doc in doc.go has what users need).
//
// A derived key is a base with a valid hash tag followed by ":fence",
// ":released", ":queue", or ":void:" or ":wait:" and 32 hex digits, so a
// name such as "{x}:fence" spells the fence key of the name "x". Such names
// are reserved: a store key that has a valid hash tag ("{...}" with
// something inside) and ends in ":fence", ":released", ":queue",
// ":fencelock", or ":void:" or ":wait:" followed by 32 lowercase hex digits
// gets the lock key K + ":fencelock"
// instead of K (same hash tag, so same slot; its fence key is
// K + ":fencelock:fence"). Lock keys and derived keys thus never meet, and
// distinct names never share a lock key. (The waiter line ends in
// ":fencelock" too, but is no escaped key: B + ":waiters" and
// B + ":waiters:k" are not reserved. ":queue", the waiter queue of earlier versions, stays
// reserved, so that no name changed its lock key; see Mixed versions.)
// Every other name, which is every
// name without braces, is its own lock key and interoperates with
// redis-py and redsync; a reserved name interoperates under its escaped
// key only.
//
// Mixed versions (internals; the package doc in doc.go has what users need).
//
// Earlier versions kept waiters in a sorted set B:queue, then in a list
// B:line[:k]:fencelock whose liveness values held no label (the waiter's
// label had a key of its own); this one uses the list above, under another
// name again, so a rolling deploy with old and new Clients on one lock
// never meets a key of the wrong type or a liveness value it cannot parse
// (an earlier release script would fail on a labelled one). Both kinds of
// Client share the lock key, the fence key and its formula, and the
// reserved names (no name has another lock key in either version), so a
// lock still has at most one holder and fences still grow. What degrades
// is waiting: each version sees only its own waiters, so a Client takes a
// free lock past the other version's waiters (as a peer such as redis-py
// does), and a release hands over only to its own version's waiters; the
// other version's waiters find the lock free when they next ask, at the
// holder's expiry or their refresh (at most a second, or TTL/4, later).
// Once the old Clients are gone, their B:queue or B:line expires by
// itself.

import (
	"strconv"
	"strings"
	"sync"
)

// keys are the Redis names used for one lock. Their layout is described at the top of this file.
type keys struct {
	lock    string // the lock key: the (prefixed) name as given, or escaped (see lockKey)
	fence   string // the fence counter; no TTL, never deleted
	channel string // the pub/sub channel Release publishes to
	queue   string // the waiter line (a list of tokens): base + lineSuffix
	base    string // the hash-tagged base of fence, channel and line
}

// void is the key that marks an abandoned acquire attempt's token.
func (k keys) void(token string) string { return k.base + ":void:" + token }

// label is the key holding the label and fence of the lease granted to
// token (label.lua), beside the lock key, which keeps the bare token.
func (k keys) label(token string) string { return k.base + ":label:" + token }

// wait is the liveness key of a queued waiter's token (grant.lua).
func (k keys) wait(token string) string { return k.base + ":wait:" + token }

// keysFor maps a store key (the name after Options.Prefix) to its keys.
// The fence key and the channel share a hash tag whose Cluster slot is the
// lock key's slot, so one script can touch both keys on any deployment.
//
// The base is slotBase(lock). The derived keys are slices of one string,
// built in one allocation: keysFor runs on every attempt.
func keysFor(name string) keys {
	lock := lockKey(name)
	// base = "{" + tag + "}" + lock + post, or lock itself.
	var tag, post string
	braced, lineSuf := false, lineSuffix
	switch {
	case hasHashTag(lock):
	case !strings.Contains(lock, "}"):
		braced, post, lineSuf = true, "}", bracedLineSuffix
	default:
		braced, tag, lineSuf = true, slotTag(keySlot(lock)), bracedLineSuffix
	}
	nb := len(lock)
	if braced {
		nb += len("{") + len(tag) + len(post)
		if post == "" {
			nb += len("}")
		}
	}
	var sb strings.Builder
	sb.Grow(3*nb + len(":fence") + len(":released") + len(lineSuf))
	for _, suf := range [...]string{":fence", ":released", lineSuf} {
		if braced {
			sb.WriteByte('{')
			if post == "" {
				sb.WriteString(tag)
				sb.WriteByte('}')
			}
		}
		sb.WriteString(lock)
		sb.WriteString(post)
		sb.WriteString(suf)
	}
	all := sb.String()
	fence := all[:nb+len(":fence")]
	channel := all[len(fence) : len(fence)+nb+len(":released")]
	queue := all[len(fence)+len(channel):]
	base := lock
	if nb != len(lock) {
		base = fence[:nb]
	}
	return keys{lock: lock, fence: fence, channel: channel, queue: queue, base: base}
}

// The waiter line is a list, which replaced the sorted set <base>:queue of
// earlier versions, and then the list <base>:line[:k]:fencelock of
// unlabelled liveness values. Its name ends in escapeSuffix, a suffix reserved since
// before the line existed, so that no lock key of this version or of an
// earlier one can be a line (a name spelling it is escaped by both), and
// no lock key changed when the line came: the set of reserved names is the
// same (see Mixed versions at the top of this file). ":queue" stays reserved for
// the same reason.
//
// Two lock keys can share a base: a key with a hash tag is its own base,
// and the base made for a key without one, such as "{a}" for "a", is
// another valid lock key. A shared fence key or channel is harmless (the
// fence only grows; grants name their token), but a shared line would let
// a release hand a lock to another lock's waiter. So the line of a lock
// key that is its own base ends in lineSuffix, and that of any other in
// bracedLineSuffix, which never ends in lineSuffix: distinct lock keys
// have distinct lines.
const (
	lineSuffix       = ":waiters" + escapeSuffix
	bracedLineSuffix = ":waiters:k" + escapeSuffix
)

// escapeSuffix is appended to the lock key of a name that could otherwise
// be one of the keys the backend derives from another name (see lockKey).
const escapeSuffix = ":fencelock"

// lockKey returns the lock key of the store key name: name itself (so that
// redis-py and redsync, which lock the key exactly as named, interoperate),
// unless name is reserved, in which case name + escapeSuffix.
//
// Every derived key (fence, channel, line, void, wait) is a base with a
// valid hash tag followed by ":fence", ":released", a line suffix, or ":void:"
// or ":wait:" and a 32-hex token (":queue", the waiter queue of earlier
// versions, stays reserved too); a
// suffix without braces leaves the hash tag where it was. So a name can be
// a derived key only if it has a valid hash tag and ends in one of those
// suffixes; such names are reserved, and so are hash-tagged names ending in
// escapeSuffix, so that the escaped keys are distinct from every unescaped
// one. A line ends in escapeSuffix, yet is no escaped key: an escaped key
// is a reserved name plus escapeSuffix, and neither base + ":waiters" nor
// base + ":waiters:k" is reserved. The escaped key keeps the name's hash tag, hence its Cluster slot,
// and ends in escapeSuffix, which no derived key does: lock keys and
// derived keys never meet, and distinct names have distinct lock keys.
func lockKey(name string) string {
	if reserved(name) {
		return name + escapeSuffix
	}
	return name
}

// reserved reports whether name needs escaping (see lockKey).
func reserved(name string) bool {
	if !hasHashTag(name) {
		return false
	}
	for _, s := range []string{":fence", ":released", ":queue", escapeSuffix} {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	const tokenLen = len(":void:") + 32 // ":wait:" is as long
	if len(name) >= len(":label:")+32 && isHex(name[len(name)-32:]) && name[len(name)-32-len(":label:"):len(name)-32] == ":label:" {
		return true
	}
	if len(name) < tokenLen || !isHex(name[len(name)-32:]) {
		return false
	}
	p := name[len(name)-tokenLen : len(name)-32]
	return p == ":void:" || p == ":wait:"
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// slotBase returns a string whose hash tag hashes to lock's Cluster slot:
//   - lock itself, if it holds a valid hash tag ("{...}" with at least one
//     byte inside; Redis then hashes only that part);
//   - "{" + lock + "}" if lock has no '}' (the whole key is hashed, and the
//     braces make all of it the tag);
//   - otherwise (a '}' but no valid tag, e.g. "a}b" or "x{}y"): "{" + t +
//     "}" + lock, where t is the smallest integer, written in base 36, whose
//     slot is lock's slot.
func slotBase(lock string) string {
	switch {
	case hasHashTag(lock):
		return lock
	case !strings.Contains(lock, "}"):
		return "{" + lock + "}"
	}
	return "{" + slotTag(keySlot(lock)) + "}" + lock
}

// hasHashTag reports whether Redis Cluster would hash only a part of key:
// a '{' followed later by a '}' with at least one byte between them.
func hasHashTag(key string) bool {
	s := strings.IndexByte(key, '{')
	if s < 0 {
		return false
	}
	e := strings.IndexByte(key[s+1:], '}')
	return e > 0
}

// keySlot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of its hash
// tag, or of the whole key without one, modulo 16384.
func keySlot(key string) int {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	return int(crc16(key) & 16383)
}

func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

var (
	slotTagsOnce sync.Once
	slotTags     []string
)

// slotTag returns the smallest integer, in base 36, whose slot is slot.
func slotTag(slot int) string {
	slotTagsOnce.Do(func() {
		slotTags = make([]string, 16384)
		for left, i := 16384, int64(0); left > 0; i++ {
			t := strconv.FormatInt(i, 36)
			if s := keySlot(t); slotTags[s] == "" {
				slotTags[s] = t
				left--
			}
		}
	})
	return slotTags[slot]
}
