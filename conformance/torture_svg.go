package conformance

import (
	"fmt"
	"html"
	"io"
	"slices"
	"time"
)

// WriteSVG draws a timeline of h from from to to (to ≤ from: all of it):
// a row per lock name with a bar per holder (grant to the end of its
// holder's belief, labelled with worker and fence), the faults as shaded
// bands, and each violation's window outlined in red.
func (h *History) WriteSVG(w io.Writer, from, to time.Duration, vs []Violation) error {
	ops := h.Ops()
	if to <= from {
		from, to = 0, 0
		for _, o := range ops {
			to = max(to, o.Complete, o.End)
		}
	}
	var names []string
	for _, o := range ops {
		if o.grant() && !slices.Contains(names, o.Name) {
			names = append(names, o.Name)
		}
	}
	slices.Sort(names)
	const width, left, rowH, top = 1400.0, 70.0, 40.0, 30.0
	height := top + rowH*float64(len(names)) + 30
	x := func(d time.Duration) float64 {
		d = min(max(d, from), to)
		return left + (width-left-10)*float64(d-from)/float64(max(to-from, 1))
	}
	var b []byte
	p := func(format string, args ...any) { b = fmt.Appendf(b, format, args...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="monospace" font-size="10">`+"\n", width, height)
	p(`<text x="4" y="14">%s seed %d: holders per name, %.3fs–%.3fs (faults shaded, violations in red)</text>`+"\n",
		html.EscapeString(h.Meta.Backend), h.Meta.Seed, from.Seconds(), to.Seconds())
	for _, f := range h.Faults() {
		if f.End < from || f.Start > to {
			continue
		}
		x0, x1 := x(f.Start), x(f.End)
		p(`<rect x="%.1f" y="%.0f" width="%.1f" height="%.0f" fill="orange" opacity="0.25"><title>%s %s %s</title></rect>`+"\n",
			x0, top, max(x1-x0, 1.5), rowH*float64(len(names)), f.Kind, html.EscapeString(f.Target), f.Name)
	}
	for i, n := range names {
		y := top + rowH*float64(i)
		p(`<text x="4" y="%.0f">%s</text><line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#ccc"/>`+"\n", y+rowH/2, html.EscapeString(n), left, y+rowH, width, y+rowH)
		for _, o := range ops {
			if !o.grant() || o.Name != n || o.End < from || o.Complete > to {
				continue
			}
			x0, x1 := x(o.Complete), x(o.End)
			lane := float64(o.Worker%3) * 11
			p(`<rect x="%.1f" y="%.0f" width="%.1f" height="9" fill="hsl(%d,60%%,55%%)"><title>op %d worker %d fence %d</title></rect>`,
				x0, y+4+lane, max(x1-x0, 1), (o.Worker*67)%360, o.ID, o.Worker, o.Fence)
			p(`<text x="%.1f" y="%.0f">w%d f%d</text>`+"\n", x0+1, y+12+lane, o.Worker, o.Fence)
		}
	}
	for _, v := range vs {
		if i := slices.Index(names, lockOf(v.Name)); i >= 0 {
			x0, x1 := x(v.From), x(v.To)
			p(`<rect x="%.1f" y="%.0f" width="%.1f" height="%.0f" fill="none" stroke="red" stroke-width="2"><title>%s</title></rect>`+"\n",
				x0, top+rowH*float64(i), max(x1-x0, 2), rowH, html.EscapeString(v.String()))
		}
	}
	p("</svg>\n")
	_, err := w.Write(b)
	if err != nil {
		return fmt.Errorf("write svg: %w", err)
	}
	return nil
}
