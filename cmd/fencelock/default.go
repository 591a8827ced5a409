package main

import (
	"context"
	"fmt"
	"os"
)

// startDefault starts the embedded default store.
func startDefault(ctx context.Context) (string, func(), error) {
	fmt.Fprintln(os.Stderr, "fencelock: no --url: using the in-process mem:// store")
	return "mem://", func() {}, nil
}
