package report

import (
	"slices"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/consumer"
	"github.com/tapes-dev/tapes/internal/producer"
)

var t0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

// at is t0 plus ms milliseconds.
func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func ptr[T any](v T) *T { return &v }

// ok is an acknowledged write sent at sentMs and acked at ackMs.
func ok(id string, acks string, sentMs, ackMs int) producer.HistoryLine {
	return producer.HistoryLine{EventID: id, Acks: acks, Status: producer.StatusOK, Offset: 0, Attempts: 1,
		SentAt: at(sentMs), AckedAt: ptr(at(ackMs))}
}

// fail is a failed send sent at sentMs; an empty name leaves Error null.
func fail(id, acks, name string, sentMs int) producer.HistoryLine {
	l := producer.HistoryLine{EventID: id, Acks: acks, Status: producer.StatusError, Offset: -1, Attempts: 3, SentAt: at(sentMs)}
	if name != "" {
		l.Error = &name
	}
	return l
}

func TestPerSecond(t *testing.T) {
	times := []time.Time{
		at(0),      // first instant of second 0
		at(999),    // last millisecond of second 0
		at(1000),   // second 1
		at(2500),   // second 2
		at(2999),   // second 2
		at(-1),     // before the start: dropped
		at(4000),   // second 4: past the 4 seconds, dropped
		{},         // zero: dropped
		at(3999),   // second 3
		at(1000),   // second 1 again
		at(100000), // far after: dropped
	}
	got := PerSecond(t0, 4, times)
	if want := []int{2, 2, 2, 1}; !slices.Equal(got, want) {
		t.Errorf("PerSecond = %v, want %v", got, want)
	}
	if got := PerSecond(t0, 0, times); len(got) != 0 {
		t.Errorf("PerSecond over 0 seconds = %v", got)
	}
	if got := PerSecond(t0, -3, times); len(got) != 0 {
		t.Errorf("PerSecond over -3 seconds = %v", got)
	}
	if got := PerSecond(t0, 3, nil); !slices.Equal(got, []int{0, 0, 0}) {
		t.Errorf("PerSecond of nothing = %v", got)
	}
}

func TestAggregate(t *testing.T) {
	prod := []producer.HistoryLine{
		ok("a", "all", 100, 110),   // sent second 0, acked second 0, 10ms
		ok("b", "all", 200, 230),   // 30ms
		ok("c", "all", 900, 1100),  // 200ms, acked second 1
		ok("d", "all", 2500, 5600), // 3.1s, acked second 5
		fail("e", "all", "NOT_LEADER_OR_FOLLOWER", 1200),
		fail("f", "all", "NOT_LEADER_OR_FOLLOWER", 1300),
		fail("g", "all", "NOT_LEADER_OR_FOLLOWER", 3300),
		fail("h", "all", "REQUEST_TIMED_OUT", 3400),
		fail("i", "all", "", 3500),
		{EventID: "j", Status: producer.StatusOK, SentAt: at(100)}, // acks=0 style: no acked_at, not counted
	}
	cons := []consumer.HistoryLine{
		{Type: consumer.HistoryRecord, At: at(150)},
		{Type: consumer.HistoryRecord, At: at(5100)},
		{Type: consumer.HistoryCommit, At: at(5200)},
		{Type: consumer.HistoryAssigned, At: at(5300)},
	}
	tl := Aggregate(t0, 6, prod, cons)
	if tl.Seconds != 6 || !tl.Start.Equal(t0) {
		t.Errorf("Seconds, Start = %d, %v", tl.Seconds, tl.Start)
	}
	if want := []int{2, 1, 0, 0, 0, 1}; !slices.Equal(tl.Acked, want) {
		t.Errorf("Acked = %v, want %v", tl.Acked, want)
	}
	if want := []int{1, 0, 0, 0, 0, 1}; !slices.Equal(tl.Consumed, want) {
		t.Errorf("Consumed = %v, want %v", tl.Consumed, want)
	}
	wantFailed := []Series{
		{Name: "NOT_LEADER_OR_FOLLOWER", Counts: []int{0, 2, 0, 1, 0, 0}, Total: 3},
		{Name: "REQUEST_TIMED_OUT", Counts: []int{0, 0, 0, 1, 0, 0}, Total: 1},
		{Name: "unknown", Counts: []int{0, 0, 0, 1, 0, 0}, Total: 1},
	}
	if len(tl.Failed) != len(wantFailed) {
		t.Fatalf("Failed = %+v, want %+v", tl.Failed, wantFailed)
	}
	for i, w := range wantFailed {
		g := tl.Failed[i]
		if g.Name != w.Name || g.Total != w.Total || !slices.Equal(g.Counts, w.Counts) {
			t.Errorf("Failed[%d] = %+v, want %+v", i, g, w)
		}
	}
	wantLat := []LatencyBin{
		{N: 3, P50: 30 * time.Millisecond, Max: 200 * time.Millisecond},
		{}, {N: 1, P50: 3100 * time.Millisecond, Max: 3100 * time.Millisecond}, {}, {}, {},
	}
	if !slices.Equal(tl.Latency, wantLat) {
		t.Errorf("Latency = %+v, want %+v", tl.Latency, wantLat)
	}

	empty := Aggregate(t0, 3, nil, nil)
	if !slices.Equal(empty.Acked, []int{0, 0, 0}) || len(empty.Failed) != 0 || len(empty.Latency) != 3 || !slices.Equal(empty.Consumed, []int{0, 0, 0}) {
		t.Errorf("Aggregate of nothing = %+v", empty)
	}
}

func TestMedian(t *testing.T) {
	ms := func(xs ...int) []time.Duration {
		var out []time.Duration
		for _, x := range xs {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	for _, c := range []struct {
		in   []time.Duration
		want time.Duration
	}{
		{nil, 0},
		{ms(7), 7 * time.Millisecond},
		{ms(9, 1, 5), 5 * time.Millisecond},
		{ms(4250, 1500), 2875 * time.Millisecond},
		{ms(1, 2, 3, 100), 2500 * time.Microsecond},
	} {
		in := slices.Clone(c.in)
		if got := Median(in); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", c.in, got, c.want)
		}
		if !slices.Equal(in, c.in) {
			t.Errorf("Median reordered its input: %v", in)
		}
	}
}

func TestFaultIntervals(t *testing.T) {
	end := at(30000)
	events := []Event{
		{At: at(12000), Type: EventFaultEnd, ID: 1},
		{At: at(10000), Type: EventFaultStart, ID: 1, What: "kill broker-1"},
		{At: at(5000), Type: EventFaultEnd, ID: 9}, // no start: ignored
		{At: at(11000), Type: EventLeader, Topic: "orders", Leader: 2, Epoch: 5},
		{At: at(14000), Type: EventFaultStart, ID: 2, What: "pause broker-3"},
		{At: at(15000), Type: EventFaultStart, ID: 2, What: "pause broker-3 again"},
		{At: at(16000), Type: EventFaultEnd, ID: 2}, // ends the first pause
		{At: at(25000), Type: EventFaultStart, ID: 3, What: "isolate broker-2 from broker-1, broker-3"},
		{At: at(40000), Type: EventFaultStart, ID: 4, What: "after the end"},
	}
	got := FaultIntervals(events, end)
	want := []Interval{
		{ID: 1, What: "kill broker-1", Start: at(10000), End: at(12000)},
		{ID: 2, What: "pause broker-3", Start: at(14000), End: at(16000)},
		{ID: 2, What: "pause broker-3 again", Start: at(15000), End: end, Open: true},
		{ID: 3, What: "isolate broker-2 from broker-1, broker-3", Start: at(25000), End: end, Open: true},
		{ID: 4, What: "after the end", Start: at(40000), End: at(40000), Open: true},
	}
	if !slices.Equal(got, want) {
		t.Errorf("FaultIntervals =\n%+v\nwant\n%+v", got, want)
	}
	if got := FaultIntervals(nil, end); len(got) != 0 {
		t.Errorf("FaultIntervals(nil) = %v", got)
	}
}

func TestWindows(t *testing.T) {
	events := []Event{
		{At: at(20000), Type: EventFaultStart, ID: 2, What: "kill broker-2"},
		{At: at(10000), Type: EventFaultStart, ID: 1, What: "kill broker-1"},
		{At: at(12000), Type: EventFaultEnd, ID: 1},
		{At: at(15000), Type: EventFaultStart, ID: 3, What: "isolate broker-3 from broker-1"}, // not a kill
		{At: at(18000), Type: EventNote, What: "kill nothing: a note"},                        // not a fault
	}
	prod := []producer.HistoryLine{
		ok("before", "all", 9000, 9990),
		ok("at-kill", "all", 9500, 10000), // acked exactly at the kill: not after it
		ok("acks1", "1", 10100, 11000),    // acks=1: ignored, acks=all writes exist
		fail("f1", "all", "NOT_LEADER_OR_FOLLOWER", 10200),
		ok("late-sent-early-acked", "all", 10500, 14250),
		ok("second", "all", 10600, 14300),
		ok("after-2", "all", 21000, 21700),
		ok("first-after-2", "all", 20900, 21500), // acked first: history order does not matter
	}
	ws := Windows(events, prod)
	if len(ws) != 2 {
		t.Fatalf("Windows = %+v, want 2 kills", ws)
	}
	if w := ws[0]; w.Kill.What != "kill broker-1" || !w.Recovered || w.Write.EventID != "late-sent-early-acked" ||
		w.Duration != 4250*time.Millisecond || !w.Until.Equal(at(14250)) || !w.AcksAll {
		t.Errorf("first window = %+v", w)
	}
	if w := ws[1]; w.Kill.What != "kill broker-2" || !w.Recovered || w.Write.EventID != "first-after-2" || w.Duration != 1500*time.Millisecond {
		t.Errorf("second window = %+v", w)
	}
	if got, want := Unavailability(events, prod), []time.Duration{4250 * time.Millisecond, 1500 * time.Millisecond}; !slices.Equal(got, want) {
		t.Errorf("Unavailability = %v, want %v", got, want)
	}

	// Without acks=all writes, any acknowledged write counts.
	any := []producer.HistoryLine{ok("acks1", "1", 10100, 11000), ok("acks0", "0", 10050, 10060)}
	if got, want := Unavailability(events[:2], any), []time.Duration{60 * time.Millisecond, 0}; len(got) != 2 || got[0] != want[0] {
		t.Errorf("Unavailability with acks 0/1 only = %v, want first %v", got, want[0])
	}
	if ws := Windows(events[:2], any); ws[0].AcksAll || ws[1].Recovered {
		t.Errorf("Windows with acks 0/1 only = %+v", ws)
	}

	// No acknowledged write after a kill: a lower bound up to the end of
	// the histories.
	failedOnly := []producer.HistoryLine{
		fail("x", "all", "NOT_ENOUGH_REPLICAS", 10500),
		fail("y", "all", "REQUEST_TIMED_OUT", 17000),
		ok("z", "all", 1000, 1100),
	}
	ws = Windows(events, failedOnly)
	if len(ws) != 2 || ws[0].Recovered || ws[0].Duration != 7*time.Second || ws[0].Write != nil {
		t.Errorf("window without recovery = %+v, want 7s to the last send", ws)
	}
	if ws[1].Recovered || ws[1].Duration != 0 {
		t.Errorf("kill after the histories: %+v, want 0", ws[1])
	}
	if got := Unavailability(events, nil); !slices.Equal(got, []time.Duration{0, 0}) {
		t.Errorf("Unavailability without histories = %v", got)
	}
	if got := Unavailability(nil, prod); len(got) != 0 {
		t.Errorf("Unavailability without events = %v", got)
	}
}

func TestNiceStepAndFormats(t *testing.T) {
	for _, c := range []struct {
		span   float64
		target int
		want   float64
	}{{30, 10, 5}, {100, 10, 10}, {1, 10, 0.1}, {7, 4, 2}, {0, 4, 1}, {1234, 10, 200}} {
		if got := niceStep(c.span, c.target); got != c.want {
			t.Errorf("niceStep(%v, %d) = %v, want %v", c.span, c.target, got, c.want)
		}
	}
	for e, want := range map[int]string{-7: "100 ns", -4: "100 µs", -3: "1 ms", -1: "100 ms", 0: "1 s", 1: "10 s", -12: "1 ns"} {
		if got := fmtDecade(e); got != want {
			t.Errorf("fmtDecade(%d) = %q, want %q", e, got, want)
		}
	}
	for d, want := range map[time.Duration]string{4250 * time.Millisecond: "4.250 s", 12500 * time.Microsecond: "12.5 ms", 40 * time.Microsecond: "40 µs"} {
		if got := fmtDuration(d); got != want {
			t.Errorf("fmtDuration(%v) = %q, want %q", d, got, want)
		}
	}
}
