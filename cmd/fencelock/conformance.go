package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/fencelock/fencelock/conformance"
)

func runConformance(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("conformance", flag.ContinueOnError)
	var sf storeFlags
	sf.register(fs)
	filter := fs.String("run", "", "run only checks whose name contains this")
	list := fs.Bool("list", false, "list the checks and exit")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *list {
		for _, n := range conformance.Checks() {
			fmt.Println(n)
		}
		return nil
	}
	url, cleanup, err := sf.open(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	fmt.Printf("conformance suite against %s (lock names under a random fencelock-conformance-* prefix, cleaned up after)\n", url)
	res := conformance.Run(ctx, func(ctx context.Context) (conformance.Harness, error) {
		return conformance.NewURLHarness(ctx, url)
	}, *filter, os.Stdout)
	var pass, fail, skip int
	for _, r := range res {
		switch r.Outcome {
		case "pass":
			pass++
		case "fail":
			fail++
		default:
			skip++
		}
	}
	fmt.Printf("%d passed, %d failed, %d skipped\n", pass, fail, skip)
	if fail > 0 {
		return fmt.Errorf("%d conformance check(s) failed", fail)
	}
	return nil
}
