package report

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/tapes-dev/tapes/internal/consumer"
	"github.com/tapes-dev/tapes/internal/producer"
)

// PerSecond counts times by the second since start: out[i] is the number
// of times t with start+i s <= t < start+(i+1) s, for 0 <= i < seconds.
// Times outside [start, start+seconds s) and zero times are not counted.
func PerSecond(start time.Time, seconds int, times []time.Time) []int {
	out := make([]int, max(seconds, 0))
	for _, t := range times {
		if i, ok := bin(start, seconds, t); ok {
			out[i]++
		}
	}
	return out
}

// bin returns the index of the second of t since start.
func bin(start time.Time, seconds int, t time.Time) (int, bool) {
	if t.IsZero() {
		return 0, false
	}
	d := t.Sub(start)
	if d < 0 {
		return 0, false
	}
	i := int(d / time.Second)
	if i >= seconds {
		return 0, false
	}
	return i, true
}

// Series is one named per-second count.
type Series struct {
	Name   string
	Counts []int // by second since Timeline.Start
	Total  int
}

// LatencyBin is the write latency (acked_at - sent_at) of the acknowledged
// writes sent within one second.
type LatencyBin struct {
	N   int // writes sent within the second and acknowledged
	P50 time.Duration
	Max time.Duration
}

// Timeline is the per-second aggregation of a run that the page plots.
// Every slice has Seconds elements; element i is the second [Start+i s,
// Start+(i+1) s).
type Timeline struct {
	Start   time.Time
	Seconds int
	// Acked counts the acknowledged writes (status ok) by acked_at.
	Acked []int
	// Failed counts the failed sends (status error) by error name
	// ("unknown" without one), by sent_at (a history does not say when a
	// send failed), the largest total first.
	Failed []Series
	// Latency is the latency of the acknowledged writes, by sent_at (the
	// convention of Jepsen's latency plots: a write sent during a fault
	// shows its full wait at the moment it began).
	Latency []LatencyBin
	// Consumed counts the records processed by the consumers ("record"
	// lines) by at.
	Consumed []int
}

// unknownError names a failed send without an error name.
const unknownError = "unknown"

// Aggregate computes the Timeline of seconds seconds from start.
func Aggregate(start time.Time, seconds int, prod []producer.HistoryLine, cons []consumer.HistoryLine) Timeline {
	seconds = max(seconds, 0)
	tl := Timeline{Start: start, Seconds: seconds}
	var acked []time.Time
	failed := map[string][]time.Time{}
	lat := make([][]time.Duration, seconds)
	for i := range prod {
		l := &prod[i]
		switch l.Status {
		case producer.StatusOK:
			if l.AckedAt == nil {
				continue
			}
			acked = append(acked, *l.AckedAt)
			if i, ok := bin(start, seconds, l.SentAt); ok {
				lat[i] = append(lat[i], max(l.AckedAt.Sub(l.SentAt), 0))
			}
		case producer.StatusError:
			name := unknownError
			if l.Error != nil && *l.Error != "" {
				name = *l.Error
			}
			failed[name] = append(failed[name], l.SentAt)
		}
	}
	tl.Acked = PerSecond(start, seconds, acked)
	for name, ts := range failed {
		s := Series{Name: name, Counts: PerSecond(start, seconds, ts)}
		for _, n := range s.Counts {
			s.Total += n
		}
		tl.Failed = append(tl.Failed, s)
	}
	slices.SortFunc(tl.Failed, func(a, b Series) int {
		return cmp.Or(cmp.Compare(b.Total, a.Total), strings.Compare(a.Name, b.Name))
	})
	tl.Latency = make([]LatencyBin, seconds)
	for i, ds := range lat {
		if len(ds) == 0 {
			continue
		}
		tl.Latency[i] = LatencyBin{N: len(ds), P50: Median(ds), Max: slices.Max(ds)}
	}
	var consumed []time.Time
	for _, l := range cons {
		if l.Type == consumer.HistoryRecord {
			consumed = append(consumed, l.At)
		}
	}
	tl.Consumed = PerSecond(start, seconds, consumed)
	return tl
}

// Median is the median of ds (the mean of the two middle values of an even
// count), 0 for none. ds is not modified.
func Median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return s[m-1] + (s[m]-s[m-1])/2
}

// Interval is one fault, from its fault-start to its fault-end.
type Interval struct {
	ID    int
	What  string
	Start time.Time
	// End is the fault-end's time, or the end given to FaultIntervals
	// when the fault never ended (Open).
	End  time.Time
	Open bool
}

// sortedEvents returns events stably sorted by time.
func sortedEvents(events []Event) []Event {
	s := slices.Clone(events)
	slices.SortStableFunc(s, func(a, b Event) int { return a.At.Compare(b.At) })
	return s
}

// FaultIntervals pairs every fault-start with the first later fault-end of
// the same ID (the earliest unmatched start first). A start never ended
// runs to end (or to itself, if end is before it); an end without a start
// is ignored. The result is sorted by start.
func FaultIntervals(events []Event, end time.Time) []Interval {
	var out []Interval
	open := map[int][]int{} // ID -> indexes in out of unmatched starts, oldest first
	for _, e := range sortedEvents(events) {
		switch e.Type {
		case EventFaultStart:
			open[e.ID] = append(open[e.ID], len(out))
			out = append(out, Interval{ID: e.ID, What: e.What, Start: e.At, Open: true})
		case EventFaultEnd:
			if q := open[e.ID]; len(q) > 0 {
				out[q[0]].End = e.At
				out[q[0]].Open = false
				open[e.ID] = q[1:]
			}
		}
	}
	for i := range out {
		if out[i].Open {
			out[i].End = out[i].Start
			if end.After(out[i].Start) {
				out[i].End = end
			}
		}
	}
	return out
}

// Window is the unavailability after one kill: from the kill (a fault-start
// whose What starts with "kill") to the next acknowledged write.
type Window struct {
	Kill Event
	// Recovered says that a write was acknowledged after the kill: Until
	// is its acked_at and Write the write. Otherwise Until is the last
	// time of the producer histories (or the kill itself) and Duration a
	// lower bound.
	Recovered bool
	Until     time.Time
	Duration  time.Duration
	Write     *producer.HistoryLine
	// AcksAll says that only acks=all writes were considered (there was
	// at least one); otherwise any acknowledged write was.
	AcksAll bool
}

// IsKill says whether e starts a kill.
func IsKill(e Event) bool {
	return e.Type == EventFaultStart && strings.HasPrefix(e.What, "kill")
}

// Windows measures the unavailability after every kill, in the order of
// the kills: the time from the fault-start to the first acked_at strictly
// after it of a write with status ok and acks=all, or of any acknowledged
// write when no line of the histories has acks=all.
func Windows(events []Event, prod []producer.HistoryLine) []Window {
	acksAll := slices.ContainsFunc(prod, func(l producer.HistoryLine) bool { return l.Acks == "all" })
	var acked []*producer.HistoryLine
	var last time.Time
	for i := range prod {
		l := &prod[i]
		if l.SentAt.After(last) {
			last = l.SentAt
		}
		if l.AckedAt != nil && l.AckedAt.After(last) {
			last = *l.AckedAt
		}
		if l.Status != producer.StatusOK || l.AckedAt == nil || (acksAll && l.Acks != "all") {
			continue
		}
		acked = append(acked, l)
	}
	slices.SortStableFunc(acked, func(a, b *producer.HistoryLine) int { return a.AckedAt.Compare(*b.AckedAt) })
	var out []Window
	for _, e := range sortedEvents(events) {
		if !IsKill(e) {
			continue
		}
		w := Window{Kill: e, AcksAll: acksAll}
		i, _ := slices.BinarySearchFunc(acked, e.At, func(l *producer.HistoryLine, t time.Time) int {
			if l.AckedAt.After(t) {
				return 1
			}
			return -1
		})
		if i < len(acked) {
			w.Recovered, w.Write, w.Until = true, acked[i], *acked[i].AckedAt
		} else {
			w.Until = e.At
			if last.After(e.At) {
				w.Until = last
			}
		}
		w.Duration = w.Until.Sub(e.At)
		out = append(out, w)
	}
	return out
}

// Unavailability is the Duration of every Window (see Windows): one per
// kill, in the order of the kills. A kill after which no write was
// acknowledged counts until the end of the producer histories (a lower
// bound).
func Unavailability(events []Event, prod []producer.HistoryLine) []time.Duration {
	ws := Windows(events, prod)
	out := make([]time.Duration, len(ws))
	for i, w := range ws {
		out[i] = w.Duration
	}
	return out
}
