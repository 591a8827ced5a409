//go:build !linux

package main

import "syscall"

// dieWithParent: only Linux can tie a child's life to its parent's; the
// demo kills its leader process itself.
func dieWithParent() *syscall.SysProcAttr { return nil }
