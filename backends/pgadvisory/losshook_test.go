package pgadvisory

import (
	"testing"
	"time"
)

// TestLossHooks: a registered function runs once when the lease is marked
// lost, a stopped one never, and one registered after the loss at once;
// stop reports whether it kept the function from being started.
func TestLossHooks(t *testing.T) {
	var h lossHooks
	ran := make(chan string, 4)
	stopA := h.add(func() { ran <- "a" })
	stopB := h.add(func() { ran <- "b" })
	if !stopB() {
		t.Fatal("stop before the loss: got false, want true")
	}
	h.mark()
	h.mark() // a second mark starts nothing more
	if got := <-ran; got != "a" {
		t.Fatalf("ran %q, want a", got)
	}
	if stopA() {
		t.Fatal("stop after the function started: got true, want false")
	}
	stopC := h.add(func() { ran <- "c" })
	if got := <-ran; got != "c" {
		t.Fatalf("ran %q, want c (registered after the loss)", got)
	}
	if stopC() {
		t.Fatal("stop of a function registered after the loss: got true, want false")
	}
	select {
	case got := <-ran:
		t.Fatalf("%q ran again (or a stopped function ran)", got)
	case <-time.After(50 * time.Millisecond):
	}
}
