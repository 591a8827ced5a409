package main

// The backends the CLI can open by URL.
import (
	_ "github.com/fencelock/fencelock/backends/memory"
)
