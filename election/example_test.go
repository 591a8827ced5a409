package election_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fencelock"
	_ "github.com/fencelock/fencelock/backends/memory" // registers mem://
	"github.com/fencelock/fencelock/election"
	"github.com/fencelock/fencelock/guard"
)

// A leader that pauses past its TTL is replaced, and the writes it makes
// when it resumes, carrying its old term, are refused by the resource.
func Example() {
	ctx := context.Background()
	c, err := fencelock.Open(ctx, "mem://election-example") // etcd://…, redis://… in production
	if err != nil {
		panic(err)
	}
	defer c.Close()

	// node-a's renewals stop, as a frozen process's do: its term lasts one TTL.
	frozen, _ := election.New(c, "scheduler", &election.Options{TTL: 100 * time.Millisecond, AutoRenew: fencelock.Bool(false)})
	healthy, _ := election.New(c, "scheduler", &election.Options{TTL: 10 * time.Second})
	var schedule guard.Counter // the resource the leader writes, checking terms

	a, err := frozen.Campaign(ctx, "node-a")
	if err != nil {
		panic(err)
	}
	va, _ := schedule.Claim(ctx, a.Fence())
	fmt.Println("node-a leads, term", a.Fence())

	// node-a pauses here. node-b campaigns and leads once node-a's term ran out.
	b, err := healthy.Campaign(ctx, "node-b")
	if err != nil {
		panic(err)
	}
	defer b.Resign(ctx)
	ld, _ := healthy.Leader(ctx)
	fmt.Println("leader:", ld.Value, "term", ld.Term)
	vb, _ := schedule.Claim(ctx, b.Fence())
	_ = schedule.WriteClaimed(ctx, b.Fence(), vb+1)

	// node-a resumes and writes with its old term: refused.
	err = schedule.WriteClaimed(ctx, a.Fence(), va+1)
	fmt.Println("node-a's write with term", a.Fence(), "refused:", errors.Is(err, guard.ErrStale))
	fmt.Println("node-a's term ended:", errors.Is(a.Err(), fencelock.ErrLeaseLost))
	// Output:
	// node-a leads, term 1
	// leader: node-b term 2
	// node-a's write with term 1 refused: true
	// node-a's term ended: true
}

// Run is the controller shape: work while leading, stop when leadership ends.
func ExampleElection_Run() {
	ctx, cancel := context.WithCancel(context.Background())
	c, _ := fencelock.Open(ctx, "mem://election-run-example")
	defer c.Close()
	e, _ := election.New(c, "controller", nil)
	err := e.Run(ctx, election.Config{
		Value: "pod-1",
		OnStartedLeading: func(ctx context.Context, t *election.Term) {
			fmt.Println("leading as", t.Value(), "in term", t.Fence())
			cancel() // the process is shutting down
			<-ctx.Done()
		},
		OnStoppedLeading: func() { fmt.Println("stopped leading") },
		ReleaseOnCancel:  true,
	})
	fmt.Println(errors.Is(err, context.Canceled))
	// Output:
	// leading as pod-1 in term 1
	// stopped leading
	// true
}
