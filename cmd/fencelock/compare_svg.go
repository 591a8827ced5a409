package main

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"slices"
	"time"

	"github.com/fencelock/fencelock/conformance"
)

// Charts are plain SVG written by hand: no dependency, stable output that
// diffs well, and GitHub renders them inline.

// logAxis maps durations (or any positive value) to x on a log10 scale
// spanning whole decades.
type logAxis struct {
	lo, hi     float64 // decades: 10^lo … 10^hi
	x0, length float64
}

func newLogAxis(min, max, x0, length float64) logAxis {
	lo := math.Floor(math.Log10(math.Max(min, 1e-12)))
	hi := math.Ceil(math.Log10(math.Max(max, min*10)))
	if hi <= lo {
		hi = lo + 1
	}
	return logAxis{lo: lo, hi: hi, x0: x0, length: length}
}

func (a logAxis) at(v float64) float64 {
	v = math.Max(v, math.Pow(10, a.lo))
	return a.x0 + (math.Log10(v)-a.lo)/(a.hi-a.lo)*a.length
}

// durLabel names a decade tick of seconds: 1µs, 10µs … 1s, 10s.
func durLabel(sec float64) string {
	for _, u := range []struct {
		unit string
		sec  float64
	}{{"s", 1}, {"ms", 1e-3}, {"µs", 1e-6}} {
		if sec >= u.sec*0.999 {
			return fmt.Sprintf("%g%s", math.Round(sec/u.sec), u.unit)
		}
	}
	return fmt.Sprintf("%gs", sec)
}

// charts returns the generated SVG files by name.
func (d *compareDoc) charts() map[string][]byte {
	return map[string][]byte{
		"handoff.svg":    d.handoffChart(),
		"contention.svg": d.contentionChart(),
	}
}

// handoffRow is one box of the hand-off chart.
type handoffRow struct {
	label string
	q     [5]time.Duration // p1, p25, p50, p75, p99
	peer  bool             // from the bench-peers run: only p50 and p99 are known
	ours  bool             // fencelock's, in the bench-peers run
}

func (d *compareDoc) handoffRows() []handoffRow {
	var rows []handoffRow
	for _, r := range d.results {
		if len(r.handoff) == 0 {
			continue
		}
		var q [5]time.Duration
		for i, p := range []float64{0.01, 0.25, 0.5, 0.75, 0.99} {
			q[i] = conformance.Percentile(r.handoff, p)
		}
		rows = append(rows, handoffRow{label: r.label, q: q})
	}
	return append(rows, d.peerHandoffs()...)
}

func (d *compareDoc) handoffChart() []byte {
	rows := d.handoffRows()
	const left, width, rowH, top = 290.0, 560.0, 30.0, 60.0
	lo, hi := math.Inf(1), 0.0
	for _, r := range rows {
		lo, hi = math.Min(lo, r.q[0].Seconds()), math.Max(hi, r.q[4].Seconds())
	}
	if len(rows) == 0 {
		lo, hi = 1e-5, 1
	}
	ax := newLogAxis(lo, hi, left, width)
	h := top + rowH*float64(len(rows)) + 40
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", left+width+30, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="10" y="20" font-size="14">Hand-off: the holder's Release → the blocked Acquire returns</text>`+"\n")
	fmt.Fprintf(&b, `<text x="10" y="40" fill="#555">this compare run: p1–p99 whiskers, p25–p75 box, p50 mark; below, the make bench-peers run, fencelock in blue and peers in red: p50 mark, whisker to p99</text>`+"\n")
	d.decades(&b, ax, top-8, h-30)
	for i, r := range rows {
		y := top + rowH*float64(i) + rowH/2
		ink := "#000"
		switch {
		case r.peer && r.ours:
			ink = "#1a5fb4"
		case r.peer:
			ink = "#c01c28"
		}
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" text-anchor="end" dominant-baseline="middle" fill="%s">%s</text>`+"\n", left-8, y, ink, html.EscapeString(r.label))
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#555"/>`+"\n", ax.at(r.q[0].Seconds()), ax.at(r.q[4].Seconds()), y, y)
		if !r.peer {
			x1, x3 := ax.at(r.q[1].Seconds()), ax.at(r.q[3].Seconds())
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#8ab4f8" stroke="#1a5fb4"/>`+"\n", x1, y-8, math.Max(x3-x1, 1), 16.0)
		}
		xm := ax.at(r.q[2].Seconds())
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/>`+"\n", xm, xm, y-9, y+9, ink)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="10" fill="#333">%s</text>`+"\n", ax.at(r.q[4].Seconds())+4, y+4, us(r.q[2]))
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// decades draws the vertical decade lines and their labels of ax.
func (d *compareDoc) decades(b *bytes.Buffer, ax logAxis, y0, y1 float64) {
	for e := ax.lo; e <= ax.hi; e++ {
		x := ax.at(math.Pow(10, e))
		fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", x, x, y0, y1)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">%s</text>`+"\n", x, y1+14, durLabel(math.Pow(10, e)))
	}
}

// contentionPoint is one mark of the contention chart.
type contentionPoint struct {
	label      string
	throughput float64 // sections per second
	worst      time.Duration
}

// contentionPoints are the chart's marks, all from one run: with peer
// results, fencelock's and the peers' from that run (8 clients, one
// worker each); else this run's (8 workers on 2 clients).
func (d *compareDoc) contentionPoints() (ps []contentionPoint, source string) {
	if ps := d.peerContention(); len(ps) > 0 {
		return ps, "make bench-peers: 8 clients, one worker each"
	}
	for _, r := range d.results {
		if r.cont.Elapsed == 0 || r.cont.Sections == 0 {
			continue
		}
		ps = append(ps, contentionPoint{r.label, float64(r.cont.Sections) / r.cont.Elapsed.Seconds(), r.cont.WaitMax})
	}
	return ps, "this run: 8 workers on 2 clients"
}

func (d *compareDoc) contentionChart() []byte {
	ps, source := d.contentionPoints()
	const left, width, top, height = 70.0, 600.0, 60.0, 380.0
	xlo, xhi, ylo, yhi := math.Inf(1), 0.0, math.Inf(1), 0.0
	for _, p := range ps {
		xlo, xhi = math.Min(xlo, p.worst.Seconds()), math.Max(xhi, p.worst.Seconds())
		ylo, yhi = math.Min(ylo, p.throughput), math.Max(yhi, p.throughput)
	}
	if len(ps) == 0 {
		xlo, xhi, ylo, yhi = 1e-3, 1, 1, 1e4
	}
	ax := newLogAxis(xlo, xhi, left, width)
	ay := newLogAxis(ylo, yhi, 0, height) // y grows downwards: flip below
	yAt := func(v float64) float64 { return top + height - ay.at(v) }
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", left+width+250, top+height+50)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="10" y="20" font-size="14">8 workers on one lock: throughput (up is better) against the worst wait (left is better)</text>`+"\n")
	fmt.Fprintf(&b, `<text x="10" y="40" fill="#555">%s; fencelock in blue, peers in red</text>`+"\n", html.EscapeString(source))
	d.decades(&b, ax, top, top+height)
	for e := ay.lo; e <= ay.hi; e++ {
		y := yAt(math.Pow(10, e))
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, left+width, y, y)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end" dominant-baseline="middle" fill="#555">%s/s</text>`+"\n", left-6, y, fmtCount(math.Pow(10, e)))
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#333">worst wait for one grant</text>`+"\n", left+width/2, top+height+36)
	fmt.Fprintf(&b, `<text transform="translate(14 %.1f) rotate(-90)" text-anchor="middle" fill="#333">grants per second (all workers)</text>`+"\n", top+height/2)
	var placed []labelBox
	for _, p := range ps {
		x, y := ax.at(p.worst.Seconds()), yAt(p.throughput)
		fill := "#1a5fb4"
		if p.peer() {
			fill = "#c01c28"
		}
		fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="5" fill="%s"/>`+"\n", x, y, fill)
		box := placeLabel(placed, x+8, y+4, p.label)
		placed = append(placed, box)
		if box.y != y+4 { // moved off its point: a leader line shows whose it is
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="0.5"/>`+"\n", x+5, y, box.x-1, box.y-4, fill)
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="%s">%s</text>`+"\n", box.x, box.y, fill, html.EscapeString(p.label))
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// peer reports whether the point is a peer library's (labelled "peer: …").
func (p contentionPoint) peer() bool { return len(p.label) > 6 && p.label[:6] == "peer: " }

func fmtCount(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%gM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%gk", v/1e3)
	}
	return fmt.Sprintf("%g", v)
}

// labelBox is where a chart label's text goes: x, y its baseline start, w
// its estimated width (12 px sans-serif).
type labelBox struct{ x, y, w float64 }

// labelHeight is a label's line height in px.
const labelHeight = 14

func (a labelBox) overlaps(b labelBox) bool {
	return a.x < b.x+b.w && b.x < a.x+a.w && math.Abs(a.y-b.y) < labelHeight
}

// placeLabel puts a label whose natural baseline is (x, y) at the nearest
// line above or below that overlaps none of placed.
func placeLabel(placed []labelBox, x, y float64, label string) labelBox {
	w := 7 * float64(len([]rune(label)))
	for i := 0; ; i++ {
		dy := float64((i+1)/2) * labelHeight
		if i%2 == 1 {
			dy = -dy
		}
		box := labelBox{x, y + dy, w}
		if !slices.ContainsFunc(placed, box.overlaps) {
			return box
		}
	}
}
