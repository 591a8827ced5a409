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
	var q Queues
	a, _ := q.Join("x")
	b, _ := q.Join("x")
	c, _ := q.Join("x")
	other, _ := q.Join("y")
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
	d, _ := q.Join("x")
	if isOpen(d.Turn()) {
		t.Fatal("a ticket on an emptied queue waits")
	}
	q.Close()
	if _, ok := q.Join("z"); ok {
		t.Fatal("Join after Close succeeded")
	}
}
