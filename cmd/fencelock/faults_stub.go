package main

import (
	"context"
	"errors"
)

// faultTable is replaced by the fault-test runner (branch faults).
func faultTable(ctx context.Context) (string, error) {
	return "", errors.New("not wired yet")
}
