package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
)

// peersFile is docs/bench/peers.json, written by `make bench-peers`.
type peersFile struct {
	raw map[string]any
}

// readPeers reads the peer benchmark results.
func readPeers(path string) (*peersFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("no peer results (run `make bench-peers` first): %w", err)
	}
	var p peersFile
	if err := json.Unmarshal(b, &p.raw); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &p, nil
}

func (d *compareDoc) renderPeers(b *bytes.Buffer) {
	b.WriteString("## Next to the peers\n\n")
	if d.peers == nil {
		fmt.Fprintf(b, "Peer numbers were not included in this generation: %v.\n\n", d.peersErr)
		return
	}
}

// peerContention is the peers' contention results, for the chart.
func (d *compareDoc) peerContention() []contentionPoint { return nil }
