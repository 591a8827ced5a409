package conformance

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencelock/fencelock"
)

// The guarded registers' sequential specification, for porcupine: a
// guard.Resource is a (fence, value) pair.
type regState struct {
	Fence fencelock.Fence
	Value int64
}

type regInput struct {
	Kind  string
	Fence fencelock.Fence
	Arg   int64
}

type regOutput struct {
	Result  string // ok, stale; unknown: the operation failed and may or may not have happened
	Value   int64
	Unknown bool
}

// regStep is the specification of one operation (see package guard).
func regStep(s regState, in regInput) (regState, regOutput) {
	switch in.Kind {
	case OpClaim:
		if in.Fence <= s.Fence {
			return s, regOutput{Result: "stale"}
		}
		return regState{Fence: in.Fence, Value: s.Value}, regOutput{Result: "ok", Value: s.Value}
	case OpWriteClaimed:
		if in.Fence != s.Fence {
			return s, regOutput{Result: "stale"}
		}
		return regState{Fence: s.Fence, Value: in.Arg}, regOutput{Result: "ok"}
	case OpWriteIfNotOlder:
		if in.Fence < s.Fence {
			return s, regOutput{Result: "stale"}
		}
		return regState{Fence: in.Fence, Value: in.Arg}, regOutput{Result: "ok"}
	}
	return s, regOutput{Result: "ok", Value: s.Value} // read
}

// regModel: an operation that failed (unknown outcome) may have taken
// effect or not.
var regModel = (&porcupine.NondeterministicModel{
	Init: func() []any { return []any{regState{}} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(regState), input.(regInput), output.(regOutput)
		next, want := regStep(s, in)
		if out.Unknown {
			return []any{s, next}
		}
		if out.Result == want.Result && (in.Kind == OpWriteClaimed || in.Kind == OpWriteIfNotOlder || out.Value == want.Value) {
			return []any{next}
		}
		return nil
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(regInput), output.(regOutput)
		return fmt.Sprintf("%s(f=%d, %d) -> %s %d", in.Kind, in.Fence, in.Arg, out.Result, out.Value)
	},
}).ToModel()

// registerOps returns each register's operations as porcupine sees them;
// an operation that failed returns at the end of time.
func registerOps(ops []Op) map[string][]porcupine.Operation {
	m := map[string][]porcupine.Operation{}
	for _, o := range ops {
		switch o.Kind {
		case OpClaim, OpWriteClaimed, OpRead, OpWriteIfNotOlder:
		default:
			continue
		}
		out := regOutput{Result: o.Result, Value: o.Value}
		ret := int64(o.Complete)
		if o.Result != "ok" && o.Result != "stale" {
			out, ret = regOutput{Unknown: true}, int64(1<<62)
		}
		m[o.Name] = append(m[o.Name], porcupine.Operation{
			ClientId: max(o.Worker, 0), Input: regInput{Kind: o.Kind, Fence: o.Fence, Arg: o.Arg},
			Call: int64(o.Invoke), Output: out, Return: ret, Metadata: o.ID,
		})
	}
	return m
}

// checkTimeout bounds porcupine on one register.
const checkTimeout = 20 * time.Second

// checkRegisters: each register's history is linearizable. A violation
// names the shortest prefix of the register's history (in invoke order)
// that is not, and its last operations.
func checkRegisters(ops []Op) []Violation {
	var vs []Violation
	regs := registerOps(ops)
	names := make([]string, 0, len(regs))
	for n := range regs {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		hist := regs[name]
		slices.SortStableFunc(hist, func(a, b porcupine.Operation) int { return int(a.Call - b.Call) })
		if porcupine.CheckOperationsTimeout(regModel, hist, checkTimeout) != porcupine.Illegal {
			continue
		}
		// The shortest illegal prefix: illegality is kept by longer
		// prefixes, so bisect.
		lo, hi := 1, len(hist)
		for lo < hi {
			mid := (lo + hi) / 2
			if porcupine.CheckOperationsTimeout(regModel, hist[:mid], checkTimeout) == porcupine.Illegal {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		prefix := hist[:hi]
		last := prefix[max(0, len(prefix)-8):]
		v := Violation{Check: "register", Name: name, From: time.Duration(last[0].Call), To: time.Duration(prefix[len(prefix)-1].Call)}
		var desc []string
		for _, p := range last {
			v.Ops = append(v.Ops, p.Metadata.(int64))
			v.To = max(v.To, min(time.Duration(p.Return), v.To+time.Second))
			desc = append(desc, fmt.Sprintf("op %d", p.Metadata.(int64)))
		}
		v.Msg = fmt.Sprintf("not linearizable: the first %d of %d operations cannot be ordered as one register; it breaks at %s", hi, len(hist), strings.Join(desc, ", "))
		vs = append(vs, v)
	}
	return vs
}

// checkLostUpdates: each claim-first register's final value is the
// number of its successful claimed writes (each wrote the value its own
// claim read, plus one), give or take writes whose outcome is unknown.
func checkLostUpdates(ops []Op) []Violation {
	acked, unknown := map[string]int64{}, map[string]int64{}
	var vs []Violation
	for _, o := range ops {
		if o.Kind != OpWriteClaimed {
			continue
		}
		switch o.Result {
		case "ok":
			acked[o.Name]++
		case "stale":
		default:
			unknown[o.Name]++
		}
	}
	for _, o := range ops {
		if o.Phase != "final" || o.Result != "ok" {
			continue
		}
		if o.Value < acked[o.Name] || o.Value > acked[o.Name]+unknown[o.Name] {
			vs = append(vs, Violation{Check: "lost-update", Name: o.Name, Ops: []int64{o.ID}, From: 0, To: o.Complete,
				Msg: fmt.Sprintf("claim-first register ends at %d after %d acknowledged increments (%d unknown): %d updates lost", o.Value, acked[o.Name], unknown[o.Name], acked[o.Name]-o.Value)})
		}
	}
	return vs
}
