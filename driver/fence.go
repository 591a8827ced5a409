package driver

import "strconv"

// Fence is a fencing token. For one lock name, every new lease's fence is
// greater than every earlier lease's (see Capabilities.Fence for how strong
// a backend's promise is). Send it with every write to the protected
// resource, which must refuse a write carrying a fence lower than one it has
// seen (package guard does that). 0 means "no fence". Fences fit in an int64.
//
// Package fencelock names the same type fencelock.Fence (an alias).
type Fence uint64

// Int64 returns the fence as an int64, for SQL bigint and JSON numbers.
func (f Fence) Int64() int64 { return int64(f) }

func (f Fence) String() string { return strconv.FormatUint(uint64(f), 10) }
