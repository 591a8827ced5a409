package redis

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestKeysForDocumentedExamples(t *testing.T) {
	for _, tc := range []struct{ lock, fence, channel, line string }{
		{"orders:42", "{orders:42}:fence", "{orders:42}:released", "{orders:42}:waiters:k:fencelock"},
		{"{user:7}:jobs", "{user:7}:jobs:fence", "{user:7}:jobs:released", "{user:7}:jobs:waiters:fencelock"},
		{"a{b", "{a{b}:fence", "{a{b}:released", ""},            // no '}': the whole key is the tag
		{"ü/日本", "{ü/日本}:fence", "{ü/日本}:released", ""},         // bytes, not runes
		{"x{y}z{w}", "x{y}z{w}:fence", "x{y}z{w}:released", ""}, // first tag wins
	} {
		k := keysFor(tc.lock)
		if k.lock != tc.lock || k.fence != tc.fence || k.channel != tc.channel || tc.line != "" && k.queue != tc.line {
			t.Errorf("keysFor(%q) = %+v, want fence %q channel %q line %q", tc.lock, k, tc.fence, tc.channel, tc.line)
		}
	}
}

func TestKeySlotKnownValues(t *testing.T) {
	// From the Redis Cluster specification and CLUSTER KEYSLOT.
	if got := crc16("123456789"); got != 0x31C3 {
		t.Fatalf("crc16(123456789) = %#x, want 0x31c3", got)
	}
	for key, slot := range map[string]int{
		"foo": 12182, "somekey": 11058, "{user1000}.following": 3443, "{user1000}.followers": 3443,
		"foo{}{bar}": keySlotWhole("foo{}{bar}"), "foo{{bar}}zap": keySlotWhole("{bar"), "foo{bar}{zap}": keySlotWhole("bar"),
	} {
		if got := keySlot(key); got != slot {
			t.Errorf("keySlot(%q) = %d, want %d", key, got, slot)
		}
	}
}

func keySlotWhole(s string) int { return int(crc16(s) & 16383) }

// TestKeysShareSlot: whatever the name, the fence key, the channel and the
// void key hash to the lock key's slot, so scripts never cross slots.
func TestKeysShareSlot(t *testing.T) {
	names := []string{"a}b", "x{}y", "}", "{", "{}", "}{", "{}}", "a{}b}", "}}}{{{", "ab}{cd", "{}x}"}
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = "ab{}:/ü"
	for range 20000 {
		var b strings.Builder
		for range 1 + rng.IntN(12) {
			b.WriteByte(alphabet[rng.IntN(len(alphabet))])
		}
		names = append(names, b.String())
	}
	for _, n := range names {
		k := keysFor(n)
		if ref := keysForRef(n); k != ref {
			t.Fatalf("keysFor(%q) = %+v, want %+v (by slotBase)", n, k, ref)
		}
		want := keySlot(n)
		for _, other := range []string{k.fence, k.channel, k.queue, k.void("0123456789abcdef0123456789abcdef"), k.wait("0123456789abcdef0123456789abcdef")} {
			if got := keySlot(other); got != want {
				t.Fatalf("name %q: %q is in slot %d, the lock key in %d", n, other, got, want)
			}
		}
		if k.fence == n || k.channel == n {
			t.Fatalf("name %q: auxiliary key equals the lock key", n)
		}
	}
}

func TestSlotTagCoversEverySlot(t *testing.T) {
	for s := range 16384 {
		tag := slotTag(s)
		if tag == "" || strings.ContainsAny(tag, "{}") || keySlot(tag) != s {
			t.Fatalf("slotTag(%d) = %q (slot %d)", s, tag, keySlot(tag))
		}
	}
}

func TestMillisRoundsUp(t *testing.T) {
	for d, want := range map[int64]int64{1: 1, 999_999: 1, 1_000_000: 1, 1_000_001: 2, 10_000_000: 10} {
		if got := millis(time.Duration(d)); got != want {
			t.Errorf("millis(%dns) = %d, want %d", d, got, want)
		}
	}
}

// TestLockKeysNeverMeetDerivedKeys: for names built from the characters
// that matter (braces, the suffixes), no lock key equals another name's
// lock key or any name's fence, channel or void key, and unreserved names
// map to themselves.
func TestLockKeysNeverMeetDerivedKeys(t *testing.T) {
	parts := []string{"x", "{", "}", "{x}", ":fence", ":released", ":fencelock", ":void:", ":wait:", ":queue", ":line", ":waiters", ":k", "0123456789abcdef0123456789abcdef", ":"}
	names := map[string]bool{}
	var gen func(prefix string, depth int)
	gen = func(prefix string, depth int) {
		if prefix != "" {
			names[prefix] = true
		}
		if depth == 0 {
			return
		}
		for _, p := range parts {
			gen(prefix+p, depth-1)
		}
	}
	gen("", 4)
	const tok = "0123456789abcdef0123456789abcdef"
	lockOf := map[string]string{}
	lineOf := map[string]string{}
	derived := map[string]string{}
	for n := range names {
		k := keysFor(n)
		if other, dup := lockOf[k.lock]; dup {
			t.Fatalf("names %q and %q share lock key %q", n, other, k.lock)
		}
		lockOf[k.lock] = n
		if other, dup := lineOf[k.queue]; dup {
			t.Fatalf("names %q and %q share waiter line %q", n, other, k.queue)
		}
		lineOf[k.queue] = n
		for _, d := range []string{k.fence, k.channel, k.queue, k.void(tok), k.wait(tok)} {
			derived[d] = n
		}
		if !reserved(n) && k.lock != n {
			t.Fatalf("unreserved name %q has lock key %q", n, k.lock)
		}
		if keySlot(k.lock) != keySlot(n) || keySlot(k.fence) != keySlot(n) {
			t.Fatalf("name %q: lock key or fence key in another slot", n)
		}
	}
	for lock, n := range lockOf {
		if m, ok := derived[lock]; ok {
			t.Fatalf("lock key %q of name %q is a derived key of name %q", lock, n, m)
		}
	}
	t.Logf("%d names checked", len(names))
}

// keysForRef is keysFor as specified, by string concatenation on
// slotBase: keysFor builds the same keys in one allocation.
func keysForRef(name string) keys {
	lock := lockKey(name)
	base := slotBase(lock)
	line := base + lineSuffix
	if base != lock {
		line = base + bracedLineSuffix
	}
	return keys{lock: lock, fence: base + ":fence", channel: base + ":released", queue: line, base: base}
}

func TestKeysForAllocs(t *testing.T) {
	for _, n := range []string{"orders:42", "{user:7}:jobs", "a}b"} {
		if a := testing.AllocsPerRun(100, func() { _ = keysFor(n) }); a > 1 {
			t.Errorf("keysFor(%q): %v allocations, want at most 1", n, a)
		}
	}
}
