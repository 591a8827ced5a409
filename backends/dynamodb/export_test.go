package dynamodb

// SetNoQueue turns the wait queue off (true) or on for blocked Acquires,
// and returns a func that restores it.
func SetNoQueue(off bool) (restore func()) {
	was := noQueue.Swap(off)
	return func() { noQueue.Store(was) }
}
