package pgadvisory

// Key (internals; the package doc in doc.go has what users need).
//
// The advisory lock key of a name (after the Client's Prefix) is Key(name):
// BLAKE2b with an 8-byte digest of the UTF-8 name, read big-endian as a
// signed int64 — the number Python computes with
//
//	int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big", signed=True)
//
// so a worker in any language that takes pg_advisory_xact_lock (or
// pg_advisory_lock) on that number excludes fencelock's holders of the same
// name, and the reverse. The key space is shared with every other user of
// single-bigint advisory locks in the database (the two-int4 form,
// pg_advisory_lock(int, int), is a separate space). Two names collide with
// probability 2⁻⁶⁴; among n names some pair collides with probability about
// n²/2⁶⁵ (one in 37 million for a million names). A collision makes two names
// share one lock — they exclude each other, never two holders of one name —
// and fences stay increasing per name, as they are cluster-wide. Use
// fencelock.Options.Prefix as a namespace (the prefix is hashed with the
// name) when several applications share a database.

import (
	"encoding/binary"

	"golang.org/x/crypto/blake2b"
)

// Key returns the advisory lock key of a store key (the lock name with the
// Client's prefix): the BLAKE2b digest of its UTF-8 bytes with an 8-byte
// output (digest_size=8, no key, no salt — a distinct function from a
// truncated BLAKE2b-512), read as a big-endian signed 64-bit integer.
//
// It is the number Python computes with
//
//	int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big", signed=True)
//
// so a worker in any language that locks pg_advisory_xact_lock(<that
// number>) excludes fencelock's holders of the same name, and the reverse.
func Key(name string) int64 {
	h, err := blake2b.New(8, nil)
	if err != nil {
		panic("pgadvisory: blake2b.New(8): " + err.Error()) // 8 is a valid size: unreachable
	}
	h.Write([]byte(name))
	var sum [8]byte
	return int64(binary.BigEndian.Uint64(h.Sum(sum[:0])))
}
