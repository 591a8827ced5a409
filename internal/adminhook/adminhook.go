// Package adminhook hands the conformance suite, and this module's tests,
// the out-of-band admin hooks of a Client's backend (driver.Admin and the
// hooks beside it: end another holder's lock, cut sessions, drop fence
// state). They are not part of the application API: Client.As does not
// hand them out, and a package outside this module cannot import this one.
package adminhook

import "github.com/fencelock/fencelock/driver"

// of is set by package fencelock when it is initialised (see Register).
var of func(c any) (driver.Admin, bool)

// Register is called once, by package fencelock, with the function that
// returns a *fencelock.Client's backend as a driver.Admin.
func Register(f func(c any) (driver.Admin, bool)) { of = f }

// Of returns the admin hooks of c, a *fencelock.Client, and whether its
// backend has them.
func Of(c any) (driver.Admin, bool) { return of(c) }
