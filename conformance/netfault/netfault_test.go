package netfault

import (
	"bufio"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// echo serves an echo server; it returns its address.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

func proxy(t *testing.T) *Proxy {
	t.Helper()
	p, err := Listen(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// roundTrip writes a line and reads it back within d.
func roundTrip(c net.Conn, d time.Duration) (time.Duration, error) {
	start := time.Now()
	_ = c.SetDeadline(start.Add(d))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return 0, err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err == nil && line != "ping\n" {
		err = errors.New("bad echo " + line)
	}
	return time.Since(start), err
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPass(t *testing.T) {
	p := proxy(t)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := roundTrip(c, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if p.Accepted() != 1 {
		t.Fatalf("Accepted = %d, want 1", p.Accepted())
	}
}

// A blackhole holds bytes (no echo) without closing, and delivers them,
// in order, at the heal; a connection made during it is held too.
func TestBlackholeHoldsThenDelivers(t *testing.T) {
	p := proxy(t)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := roundTrip(c, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Set(Blackhole, 0)
	if _, err := roundTrip(c, 200*time.Millisecond); !isTimeout(err) {
		t.Fatalf("round trip through a blackhole: %v, want a timeout", err)
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := roundTrip(c2, 200*time.Millisecond); !isTimeout(err) {
		t.Fatalf("new connection through a blackhole: %v, want a timeout", err)
	}
	p.Heal()
	// c's held "ping\n" arrives now, then the reply to a second one.
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	r := bufio.NewReader(c)
	if line, err := r.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("held bytes after the heal: %q, %v", line, err)
	}
	_ = c2.SetDeadline(time.Now().Add(2 * time.Second))
	if line, err := bufio.NewReader(c2).ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("held connection after the heal: %q, %v", line, err)
	}
}

// A reset ends open connections at once and refuses new ones until the
// heal.
func TestResetEndsAndRefuses(t *testing.T) {
	p := proxy(t)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := roundTrip(c, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Set(Reset, 0)
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("read after a reset: %v, want the connection ended", err)
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err == nil {
		defer c2.Close()
		if _, err := roundTrip(c2, 2*time.Second); err == nil || isTimeout(err) {
			t.Fatalf("new connection during a reset: %v, want it ended", err)
		}
	}
	p.Heal()
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if _, err := roundTrip(c3, 2*time.Second); err != nil {
		t.Fatalf("after the heal: %v", err)
	}
}

func TestLatency(t *testing.T) {
	p := proxy(t)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const d = 100 * time.Millisecond
	p.Set(Latency, d)
	took, err := roundTrip(c, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if took < 2*d {
		t.Fatalf("round trip with %v each way took %v", d, took)
	}
	p.Heal()
	if took, err := roundTrip(c, 5*time.Second); err != nil || took >= 2*d {
		t.Fatalf("after the heal: %v, %v", took, err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
