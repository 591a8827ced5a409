package zookeeper

// Node layout and interoperability (internals; the package doc in doc.go has what users need).
//
// The lock whose store key is K (the lock name with Options.Prefix in
// front) is the node
//
//	P = Root + "/" + escape(K)
//
// (LockPath computes it) and every contender is a child of P. escape
// percent-encodes "%" and "/" (so "a" and "a/b" are sibling locks, not a
// lock and a child of it), the characters ZooKeeper refuses in a path and
// a leading "."; other names map to themselves, so the name "job" under
// zk://host/locks is /locks/job. P and the missing parts of Root are
// created as CONTAINER nodes, which ZooKeeper deletes once they are empty.
//
// Our contender node is EPHEMERAL_SEQUENTIAL and named in Curator's
// protected form
//
//	P/_c_<owner token as a 36-character UUID>-lock-<10-digit sequence>
//
// The contender with the lowest sequence number holds the lock. Every
// child whose name ends in "lock-", "__lock__" or "__rlock__" followed by
// the 10-digit sequence counts as a contender: Curator's InterProcessMutex
// (`_c_<uuid>-lock-<seq>`), go-zookeeper's zk.Lock (`_c_<hex32>-lock-<seq>`)
// and kazoo's Lock (`<hex32>__lock__<seq>`) or ReadLock. So a Curator
// InterProcessMutex or a go-zookeeper zk.NewLock on P and this backend
// exclude each other both ways. kazoo's Lock sees only its own "__lock__"
// nodes unless it is made with extra_lock_patterns=["-lock-"]: without
// that we respect kazoo, but kazoo does not respect us. Other children of
// P are ignored.
//
// A create that fails with a lost connection may still have created our
// node: the backend then finds it by its protected prefix (our owner
// token), as Curator does, instead of creating a second one; a create
// abandoned with its outcome unknown (ctx ended, request timeout) is
// cleaned up in the background (any node with our prefix is deleted).

import (
	"path"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Node names. A contender node is written in Curator's protected form
//
//	_c_<uuid36>-lock-<seq>
//
// and every form below is read as a contender, ordered by its sequence.
const (
	protectedPrefix = "_c_"
	lockInfix       = "-lock-"
	seqDigits       = 10 // ZooKeeper's %010d sequence suffix
)

// contenderSuffixes are the name parts, just before the sequence number,
// of the lock recipes whose nodes count as contenders: Curator's
// InterProcessMutex and go-zookeeper's zk.Lock ("lock-"), kazoo's Lock and
// WriteLock ("__lock__") and kazoo's ReadLock ("__rlock__", so a shared
// reader also excludes us).
var contenderSuffixes = []string{"lock-", "__lock__", "__rlock__"}

// LockPath returns the ZooKeeper path of the lock whose store key is key
// (the lock name with fencelock.Options.Prefix in front) under root (the
// URL path or Config.Root; "" or "/" for the top). Its children are the
// contenders. Give it to zk.NewLock, Curator's InterProcessMutex or
// kazoo's Lock to share the lock.
func LockPath(root, key string) string {
	return path.Join("/", root, escape(root, key))
}

// escape maps a store key to one ZooKeeper node name: "%" and "/" are
// percent-encoded (so "a" and "a/b" are siblings, not parent and child),
// as are the characters ZooKeeper refuses in paths (controls, U+007F to
// U+009F, U+D800 to U+F8FF, U+FFF0 to U+FFFF) and a leading "." (so "."
// and ".." are never path steps). Under the root "/" the reserved name
// "zookeeper" becomes "%7Aookeeper". Every other name maps to itself.
func escape(root, key string) string {
	if key == "zookeeper" && strings.Trim(root, "/") == "" {
		return "%7Aookeeper"
	}
	if !needsEscape(key) {
		return key
	}
	var b strings.Builder
	b.Grow(len(key) + 8)
	for i := 0; i < len(key); {
		r, w := utf8.DecodeRuneInString(key[i:])
		if r == '%' || r == '/' || (i == 0 && r == '.') || badRune(r) {
			for j := i; j < i+w; j++ {
				b.WriteByte('%')
				b.WriteString(strings.ToUpper(strconv.FormatUint(uint64(key[j])>>4, 16)))
				b.WriteString(strings.ToUpper(strconv.FormatUint(uint64(key[j])&15, 16)))
			}
		} else {
			b.WriteString(key[i : i+w])
		}
		i += w
	}
	return b.String()
}

func needsEscape(key string) bool {
	if strings.HasPrefix(key, ".") {
		return true
	}
	for _, r := range key {
		if r == '%' || r == '/' || badRune(r) {
			return true
		}
	}
	return false
}

// badRune reports the runes ZooKeeper refuses in a path.
func badRune(r rune) bool {
	return r <= 0x1f || (r >= 0x7f && r <= 0x9f) || (r >= 0xd800 && r <= 0xf8ff) || r >= 0xfff0 || r == utf8.RuneError
}

// nodePrefix is the name of our contender node before ZooKeeper appends
// the sequence number: "_c_", the 32-hex-digit owner token formatted as a
// UUID (8-4-4-4-12, the form Curator writes), "-lock-".
func nodePrefix(token string) string {
	if len(token) != 32 {
		return protectedPrefix + token + lockInfix
	}
	// One concatenation: one allocation.
	return protectedPrefix + token[:8] + "-" + token[8:12] + "-" + token[12:16] + "-" + token[16:20] + "-" + token[20:] + lockInfix
}

// lockPath is LockPath(root, key) for a root that path.Clean leaves as it
// is, with one allocation (it is computed at every acquire).
func lockPath(root, key string) string {
	esc := escape(root, key)
	switch {
	case esc == "" || path.Clean(root) != root:
		return LockPath(root, key)
	case root == "/":
		return "/" + esc
	}
	return root + "/" + esc
}

// seqOf returns the sequence number of a contender node name, and false
// for a name that no known lock recipe writes.
func seqOf(name string) (int64, bool) {
	if len(name) < seqDigits {
		return 0, false
	}
	head, digits := name[:len(name)-seqDigits], name[len(name)-seqDigits:]
	ok := false
	for _, s := range contenderSuffixes {
		if strings.HasSuffix(head, s) {
			ok = true
			break
		}
	}
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(digits, 10, 64) // "-000000001" after an overflow
	if err != nil {
		return 0, false
	}
	return n, true
}

// queue is the contenders under a lock path, as read by one Children call.
type queue struct {
	ours    string // our node's name ("" if absent)
	ourSeq  int64
	extra   []string // more nodes with our prefix (a create retried after a connection loss)
	lowest  string   // the contender with the lowest sequence
	pred    string   // the contender just ahead of ours ("" if none or ours is absent)
	howMany int      // contenders
}

// scan reads children: our node is the lowest-sequence child named with
// prefix (others with it are extras to delete).
func scan(children []string, prefix string) queue {
	var q queue
	lowSeq, predSeq := int64(0), int64(0)
	for _, c := range children {
		if !strings.HasPrefix(c, prefix) {
			continue
		}
		s, ok := seqOf(c)
		if !ok {
			continue
		}
		if q.ours == "" || s < q.ourSeq {
			if q.ours != "" {
				q.extra = append(q.extra, q.ours)
			}
			q.ours, q.ourSeq = c, s
		} else {
			q.extra = append(q.extra, c)
		}
	}
	for _, c := range children {
		s, ok := seqOf(c)
		if !ok || (q.ours != "" && strings.HasPrefix(c, prefix) && c != q.ours) {
			continue
		}
		q.howMany++
		if q.lowest == "" || s < lowSeq {
			q.lowest, lowSeq = c, s
		}
		if q.ours != "" && s < q.ourSeq && (q.pred == "" || s > predSeq) {
			q.pred, predSeq = c, s
		}
	}
	return q
}
