package fencelock

import (
	"crypto/rand"
	"encoding/hex"
)

// newToken returns a 128-bit random owner token as 32 lowercase hex chars.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	return hex.EncodeToString(b[:])
}
