package fencelock

import "github.com/fencelock/fencelock/driver"

// newToken returns a 128-bit random owner token as 32 lowercase hex chars.
func newToken() string { return driver.NewToken() }
