package report

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tapes-dev/tapes/internal/consumer"
)

// The timeline is laid out here, in Go, as a list of shapes; page.html.tmpl
// only prints them (html/template escapes every text and attribute).

// shape is one SVG element.
type shape struct {
	Kind   string // "rect", "line", "polyline", "text", "circle"
	Class  string
	X, Y   float64 // rect, text: position; line: start; circle: centre
	X2, Y2 float64 // line: end
	W, H   float64 // rect
	R      float64 // circle
	Points string  // polyline
	Fill   string  // rect, circle: overrides the class's fill
	Stroke string  // line, polyline: overrides the class's stroke
	Anchor string  // text: text-anchor
	Rotate bool    // text: vertical, reading upwards
	Text   string  // text
	Title  string  // tooltip
	// DataStart and DataEnd (seconds) are put on fault rects.
	DataStart, DataEnd string
}

// svgPlot is the timeline: its size and its shapes.
type svgPlot struct {
	W, H   float64
	Shapes []shape
}

// Layout of the timeline, in pixels.
const (
	plotWidth    = 1000.0
	marginLeft   = 86.0
	marginRight  = 24.0
	laneRowH     = 16.0 // a row of the fault and leader lanes
	maxLaneRows  = 6
	titleH       = 46.0 // a panel's title and legend, above it
	countH       = 150.0
	failH        = 110.0
	latencyH     = 150.0
	consumerRowH = 18.0
	axisH        = 44.0
)

// Series colours.
const (
	colAcked    = "#1a7f37"
	colConsumed = "#0969da"
	colP50      = "#0969da"
	colMax      = "#cf222e"
)

// errorColors colour the failed-send series in order.
var errorColors = []string{"#cf222e", "#bc4c00", "#8250df", "#bf8700", "#1b7c83", "#6e7781", "#d63384", "#4d2d00"}

// consumerMarks are the consumer history line types drawn on the consumer
// lane, with their class and legend label.
var consumerMarks = []struct{ typ, class, label string }{
	{consumer.HistoryAssigned, "c-assigned", "assigned"},
	{consumer.HistoryRevoked, "c-revoked", "revoked"},
	{consumer.HistoryLost, "c-lost", "lost"},
	{consumer.HistoryGap, "c-gap", "gap (retention)"},
}

// plotInput is what the timeline shows.
type plotInput struct {
	Timeline  Timeline
	Faults    []Interval
	Events    []Event // leader changes and notes
	Consumers []consumer.HistoryLine
}

// plotter accumulates shapes and maps seconds to x.
type plotter struct {
	shapes []shape
	secs   float64 // the x domain: [0, secs] seconds since the start
	start  time.Time
}

func (p *plotter) add(s shape) { p.shapes = append(p.shapes, s) }

func (p *plotter) x(sec float64) float64 {
	return marginLeft + sec/p.secs*(plotWidth-marginLeft-marginRight)
}

func (p *plotter) xt(t time.Time) float64 {
	return p.x(min(max(t.Sub(p.start).Seconds(), 0), p.secs))
}

const plotRight = plotWidth - marginRight

// rowAlloc places labels in up to maxLaneRows rows so that they do not
// overlap.
type rowAlloc struct{ ends []float64 }

// place returns the first row free from x0 on, and reserves it up to x1;
// -1 when every row is taken (the label is left out).
func (r *rowAlloc) place(x0, x1 float64) int {
	for i, e := range r.ends {
		if e <= x0 {
			r.ends[i] = x1
			return i
		}
	}
	if len(r.ends) < maxLaneRows {
		r.ends = append(r.ends, x1)
		return len(r.ends) - 1
	}
	return -1
}

// label is a text placed in a lane, starting at x (or ending at it, near
// the right edge); row -1: no room.
type label struct {
	x      float64
	row    int
	anchor string
	text   string
}

func placeLabel(rows *rowAlloc, x, x1 float64, text string) label {
	w := textWidth(text) + 6
	if x+w > plotRight {
		return label{x: x - 3, row: rows.place(x-w, max(x1, x)+4), anchor: "end", text: text}
	}
	return label{x: x + 3, row: rows.place(x, max(x1, x+w)), anchor: "start", text: text}
}

// textWidth estimates the width of an 11px label: the page does not
// measure text.
func textWidth(s string) float64 {
	w := 0.0
	for _, r := range s {
		switch {
		case r >= 'A' && r <= 'Z', r == 'm', r == 'w', r == '_':
			w += 7.6
		case r == 'i', r == 'l', r == 'j', r == '.', r == ',', r == ':', r == ' ', r == '(', r == ')', r == '[', r == ']', r == '|':
			w += 3.4
		default:
			w += 6.3
		}
	}
	return w
}

// leaderLabel is the label of a leader tick: "orders-0: broker 2 (epoch 5)".
func leaderLabel(e Event) string {
	if e.Leader < 0 {
		return fmt.Sprintf("%s-%d: no leader (epoch %d)", e.Topic, e.Partition, e.Epoch)
	}
	return fmt.Sprintf("%s-%d: broker %d (epoch %d)", e.Topic, e.Partition, e.Leader, e.Epoch)
}

// secs formats seconds since the start.
func secs(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 3, 64) }

// layoutTimeline draws the timeline.
func layoutTimeline(in plotInput) svgPlot {
	tl := in.Timeline
	p := &plotter{secs: float64(max(tl.Seconds, 1)), start: tl.Start}
	var bg []shape // shading and ticks, drawn under the panels' data

	// Fault lane: labels first, to know its height.
	var faultRows rowAlloc
	faultLabels := make([]label, len(in.Faults))
	for i, f := range in.Faults {
		faultLabels[i] = placeLabel(&faultRows, p.xt(f.Start), p.xt(f.End), f.What)
	}
	var eventRows rowAlloc
	eventLabels := make([]label, len(in.Events))
	for i, e := range in.Events {
		text := e.What
		if e.Type == EventLeader {
			text = leaderLabel(e)
		}
		eventLabels[i] = placeLabel(&eventRows, p.xt(e.At), p.xt(e.At), text)
	}

	y := 0.0
	faultTop := y + 18
	p.add(shape{Kind: "text", Class: "lane", X: 4, Y: faultTop + 11, Text: "faults"})
	faultLaneH := laneRowH * float64(max(len(faultRows.ends), 1))
	y = faultTop + faultLaneH + 4
	eventTop := y
	p.add(shape{Kind: "text", Class: "lane", X: 4, Y: eventTop + 11, Text: "leaders, notes"})
	eventLaneH := laneRowH * float64(max(len(eventRows.ends), 1))
	y = eventTop + eventLaneH + 4

	// Panels.
	type panel struct{ top, h float64 }
	countP := panel{y + titleH, countH}
	failP := panel{countP.top + countP.h + titleH, failH}
	latP := panel{failP.top + failP.h + titleH, latencyH}
	names := consumerNames(in.Consumers)
	consP := panel{latP.top + latP.h + titleH, consumerRowH * float64(max(len(names), 1))}
	bottom := consP.top + consP.h
	height := bottom + axisH

	// X grid and axis.
	step := max(niceStep(p.secs, 10), 1)
	for s := 0.0; s <= p.secs+1e-9; s += step {
		x := p.x(s)
		bg = append(bg, shape{Kind: "line", Class: "grid", X: x, Y: faultTop, X2: x, Y2: bottom})
		p.add(shape{Kind: "line", Class: "axis", X: x, Y: bottom, X2: x, Y2: bottom + 5})
		p.add(shape{Kind: "text", Class: "tick", X: x, Y: bottom + 17, Anchor: "middle", Text: strconv.FormatFloat(s, 'f', -1, 64)})
	}
	p.add(shape{Kind: "line", Class: "axis", X: marginLeft, Y: bottom, X2: plotRight, Y2: bottom})
	axisLabel := "seconds since start"
	if !tl.Start.IsZero() {
		axisLabel = "seconds since " + tl.Start.UTC().Format("2006-01-02 15:04:05.000 UTC")
	}
	p.add(shape{Kind: "text", Class: "axislabel", X: (marginLeft + plotRight) / 2, Y: bottom + 36, Anchor: "middle", Text: axisLabel})

	// Faults: shading over everything, a bar and label in the fault lane.
	for i, f := range in.Faults {
		x0, x1 := p.xt(f.Start), p.xt(f.End)
		until := "fault-end at " + secs(f.End.Sub(tl.Start)) + " s"
		if f.Open {
			until = "never ended"
		}
		title := fmt.Sprintf("%s: from %s s, %s", f.What, secs(f.Start.Sub(tl.Start)), until)
		bg = append(bg, shape{Kind: "rect", Class: "fault", X: x0, Y: faultTop, W: max(x1-x0, 1.5), H: bottom - faultTop,
			Title: title, DataStart: secs(f.Start.Sub(tl.Start)), DataEnd: secs(f.End.Sub(tl.Start))})
		l := faultLabels[i]
		if l.row < 0 {
			continue
		}
		ry := faultTop + float64(l.row)*laneRowH
		p.add(shape{Kind: "rect", Class: "faultbar", X: x0, Y: ry + 2, W: max(x1-x0, 1.5), H: laneRowH - 3, Title: title})
		p.add(shape{Kind: "text", Class: "faultlabel", X: l.x, Y: ry + 12, Anchor: l.anchor, Text: l.text, Title: title})
	}

	// Leader changes and notes: a tick over everything, a label in their lane.
	for i, e := range in.Events {
		x := p.xt(e.At)
		l := eventLabels[i]
		class := "leader"
		if e.Type != EventLeader {
			class = "note"
		}
		title := fmt.Sprintf("%s at %s s", l.text, secs(e.At.Sub(tl.Start)))
		if l.row < 0 {
			bg = append(bg, shape{Kind: "line", Class: class, X: x, Y: eventTop, X2: x, Y2: bottom, Title: title})
			continue
		}
		ry := eventTop + float64(l.row)*laneRowH
		bg = append(bg, shape{Kind: "line", Class: class, X: x, Y: ry + 2, X2: x, Y2: bottom, Title: title})
		p.add(shape{Kind: "text", Class: class + "label", X: l.x, Y: ry + 12, Anchor: l.anchor, Text: l.text, Title: title})
	}

	// Panel 1: throughput.
	countMax := max(slices.Max(append([]int{0}, tl.Acked...)), slices.Max(append([]int{0}, tl.Consumed...)))
	top := p.countAxis(countP.top, countP.h, countMax, "records/s")
	p.title(countP.top, "Throughput: writes acknowledged (by acked_at) and records consumed, per second",
		[]legendItem{{"acked writes", colAcked, "line"}, {"records consumed", colConsumed, "dashed"}})
	p.series(countP.top, countP.h, top, tl.Acked, colAcked, "series")
	p.series(countP.top, countP.h, top, tl.Consumed, colConsumed, "series dashed")

	// Panel 2: failed sends, stacked by error.
	stack := make([]int, tl.Seconds)
	for _, s := range tl.Failed {
		for i, n := range s.Counts {
			stack[i] += n
		}
	}
	top = p.countAxis(failP.top, failP.h, slices.Max(append([]int{0}, stack...)), "sends/s")
	var items []legendItem
	for k, s := range tl.Failed {
		items = append(items, legendItem{fmt.Sprintf("%s (%d)", s.Name, s.Total), errorColors[k%len(errorColors)], "box"})
	}
	if len(items) == 0 {
		p.add(shape{Kind: "text", Class: "empty", X: (marginLeft + plotRight) / 2, Y: failP.top + failP.h/2, Anchor: "middle", Text: "no failed sends"})
	}
	p.title(failP.top, "Failed sends per second by error (by sent_at)", items)
	base := make([]int, tl.Seconds)
	for k, s := range tl.Failed {
		for i, n := range s.Counts {
			if n == 0 {
				continue
			}
			x0, x1 := p.x(float64(i)), p.x(float64(i+1))
			if x1-x0 > 3 {
				x0, x1 = x0+0.5, x1-0.5
			}
			yb := failP.top + failP.h - float64(base[i])/top*failP.h
			h := float64(n) / top * failP.h
			p.add(shape{Kind: "rect", Class: "bar", X: x0, Y: yb - h, W: x1 - x0, H: h, Fill: errorColors[k%len(errorColors)],
				Title: fmt.Sprintf("%s: %d sends in second %d", s.Name, n, i)})
			base[i] += n
		}
	}

	// Panel 3: latency, log scale.
	p.title(latP.top, "Write latency (acked_at − sent_at) by sent_at, per second, log scale",
		[]legendItem{{"median", colP50, "line"}, {"max", colMax, "line"}})
	p.latency(latP.top, latP.h, tl.Latency)

	// Panel 4: consumers.
	p.title(consP.top, "Consumer rebalances", consumerLegend())
	p.consumers(consP.top, in.Consumers, names)

	shapes := append(bg, p.shapes...)
	return svgPlot{W: plotWidth, H: math.Ceil(height), Shapes: shapes}
}

// legendItem is one entry of a panel's legend; Style is "line", "dashed",
// "box" or a class of consumer mark.
type legendItem struct {
	Label, Color, Style string
}

func consumerLegend() []legendItem {
	out := make([]legendItem, len(consumerMarks))
	for i, m := range consumerMarks {
		out[i] = legendItem{Label: m.label, Style: m.class}
	}
	return out
}

// title draws a panel's title and, after it, its legend.
func (p *plotter) title(top float64, text string, items []legendItem) {
	y := top - titleH + 22
	p.add(shape{Kind: "text", Class: "ptitle", X: marginLeft, Y: y, Text: text})
	x := marginLeft
	y += 14
	for _, it := range items {
		switch it.Style {
		case "line":
			p.add(shape{Kind: "line", Class: "series", X: x, Y: y - 4, X2: x + 18, Y2: y - 4, Stroke: it.Color})
		case "dashed":
			p.add(shape{Kind: "line", Class: "series dashed", X: x, Y: y - 4, X2: x + 18, Y2: y - 4, Stroke: it.Color})
		case "box":
			p.add(shape{Kind: "rect", Class: "bar", X: x + 4, Y: y - 9, W: 10, H: 10, Fill: it.Color})
		default:
			p.add(shape{Kind: "rect", Class: it.Style, X: x + 7, Y: y - 10, W: 4, H: 11})
		}
		p.add(shape{Kind: "text", Class: "legend", X: x + 22, Y: y, Text: it.Label})
		x += 22 + textWidth(it.Label) + 16
	}
}

// countAxis draws the y axis of a count panel and returns its top value.
func (p *plotter) countAxis(top, h float64, maxCount int, unit string) float64 {
	step := niceStep(float64(max(maxCount, 1)), 4)
	step = max(step, 1)
	yTop := math.Ceil(float64(max(maxCount, 1))/step) * step
	for v := 0.0; v <= yTop+1e-9; v += step {
		y := top + h - v/yTop*h
		p.add(shape{Kind: "line", Class: "hgrid", X: marginLeft, Y: y, X2: plotRight, Y2: y})
		p.add(shape{Kind: "text", Class: "tick", X: marginLeft - 5, Y: y + 4, Anchor: "end", Text: strconv.FormatFloat(v, 'f', -1, 64)})
	}
	p.add(shape{Kind: "line", Class: "axis", X: marginLeft, Y: top, X2: marginLeft, Y2: top + h})
	p.add(shape{Kind: "text", Class: "axislabel", X: 14, Y: top + h/2, Anchor: "middle", Rotate: true, Text: unit})
	return yTop
}

// series draws per-second counts as a line through the middle of every
// second.
func (p *plotter) series(top, h, yTop float64, counts []int, color, class string) {
	if len(counts) == 0 {
		return
	}
	var b strings.Builder
	for i, n := range counts {
		fmt.Fprintf(&b, "%.1f,%.1f ", p.x(float64(i)+0.5), top+h-float64(n)/yTop*h)
	}
	p.add(shape{Kind: "polyline", Class: class, Points: strings.TrimSpace(b.String()), Stroke: color})
}

// latency draws the latency panel: median and max per second on a log
// scale, lines broken over seconds without acknowledged writes.
func (p *plotter) latency(top, h float64, bins []LatencyBin) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, b := range bins {
		if b.N == 0 {
			continue
		}
		for _, d := range []time.Duration{b.P50, b.Max} {
			if d > 0 {
				lo = min(lo, d.Seconds())
				hi = max(hi, d.Seconds())
			}
		}
	}
	p.add(shape{Kind: "line", Class: "axis", X: marginLeft, Y: top, X2: marginLeft, Y2: top + h})
	p.add(shape{Kind: "text", Class: "axislabel", X: 14, Y: top + h/2, Anchor: "middle", Rotate: true, Text: "latency"})
	if math.IsInf(lo, 1) {
		p.add(shape{Kind: "text", Class: "empty", X: (marginLeft + plotRight) / 2, Y: top + h/2, Anchor: "middle", Text: "no acknowledged writes"})
		return
	}
	d0, d1 := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if d1 <= d0 {
		d1 = d0 + 1
	}
	y := func(d time.Duration) float64 {
		v := d0
		if d > 0 {
			v = max(math.Log10(d.Seconds()), d0)
		}
		return top + h - (v-d0)/(d1-d0)*h
	}
	for e := d0; e <= d1; e++ {
		yy := top + h - (e-d0)/(d1-d0)*h
		p.add(shape{Kind: "line", Class: "hgrid", X: marginLeft, Y: yy, X2: plotRight, Y2: yy})
		p.add(shape{Kind: "text", Class: "tick", X: marginLeft - 5, Y: yy + 4, Anchor: "end", Text: fmtDecade(int(e))})
	}
	for _, s := range []struct {
		color string
		val   func(LatencyBin) time.Duration
		name  string
	}{
		{colP50, func(b LatencyBin) time.Duration { return b.P50 }, "median"},
		{colMax, func(b LatencyBin) time.Duration { return b.Max }, "max"},
	} {
		var seg []string
		flush := func() {
			if len(seg) > 1 {
				p.add(shape{Kind: "polyline", Class: "series", Points: strings.Join(seg, " "), Stroke: s.color})
			}
			seg = seg[:0]
		}
		for i, b := range bins {
			if b.N == 0 {
				flush()
				continue
			}
			x, yy := p.x(float64(i)+0.5), y(s.val(b))
			seg = append(seg, fmt.Sprintf("%.1f,%.1f", x, yy))
			p.add(shape{Kind: "circle", Class: "dot", X: x, Y: yy, R: 1.8, Fill: s.color,
				Title: fmt.Sprintf("second %d: %s %s over %d writes", i, s.name, fmtDuration(s.val(b)), b.N)})
		}
		flush()
	}
}

// consumers draws one lane per consumer with a mark per rebalance line.
func (p *plotter) consumers(top float64, lines []consumer.HistoryLine, names []string) {
	if len(names) == 0 {
		p.add(shape{Kind: "text", Class: "empty", X: (marginLeft + plotRight) / 2, Y: top + consumerRowH - 5, Anchor: "middle", Text: "no consumer history"})
		return
	}
	row := map[string]int{}
	for i, n := range names {
		row[n] = i
		y := top + float64(i)*consumerRowH
		p.add(shape{Kind: "line", Class: "lane-line", X: marginLeft, Y: y + consumerRowH/2, X2: plotRight, Y2: y + consumerRowH/2})
		short := n
		if r := []rune(n); len(r) > 13 {
			short = string(r[:12]) + "…"
		}
		p.add(shape{Kind: "text", Class: "tick", X: marginLeft - 5, Y: y + consumerRowH/2 + 4, Anchor: "end", Text: short, Title: n})
	}
	for _, l := range lines {
		class := ""
		for _, m := range consumerMarks {
			if m.typ == l.Type {
				class = m.class
			}
		}
		if class == "" || l.At.IsZero() {
			continue
		}
		what := l.Type
		switch {
		case len(l.Partitions) > 0:
			what += " " + joinInt32(l.Partitions)
		case l.Type == consumer.HistoryGap && l.Partition != nil:
			what += fmt.Sprintf(" partition %d", *l.Partition)
		}
		y := top + float64(row[l.Consumer])*consumerRowH
		p.add(shape{Kind: "rect", Class: class, X: p.xt(l.At) - 2, Y: y + 3, W: 4, H: consumerRowH - 6,
			Title: fmt.Sprintf("%s %s %s (generation %d) at %s s", l.Consumer, l.Topic, what, l.Generation, secs(l.At.Sub(p.start)))})
	}
}

// consumerNames are the consumers of the history lines, sorted.
func consumerNames(lines []consumer.HistoryLine) []string {
	var out []string
	for _, l := range lines {
		out = append(out, l.Consumer)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func joinInt32(xs []int32) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.FormatInt(int64(x), 10)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// niceStep is a step of 1, 2 or 5 times a power of ten that cuts span in
// at most about target parts.
func niceStep(span float64, target int) float64 {
	if span <= 0 || target <= 0 {
		return 1
	}
	raw := span / float64(target)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5} {
		if m*mag >= raw {
			return m * mag
		}
	}
	return 10 * mag
}

// fmtDecade formats 10^e seconds: "1 ms", "10 s".
func fmtDecade(e int) string {
	switch {
	case e >= 0:
		return "1" + strings.Repeat("0", e) + " s"
	case e >= -3:
		return "1" + strings.Repeat("0", e+3) + " ms"
	case e >= -6:
		return "1" + strings.Repeat("0", e+6) + " µs"
	default:
		return "1" + strings.Repeat("0", max(e+9, 0)) + " ns"
	}
}

// fmtDuration formats a duration for people, with millisecond precision
// at most.
func fmtDuration(d time.Duration) string {
	switch {
	case d >= time.Second:
		return strconv.FormatFloat(d.Seconds(), 'f', 3, 64) + " s"
	case d >= time.Millisecond:
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + " ms"
	default:
		return strconv.FormatFloat(float64(d)/float64(time.Microsecond), 'f', 0, 64) + " µs"
	}
}
