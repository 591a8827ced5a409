// Command benchpeers runs fencelock next to the peer lock libraries on
// real servers it starts itself, in interleaved rounds, and writes the
// results as JSON (-out; schema: peers.Result) and Markdown (the same path
// with .md; also printed to stdout).
//
//	cd bench && go run ./cmd/benchpeers -out ../docs/bench/peers.json
//	cd bench && go run ./cmd/benchpeers -quick -stores redis,etcd
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/fencelock/fencelock/bench/peers"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "benchpeers:", err)
		os.Exit(1)
	}
}

func run() error {
	out := flag.String("out", "", "write the JSON here, and the Markdown next to it (.md); empty: stdout only")
	quick := flag.Bool("quick", false, "a 1–2 minute run with small counts")
	rounds := flag.Int("rounds", 0, "interleaved rounds (0: 5, or 2 with -quick)")
	stores := flag.String("stores", strings.Join(peers.Stores(), ","), "stores to run, comma-separated")
	note := flag.String("note", "", "a note on the machine's state (e.g. loaded by other work), stored in the results")
	flag.Parse()
	cfg := peers.FullConfig()
	if *quick {
		cfg = peers.QuickConfig()
	}
	if *rounds > 0 {
		cfg.Rounds = *rounds
	}
	cfg.Log = os.Stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	env, err := peers.Start(sctx, strings.Split(*stores, ","))
	cancel()
	if err != nil {
		return err
	}
	defer env.Close()
	res := peers.Run(ctx, env, cfg)
	res.Machine.Note = *note

	var md bytes.Buffer
	peers.Markdown(&md, res)
	os.Stdout.Write(md.Bytes())
	if *out == "" {
		return nil
	}
	js, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(*out, append(js, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(strings.TrimSuffix(*out, filepath.Ext(*out))+".md", md.Bytes(), 0o644)
}
