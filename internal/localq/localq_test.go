package localq

import "testing"

func isOpen(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return false
	default:
		return true
	}
}

// TestTurnsInArrivalOrder: the first ticket has its turn at once, the next
// ones when every ticket before them left, whichever order they leave in;
// names are independent.
func TestTurnsInArrivalOrder(t *testing.T) {
	var q Queues[struct{}]
	a, _ := q.Join("x", struct{}{})
	b, _ := q.Join("x", struct{}{})
	c, _ := q.Join("x", struct{}{})
	other, _ := q.Join("y", struct{}{})
	if isOpen(a.Turn()) || isOpen(other.Turn()) {
		t.Fatal("the first ticket of a name waits")
	}
	if !isOpen(b.Turn()) || !isOpen(c.Turn()) {
		t.Fatal("a later ticket has its turn while the first is in line")
	}
	q.Leave("x", b) // leaving from the middle passes no turn
	if !isOpen(c.Turn()) {
		t.Fatal("the third ticket got its turn when the second left")
	}
	q.Leave("x", a)
	if isOpen(c.Turn()) {
		t.Fatal("the next in line did not get its turn when the first left")
	}
	q.Leave("x", c)
	q.Leave("y", other)
	if len(q.m) != 0 {
		t.Fatalf("empty queues kept: %v", q.m)
	}
	d, _ := q.Join("x", struct{}{})
	if isOpen(d.Turn()) {
		t.Fatal("a ticket on an emptied queue waits")
	}
	q.Close()
	if _, ok := q.Join("z", struct{}{}); ok {
		t.Fatal("Join after Close succeeded")
	}
}

// TestHeadAndValues: Head sees the first ticket with its value; Leave says
// when the queue emptied.
func TestHeadAndValues(t *testing.T) {
	var q Queues[int]
	if q.Head("x", func(*Ticket[int]) { t.Fatal("Head called f on an empty queue") }) {
		t.Fatal("Head of an empty queue reported a ticket")
	}
	a, _ := q.Join("x", 1)
	b, _ := q.Join("x", 2)
	var seen int
	if !q.Head("x", func(h *Ticket[int]) { seen = h.Val }) || seen != 1 {
		t.Fatalf("Head saw %d, want the first ticket's 1", seen)
	}
	if q.Leave("x", a) {
		t.Fatal("Leave reported an empty queue with a ticket left")
	}
	if !q.Head("x", func(h *Ticket[int]) { seen = h.Val }) || seen != 2 {
		t.Fatalf("Head saw %d after the first left, want 2", seen)
	}
	if !q.Leave("x", b) {
		t.Fatal("Leave of the last ticket did not report an empty queue")
	}
}
