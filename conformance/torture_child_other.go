//go:build !linux

package conformance

import (
	"errors"
	"time"
)

// childWorkers: freezing a client process needs SIGSTOP and Pdeathsig
// (Linux); elsewhere no torture worker runs in a child.
const childWorkers = false

func startTortureChild(url, prefix string, ttl time.Duration, args []string) (*childProc, error) {
	return nil, errors.ErrUnsupported
}

func (p *childProc) freeze() error { return errors.ErrUnsupported }
func (p *childProc) thaw() error   { return errors.ErrUnsupported }
