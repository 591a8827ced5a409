package conformance

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/fencelock/fencelock"
)

// Op is one operation of a torture run, as its client saw it. Times are
// offsets from the start of the run on one monotonic clock (Go's
// time.Since), so they order operations across clients of one process.
type Op struct {
	ID     int64  `json:"id"`
	Worker int    `json:"worker"`
	Client int    `json:"client"` // which of the run's Clients (0: direct; see TortureResult.Proxied)
	Kind   string `json:"kind"`   // OpAcquire, OpTry, ... (see the Op* constants)
	Name   string `json:"name"`   // lock name, or the register for register operations
	Lease  int64  `json:"lease,omitempty"`
	// Invoke and Complete bound the operation: it took effect, if at all,
	// between them.
	Invoke   time.Duration   `json:"invoke"`
	Complete time.Duration   `json:"complete"`
	Result   string          `json:"result"` // ok, refused, lost, stale, ctx, error
	Err      string          `json:"err,omitempty"`
	Fence    fencelock.Fence `json:"fence,omitempty"`
	Arg      int64           `json:"arg,omitempty"`   // value written; TTL (ms) asked by an Extend; a probe's cancelled wait
	Value    int64           `json:"value,omitempty"` // value read
	// ValidUntil is the lease's ValidUntil after a grant or an Extend.
	ValidUntil time.Duration `json:"valid_until,omitempty"`
	// End (grants) is when the holder stopped believing it held the
	// lock: the earliest of its Release call, its Done, and its
	// ValidUntil at Done.
	End time.Duration `json:"end,omitempty"`
	// Held (grants) lists the leases on the same name whose holders still
	// believed they held the lock (no Err, before ValidUntil, no Release
	// called) the moment this grant returned.
	Held  []int64 `json:"held,omitempty"`
	Phase string  `json:"phase,omitempty"` // "liveness" for the final phase
}

// Operation kinds.
const (
	OpAcquire       = "acquire"        // Acquire with a Wait
	OpAcquireNoWait = "acquire-nowait" // Acquire bounded only by its ctx (a short one)
	OpTry           = "try"
	OpCancelWait    = "cancel-wait" // Acquire whose ctx is cancelled while it may wait
	OpProbe         = "probe"       // TryAcquire right after a cancelled wait, on the same Client
	OpExtend        = "extend"
	OpRelease       = "release"
	OpStall         = "stall" // hold without renewing past ValidUntil
	// Register operations (Name is the register).
	OpClaim           = "claim"
	OpWriteClaimed    = "write-claimed"
	OpRead            = "read"
	OpWriteIfNotOlder = "write-if-not-older"
)

func (o *Op) grant() bool {
	switch o.Kind {
	case OpAcquire, OpAcquireNoWait, OpTry, OpCancelWait, OpProbe:
		return o.Result == "ok"
	}
	return false
}

// Fault is one fault the nemesis applied.
type Fault struct {
	ID     int           `json:"id"`
	Kind   string        `json:"kind"` // blackhole, reset, latency, expire, restart, pause, freeze-client
	Target string        `json:"target"`
	Name   string        `json:"name,omitempty"` // expire: the lock name
	Delay  time.Duration `json:"delay,omitempty"`
	Start  time.Duration `json:"start"`
	End    time.Duration `json:"end"` // == Start for an instant fault
}

// History is everything a torture run did. It is safe for concurrent use
// while the run records.
type History struct {
	// Meta describes the run (set before it starts).
	Meta TortureMeta

	start time.Time

	mu     sync.Mutex
	ops    []*Op
	faults []Fault
	byID   map[int64]*Op
}

func newHistory() *History { return &History{start: time.Now(), byID: map[int64]*Op{}} }

// now is the offset of the present moment from the start of the run.
func (h *History) now() time.Duration { return time.Since(h.start) }

// at is the offset of t.
func (h *History) at(t time.Time) time.Duration { return t.Sub(h.start) }

func (h *History) add(o *Op) {
	h.mu.Lock()
	defer h.mu.Unlock()
	o.ID = int64(len(h.ops) + 1)
	h.ops = append(h.ops, o)
	h.byID[o.ID] = o
}

// update runs f on op id under the history's lock.
func (h *History) update(id int64, f func(o *Op)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if o := h.byID[id]; o != nil {
		f(o)
	}
}

func (h *History) addFault(f Fault) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f.ID = len(h.faults) + 1
	h.faults = append(h.faults, f)
}

// Ops returns a copy of the operations, in invoke order.
func (h *History) Ops() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]Op, len(h.ops))
	for i, o := range h.ops {
		out[i] = *o
	}
	slices.SortStableFunc(out, func(a, b Op) int { return int(a.Invoke - b.Invoke) })
	return out
}

// Faults returns a copy of the faults, in start order.
func (h *History) Faults() []Fault {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.faults)
}

// record is one line of a history file.
type record struct {
	Meta  *TortureMeta `json:"meta,omitempty"`
	Op    *Op          `json:"op,omitempty"`
	Fault *Fault       `json:"fault,omitempty"`
}

// WriteJSONL writes the history, one JSON object a line: {"meta": …}
// first, then {"op": …} in invoke order, then {"fault": …}.
func (h *History) WriteJSONL(w io.Writer) error {
	enc := json.NewEncoder(w)
	if err := enc.Encode(record{Meta: &h.Meta}); err != nil {
		return fmt.Errorf("write history: %w", err)
	}
	for _, o := range h.Ops() {
		if err := enc.Encode(record{Op: &o}); err != nil {
			return fmt.Errorf("write history: %w", err)
		}
	}
	for _, f := range h.Faults() {
		if err := enc.Encode(record{Fault: &f}); err != nil {
			return fmt.Errorf("write history: %w", err)
		}
	}
	return nil
}

// ReadHistory reads a history WriteJSONL wrote, for CheckHistory.
func ReadHistory(r io.Reader) (*History, error) {
	h := newHistory()
	dec := json.NewDecoder(r)
	for dec.More() {
		var rec record
		if err := dec.Decode(&rec); err != nil {
			return nil, fmt.Errorf("read history: %w", err)
		}
		switch {
		case rec.Meta != nil:
			h.Meta = *rec.Meta
		case rec.Op != nil:
			h.ops = append(h.ops, rec.Op)
			h.byID[rec.Op.ID] = rec.Op
		case rec.Fault != nil:
			h.faults = append(h.faults, *rec.Fault)
		}
	}
	return h, nil
}

// closeOpen ends, at the present moment, the grants whose holders never
// stopped believing (the run ended first).
func (h *History) closeOpen() {
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, o := range h.ops {
		if o.grant() && o.End == 0 {
			o.End = now
		}
	}
}

// endLease moves grant id's End to at if that is earlier.
func (h *History) endLease(id int64, at time.Duration) {
	h.update(id, func(o *Op) {
		if o.End == 0 || at < o.End {
			o.End = at
		}
	})
}
