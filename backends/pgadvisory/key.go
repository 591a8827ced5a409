package pgadvisory

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
