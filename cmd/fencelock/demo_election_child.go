package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/election"
)

// electionChildEnv carries the spec of a leader process that `demo
// election` starts and kills (SIGKILL): no release, no goodbye to the
// store, its connections closed by the kernel.
const electionChildEnv = "FENCELOCK_ELECTION_CHILD"

type electionChildSpec struct {
	URL, Prefix, Name, Value string
	TTL                      time.Duration
}

// maybeRunElectionChild runs the leader child and exits if this process
// was started as one.
func maybeRunElectionChild() {
	v := os.Getenv(electionChildEnv)
	if v == "" {
		return
	}
	var s electionChildSpec
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := client(ctx, s.URL, &fencelock.Options{Prefix: s.Prefix})
	if err != nil {
		fmt.Println("ERROR", strings.ReplaceAll(err.Error(), "\n", " "))
		os.Exit(1)
	}
	e, err := election.New(c, s.Name, &election.Options{TTL: s.TTL})
	if err == nil {
		var t *election.Term
		if t, err = e.Campaign(ctx, s.Value); err == nil {
			fmt.Println("LEADING", t.Fence())
			<-ctx.Done() // leads, renewing, until killed
		}
	}
	fmt.Println("ERROR", err)
	os.Exit(1)
}

// leaderChild is a leader in another process.
type leaderChild struct {
	cmd  *exec.Cmd
	term fencelock.Fence
	done chan struct{}
}

// startLeaderChild re-executes this binary as a leader on name and waits
// (bounded by ctx) until it leads.
func startLeaderChild(ctx context.Context, s electionChildSpec) (*leaderChild, error) {
	bin, err := os.Executable()
	if err != nil {
		return nil, err
	}
	spec, _ := json.Marshal(s)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), electionChildEnv+"="+string(spec))
	cmd.SysProcAttr = dieWithParent()
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &leaderChild{cmd: cmd, done: make(chan struct{})}
	lines := make(chan string, 1)
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		_ = cmd.Wait()
	}()
	select {
	case l := <-lines:
		if _, err := fmt.Sscanf(l, "LEADING %d", &c.term); err != nil {
			c.kill()
			return nil, fmt.Errorf("leader process: %s", l)
		}
		return c, nil
	case <-c.done:
		return nil, fmt.Errorf("leader process exited before leading")
	case <-ctx.Done():
		c.kill()
		return nil, ctx.Err()
	}
}

// kill sends SIGKILL and reaps the process.
func (c *leaderChild) kill() {
	_ = c.cmd.Process.Kill()
	<-c.done
}
