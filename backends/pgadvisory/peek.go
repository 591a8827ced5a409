package pgadvisory

// peekState is what a non-consuming look at a socket found.
type peekState int

const (
	peekNone   peekState = iota // nothing waiting (or unknown)
	peekData                    // bytes waiting: an unsolicited message
	peekClosed                  // the peer closed the connection, or it broke
)
