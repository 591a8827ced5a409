package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// peersHeading is the heading line of the section `compare --peers-only`
// re-renders; renderPeers writes it.
const peersHeading = "## Next to the peers"

// serversHeader is the header of the document's first table, a row per
// backend compare measured; --peers-only reads the backends' labels from it.
var serversHeader = []string{"backend", "server in this run"}

// runPeersOnly re-renders the "Next to the peers" section of the existing
// document at out from the bench-peers results at peersPath, with the
// renderer compare uses, and writes the document back with every byte
// outside that section unchanged. It measures nothing and starts no
// server. The section runs from its heading through the line before the
// next "## " heading, or to the end of the file. Its backends are the rows
// of the document's server table, in their order, as compare listed them.
// The contention chart (img/contention.svg next to out), drawn from the
// peers file alone, is redrawn; the hand-off chart, which needs compare's
// own measurements, is left as it was. On any error the document is left
// as it was.
func runPeersOnly(out, peersPath string) error {
	if out == "-" || out == "" {
		return errors.New("--peers-only rewrites an existing document: give its path with --out, not '-'")
	}
	doc, err := os.ReadFile(out)
	if err != nil {
		return fmt.Errorf("--peers-only rewrites an existing document: %w", err)
	}
	if peersPath == "" {
		return errors.New("--peers-only needs the peer results: give --peers the JSON file make bench-peers writes")
	}
	p, err := readPeers(peersPath)
	if err != nil {
		return err
	}
	updated, err := replacePeersSection(doc, p)
	if err != nil {
		return fmt.Errorf("%s: %w", out, err)
	}
	// The contention chart is drawn from the peers file alone when it has
	// contention rows (see contentionPoints): redraw it with the section.
	d, chart := &compareDoc{peers: p}, ""
	if len(d.peerContention()) > 0 {
		chart = ", and img/contention.svg,"
		imgDir := filepath.Join(filepath.Dir(out), "img")
		if err := os.MkdirAll(imgDir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(imgDir, "contention.svg"), d.contentionChart(), 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(out, updated, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "compare: rewrote %q in %s%s from %s (bench-peers run %s)\n", peersHeading, out, chart, peersPath, p.Date)
	return nil
}

// replacePeersSection returns doc with its "Next to the peers" section
// rendered afresh from p, every other byte as it was.
func replacePeersSection(doc []byte, p *peersFile) ([]byte, error) {
	start, end, ok := sectionBounds(doc, peersHeading)
	if !ok {
		return nil, fmt.Errorf("no %q heading", peersHeading)
	}
	labels, err := tableLabels(doc, serversHeader)
	if err != nil {
		return nil, err
	}
	d := &compareDoc{peers: p}
	for _, l := range labels {
		d.results = append(d.results, backendResult{label: l})
	}
	var sec bytes.Buffer
	d.renderPeers(&sec)
	out := make([]byte, 0, len(doc)-(end-start)+sec.Len())
	out = append(out, doc[:start]...)
	out = append(out, sec.Bytes()...)
	return append(out, doc[end:]...), nil
}

// sectionBounds returns where the section headed by the line heading
// starts (the heading's first byte) and ends (the first byte of the next
// "## " heading line, or len(doc)); ok is false without such a line.
func sectionBounds(doc []byte, heading string) (start, end int, ok bool) {
	start = -1
	for i := 0; i < len(doc); {
		line, next := lineAt(doc, i)
		switch {
		case start < 0 && string(line) == heading:
			start = i
		case start >= 0 && bytes.HasPrefix(line, []byte("## ")):
			return start, i, true
		}
		i = next
	}
	if start < 0 {
		return 0, 0, false
	}
	return start, len(doc), true
}

// lineAt returns the line of doc starting at i, without its newline, and
// where the next line starts.
func lineAt(doc []byte, i int) (line []byte, next int) {
	n := bytes.IndexByte(doc[i:], '\n')
	if n < 0 {
		return doc[i:], len(doc)
	}
	return doc[i : i+n], i + n + 1
}

// tableLabels returns the first cells of the rows of doc's first markdown
// table with the given header.
func tableLabels(doc []byte, header []string) ([]string, error) {
	head := "| " + strings.Join(header, " | ") + " |"
	_, rest, ok := strings.Cut(string(doc), "\n"+head+"\n")
	if !ok {
		return nil, fmt.Errorf("no table %q naming the backends", head)
	}
	var labels []string
	for _, line := range strings.Split(rest, "\n")[1:] { // [0] is the |---| line
		if !strings.HasPrefix(line, "| ") {
			break
		}
		cell, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " |")
		labels = append(labels, cell)
	}
	if len(labels) == 0 {
		return nil, fmt.Errorf("table %q has no rows", head)
	}
	return labels, nil
}
