package check

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/consumer"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/producer"
	"github.com/tapes-dev/tapes/internal/sink"
)

// sendSpec is one record of a producer history: keyless when key is "",
// failed when err is set.
type sendSpec struct {
	id       string
	key      string
	p        int32
	off      int64
	err      kerr.Code
	attempts int
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// writeProducer writes a producer history with the producer's own writer.
func writeProducer(t *testing.T, path string, acks int32, sends []sendSpec) {
	t.Helper()
	h, err := producer.CreateHistory(path, acks)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range sends {
		r := &producer.Record{Value: []byte("v-" + s.id), SentAt: t0.Add(time.Duration(i) * time.Millisecond),
			Headers: []*tapesv1.Header{{Key: producer.EventIDHeader, Value: []byte(s.id)}}}
		if s.key != "" {
			r.Key = []byte(s.key)
		}
		res := &producer.Result{Partition: s.p, BaseOffset: s.off, Attempts: max(s.attempts, 1), Done: r.SentAt.Add(time.Millisecond), Records: []*producer.Record{r}}
		if s.err != "" {
			res.BaseOffset, res.Err, res.ErrName, res.Attempts = -1, kerr.New(s.err, "test"), string(s.err), s.attempts
		}
		h.Write(res)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
}

// writeConsumer writes a consumer history with the consumer's own writer.
func writeConsumer(t *testing.T, path string, lines []consumer.HistoryLine) {
	t.Helper()
	h, err := consumer.CreateHistory(path)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range lines {
		l.At = t0.Add(time.Duration(i) * time.Millisecond)
		l.Topic = "orders"
		if err := h.Write(l); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
}

func assigned(c string, gen int32, ps ...int32) consumer.HistoryLine {
	return consumer.HistoryLine{Type: consumer.HistoryAssigned, Consumer: c, Generation: gen, Partitions: ps}
}

func revoked(c string, gen int32, ps ...int32) consumer.HistoryLine {
	return consumer.HistoryLine{Type: consumer.HistoryRevoked, Consumer: c, Generation: gen, Partitions: ps}
}

func read(c string, gen int32, p int32, off int64, id string) consumer.HistoryLine {
	v := "v-" + id
	return consumer.HistoryLine{Type: consumer.HistoryRecord, Consumer: c, Generation: gen, Partition: &p, Offset: &off, EventID: &id, Value: &v}
}

// reads are consumer c's record lines of partition p at offsets offs, each
// holding ids[offset].
func reads(c string, gen int32, p int32, ids []string, offs ...int64) []consumer.HistoryLine {
	var out []consumer.HistoryLine
	for _, o := range offs {
		out = append(out, read(c, gen, p, o, ids[o]))
	}
	return out
}

func gap(c string, gen int32, p int32, from, to, resumeAt int64) consumer.HistoryLine {
	return consumer.HistoryLine{Type: consumer.HistoryGap, Consumer: c, Generation: gen, Partition: &p, From: &from, To: &to, ResumeAt: &resumeAt}
}

func commit(c string, gen int32, offsets consumer.Offsets) consumer.HistoryLine {
	return consumer.HistoryLine{Type: consumer.HistoryCommit, Consumer: c, Generation: gen, Offsets: offsets, Status: "ok"}
}

// The base run: producer p-aa sends p-aa-0..4 keyless to partition 0
// (offsets 0..4) and p-aa-5..7 with key k to partition 1 (offsets 0..2),
// acks=all; consumer c1 reads everything in one generation.
var (
	p0 = []string{"p-aa-0", "p-aa-1", "p-aa-2", "p-aa-3", "p-aa-4"}
	p1 = []string{"p-aa-5", "p-aa-6", "p-aa-7"}
)

func baseSends() []sendSpec {
	var out []sendSpec
	for i, id := range p0 {
		out = append(out, sendSpec{id: id, p: 0, off: int64(i)})
	}
	for i, id := range p1 {
		out = append(out, sendSpec{id: id, key: "k", p: 1, off: int64(i)})
	}
	return out
}

func baseConsumer() []consumer.HistoryLine {
	lines := []consumer.HistoryLine{assigned("c1", 1, 0, 1)}
	lines = append(lines, reads("c1", 1, 0, p0, 0, 1, 2, 3, 4)...)
	lines = append(lines, reads("c1", 1, 1, p1, 0, 1, 2)...)
	return append(lines, commit("c1", 1, consumer.Offsets{0: 5, 1: 3}), revoked("c1", 1, 0, 1))
}

func logOf(ids []string) []LogRecord {
	out := make([]LogRecord, len(ids))
	for i, id := range ids {
		out[i] = LogRecord{Offset: int64(i), EventID: id, Value: "v-" + id}
	}
	return out
}

func baseLog() map[int32][]LogRecord { return map[int32][]LogRecord{0: logOf(p0), 1: logOf(p1)} }

// scenario is the inputs of one Check.
type scenario struct {
	acks      int32 // of the producer history; 0 means acks=all here
	sends     []sendSpec
	consumers [][]consumer.HistoryLine
	log       map[int32][]LogRecord
	logStart  map[int32]int64
	txn       []string // transactional histories, already written
}

func (s scenario) run(t *testing.T) Result {
	t.Helper()
	dir := t.TempDir()
	in := Input{ProducerHistories: []string{filepath.Join(dir, "producer.jsonl")}, Log: s.log, LogStart: s.logStart, TxnHistories: s.txn, Expect: Safe}
	acks := s.acks
	if acks == 0 {
		acks = -1
	} else if acks == 100 {
		acks = 0
	}
	writeProducer(t, in.ProducerHistories[0], acks, s.sends)
	for i, lines := range s.consumers {
		path := filepath.Join(dir, "consumer-"+strconv.Itoa(i+1)+".jsonl")
		writeConsumer(t, path, lines)
		in.ConsumerHistories = append(in.ConsumerHistories, path)
	}
	res, err := Check(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// assertFirst checks that the first anomaly listed of each kind of first
// is the one given (detail aside), and has a detail.
func assertFirst(t *testing.T, res Result, first map[string]Anomaly) {
	t.Helper()
	for k, want := range first {
		i := slices.IndexFunc(res.Anomalies, func(a Anomaly) bool { return a.Kind == k })
		if i < 0 {
			t.Errorf("no %s anomaly listed", k)
			continue
		}
		if got := trimmed(res.Anomalies[i]); !reflect.DeepEqual(got, want) {
			t.Errorf("first %s:\n got %+v\nwant %+v", k, got, want)
		}
		if res.Anomalies[i].Detail == "" {
			t.Errorf("%s has no detail", k)
		}
	}
}

// trimmed is an anomaly without its detail, for comparisons.
func trimmed(a Anomaly) Anomaly { a.Detail = ""; return a }

func TestCheckFindsEachAnomaly(t *testing.T) {
	acksOne := int32(1)
	acksZero := int32(100) // scenario.run's spelling of acks=0
	cases := []struct {
		name string
		s    scenario
		// counts are the non-zero counts expected; every other checked kind
		// must be 0.
		counts map[string]int
		// first is the first anomaly of each kind named (detail aside).
		first   map[string]Anomaly
		deleted int64
		valid   bool // under Safe
	}{
		{
			name: "clean, with a full read", valid: true,
			s: scenario{sends: baseSends(), consumers: [][]consumer.HistoryLine{baseConsumer()}, log: baseLog()},
		},
		{
			name: "clean, reassigned partitions re-read from the committed offset", valid: true,
			s: scenario{sends: baseSends(), consumers: [][]consumer.HistoryLine{slices.Concat(
				[]consumer.HistoryLine{assigned("c1", 1, 0, 1)}, reads("c1", 1, 0, p0, 0, 1, 2, 3),
				[]consumer.HistoryLine{revoked("c1", 1, 0, 1), assigned("c1", 2, 0, 1)},
				reads("c1", 2, 0, p0, 2, 3, 4), reads("c1", 2, 1, p1, 0, 1, 2))}},
		},
		{
			name: "lost-write: a commit skipped offset 2, later offsets read", valid: false,
			s: scenario{sends: baseSends(), consumers: [][]consumer.HistoryLine{
				slices.Concat([]consumer.HistoryLine{assigned("c1", 1, 0, 1)}, reads("c1", 1, 0, p0, 0, 1), reads("c1", 1, 1, p1, 0, 1, 2),
					[]consumer.HistoryLine{commit("c1", 1, consumer.Offsets{0: 3}), revoked("c1", 1, 0)}),
				slices.Concat([]consumer.HistoryLine{assigned("c2", 2, 0)}, reads("c2", 2, 0, p0, 3, 4)),
			}},
			counts: map[string]int{LostWrite: 1, Unseen: 1},
			first: map[string]Anomaly{
				LostWrite: {Kind: LostWrite, Partition: 0, Offsets: []int64{2}, EventIDs: []string{"p-aa-2"}},
				Unseen:    {Kind: Unseen, Partition: 0, Offsets: []int64{2}, EventIDs: []string{"p-aa-2"}},
			},
		},
		{
			name: "lost-write with acks=0: a later send of the producer was read", valid: false,
			s: scenario{acks: acksZero, sends: []sendSpec{{id: "p-aa-0", off: -1}, {id: "p-aa-1", off: -1}, {id: "p-aa-2", off: -1}},
				consumers: [][]consumer.HistoryLine{{assigned("c1", 1, 0), read("c1", 1, 0, 0, "p-aa-0"), read("c1", 1, 0, 1, "p-aa-2")}}},
			counts: map[string]int{LostWrite: 1, Unseen: 1},
			first:  map[string]Anomaly{LostWrite: {Kind: LostWrite, Partition: 0, EventIDs: []string{"p-aa-1"}}},
		},
		{
			name: "unseen only: the last record was not read by the end", valid: false,
			s: scenario{sends: baseSends(), consumers: [][]consumer.HistoryLine{slices.Concat(
				[]consumer.HistoryLine{assigned("c1", 1, 0, 1)}, reads("c1", 1, 0, p0, 0, 1, 2, 3), reads("c1", 1, 1, p1, 0, 1, 2))}},
			counts: map[string]int{Unseen: 1},
			first:  map[string]Anomaly{Unseen: {Kind: Unseen, Partition: 0, Offsets: []int64{4}, EventIDs: []string{"p-aa-4"}}},
		},
		{
			name: "retention: a gap and the log start excuse unread records", valid: true, deleted: 3,
			s: scenario{sends: baseSends(), consumers: [][]consumer.HistoryLine{slices.Concat(
				[]consumer.HistoryLine{assigned("c1", 1, 0, 1), gap("c1", 1, 0, 0, 2, 2)}, reads("c1", 1, 0, p0, 2, 3, 4),
				reads("c1", 1, 1, p1, 1, 2))},
				log: map[int32][]LogRecord{0: logOf(p0)[3:], 1: logOf(p1)[1:]}, logStart: map[int32]int64{0: 3, 1: 1}},
		},
		{
			name: "duplicate: p-aa-2 written again at offset 5", valid: false,
			s: scenario{sends: baseSends(), consumers: [][]consumer.HistoryLine{slices.Concat(baseConsumer()[:6],
				[]consumer.HistoryLine{read("c1", 1, 0, 5, "p-aa-2")}, baseConsumer()[6:])}},
			counts: map[string]int{Duplicate: 1},
			first:  map[string]Anomaly{Duplicate: {Kind: Duplicate, Partition: 0, Offsets: []int64{2, 5}, EventIDs: []string{"p-aa-2"}}},
		},
		{
			name: "inconsistent-offsets: the full read holds another record at offset 3", valid: false,
			s: scenario{sends: baseSends(), consumers: [][]consumer.HistoryLine{baseConsumer()},
				log: map[int32][]LogRecord{0: append(logOf(p0[:3]), LogRecord{Offset: 3, EventID: "p-zz-9"}, logOf(p0)[4]), 1: logOf(p1)}},
			counts: map[string]int{InconsistentOffsets: 1},
			first: map[string]Anomaly{InconsistentOffsets: {Kind: InconsistentOffsets, Partition: 0, Offsets: []int64{3},
				EventIDs: []string{"p-aa-3", "p-zz-9"}}},
		},
		{
			name: "inconsistent-offsets and lost-write: an acks=1 record truncated and its offset reused", valid: false,
			s: scenario{acks: acksOne, sends: []sendSpec{{id: "p-aa-0", off: 0}, {id: "p-aa-1", off: 1}, {id: "p-bb-0", off: 1}, {id: "p-bb-1", off: 2}},
				consumers: [][]consumer.HistoryLine{{assigned("c1", 1, 0), read("c1", 1, 0, 0, "p-aa-0"), read("c1", 1, 0, 1, "p-bb-0"), read("c1", 1, 0, 2, "p-bb-1")}}},
			counts: map[string]int{InconsistentOffsets: 1, LostWrite: 1, Unseen: 1},
			first: map[string]Anomaly{
				InconsistentOffsets: {Kind: InconsistentOffsets, Partition: 0, Offsets: []int64{1}, EventIDs: []string{"p-aa-1", "p-bb-0"}},
				LostWrite:           {Kind: LostWrite, Partition: 0, Offsets: []int64{1}, EventIDs: []string{"p-aa-1"}},
			},
		},
		{
			name: "nonmonotonic-poll: offset 1 again after offset 2", valid: false,
			s: scenario{sends: baseSends(), consumers: [][]consumer.HistoryLine{slices.Concat(baseConsumer()[:4],
				reads("c1", 1, 0, p0, 1, 2), baseConsumer()[4:])}},
			counts: map[string]int{NonmonotonicPoll: 1},
			first: map[string]Anomaly{NonmonotonicPoll: {Kind: NonmonotonicPoll, Partition: 0, Offsets: []int64{2, 1},
				EventIDs: []string{"p-aa-2", "p-aa-1"}, Consumer: "c1"}},
		},
		{
			name: "poll-skip: c1 jumps over offsets 2 and 3 that c2 read", valid: false,
			s: scenario{sends: baseSends(), consumers: [][]consumer.HistoryLine{
				slices.Concat([]consumer.HistoryLine{assigned("c1", 1, 0)}, reads("c1", 1, 0, p0, 0, 1, 4)),
				slices.Concat([]consumer.HistoryLine{assigned("c2", 1, 0, 1)}, reads("c2", 1, 0, p0, 0, 1, 2, 3, 4), reads("c2", 1, 1, p1, 0, 1, 2)),
			}},
			counts: map[string]int{PollSkip: 1},
			first: map[string]Anomaly{PollSkip: {Kind: PollSkip, Partition: 0, Offsets: []int64{2, 3},
				EventIDs: []string{"p-aa-2", "p-aa-3"}, Consumer: "c1"}},
		},
		{
			name: "poll-skip over offsets only the acks=all acknowledgements show", valid: false,
			s: scenario{sends: baseSends(), consumers: [][]consumer.HistoryLine{
				slices.Concat([]consumer.HistoryLine{assigned("c1", 1, 0, 1)}, reads("c1", 1, 0, p0, 0, 1, 3, 4), reads("c1", 1, 1, p1, 0, 1, 2)),
			}},
			counts: map[string]int{PollSkip: 1, LostWrite: 1, Unseen: 1},
			first: map[string]Anomaly{
				PollSkip:  {Kind: PollSkip, Partition: 0, Offsets: []int64{2}, EventIDs: []string{"p-aa-2"}, Consumer: "c1"},
				LostWrite: {Kind: LostWrite, Partition: 0, Offsets: []int64{2}, EventIDs: []string{"p-aa-2"}},
			},
		},
		{
			name: "no poll-skip over offsets only an acks=1 acknowledgement shows", valid: false,
			s: scenario{acks: acksOne, sends: baseSends(), consumers: [][]consumer.HistoryLine{
				slices.Concat([]consumer.HistoryLine{assigned("c1", 1, 0, 1)}, reads("c1", 1, 0, p0, 0, 1, 4), reads("c1", 1, 1, p1, 0, 1, 2)),
			}},
			counts: map[string]int{LostWrite: 2, Unseen: 2},
		},
		{
			name: "a revocation ends the ownership: a record after it is not compared", valid: true,
			s: scenario{sends: baseSends(), consumers: [][]consumer.HistoryLine{slices.Concat(
				[]consumer.HistoryLine{assigned("c1", 1, 0, 1)}, reads("c1", 1, 0, p0, 0, 1, 2), []consumer.HistoryLine{revoked("c1", 1, 0)},
				reads("c1", 1, 0, p0, 1, 2, 3, 4), reads("c1", 1, 1, p1, 0, 1, 2))}},
		},
		{
			name: "nonmonotonic-poll: offset 1 processed twice in a row", valid: false,
			s: scenario{sends: baseSends(), consumers: [][]consumer.HistoryLine{slices.Concat(baseConsumer()[:3],
				reads("c1", 1, 0, p0, 1), baseConsumer()[3:])}},
			counts: map[string]int{NonmonotonicPoll: 1},
			first: map[string]Anomaly{NonmonotonicPoll: {Kind: NonmonotonicPoll, Partition: 0, Offsets: []int64{1, 1},
				EventIDs: []string{"p-aa-1", "p-aa-1"}, Consumer: "c1"}},
		},
		{
			name: "poll-skip after a gap: resume_at 2 but read from 4", valid: false,
			s: scenario{sends: baseSends(), consumers: [][]consumer.HistoryLine{
				slices.Concat([]consumer.HistoryLine{assigned("c1", 1, 0, 1), gap("c1", 1, 0, 0, 2, 2)}, reads("c1", 1, 0, p0, 4), reads("c1", 1, 1, p1, 0, 1, 2)),
			}, log: baseLog()},
			counts: map[string]int{PollSkip: 1},
			first: map[string]Anomaly{PollSkip: {Kind: PollSkip, Partition: 0, Offsets: []int64{2, 3},
				EventIDs: []string{"p-aa-2", "p-aa-3"}, Consumer: "c1"}},
		},
		{
			name: "nonmonotonic-send: send 6 acknowledged below send 5 (reported, still safe)", valid: true,
			s: scenario{sends: slices.Concat(baseSends()[:5], []sendSpec{{id: "p-aa-5", key: "k", p: 1, off: 1}, {id: "p-aa-6", key: "k", p: 1, off: 0}, {id: "p-aa-7", key: "k", p: 1, off: 2}}),
				consumers: [][]consumer.HistoryLine{slices.Concat([]consumer.HistoryLine{assigned("c1", 1, 0, 1)}, reads("c1", 1, 0, p0, 0, 1, 2, 3, 4),
					[]consumer.HistoryLine{read("c1", 1, 1, 0, "p-aa-6"), read("c1", 1, 1, 1, "p-aa-5"), read("c1", 1, 1, 2, "p-aa-7")})}},
			counts: map[string]int{NonmonotonicSend: 1},
			first: map[string]Anomaly{NonmonotonicSend: {Kind: NonmonotonicSend, Partition: 1, Offsets: []int64{1, 0},
				EventIDs: []string{"p-aa-5", "p-aa-6"}}},
		},
		{
			name: "aborted-read: refused with NOT_ENOUGH_REPLICAS, yet read", valid: false,
			s: scenario{sends: append(baseSends(), sendSpec{id: "p-aa-8", key: "k", p: 1, err: kerr.NotEnoughReplicas, attempts: 1}),
				consumers: [][]consumer.HistoryLine{slices.Concat(baseConsumer(), []consumer.HistoryLine{assigned("c1", 2, 1), read("c1", 2, 1, 3, "p-aa-8")})}},
			counts: map[string]int{AbortedRead: 1},
			first:  map[string]Anomaly{AbortedRead: {Kind: AbortedRead, Partition: 1, Offsets: []int64{3}, EventIDs: []string{"p-aa-8"}}},
		},
		{
			name: "indeterminate-read: timed out after 2 attempts, and read (reported, still safe)", valid: true,
			s: scenario{sends: append(baseSends(), sendSpec{id: "p-aa-8", key: "k", p: 1, err: kerr.RequestTimedOut, attempts: 2}),
				consumers: [][]consumer.HistoryLine{slices.Concat(baseConsumer(), []consumer.HistoryLine{assigned("c1", 2, 1), read("c1", 2, 1, 3, "p-aa-8")})}},
			counts: map[string]int{IndeterminateRead: 1},
			first:  map[string]Anomaly{IndeterminateRead: {Kind: IndeterminateRead, Partition: 1, Offsets: []int64{3}, EventIDs: []string{"p-aa-8"}}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := c.s.run(t)
			for _, k := range Kinds {
				n, checked := res.Counts[k]
				if slices.Contains(sinkKinds, k) || slices.Contains(TxnKinds, k) {
					if checked {
						t.Errorf("%s checked without a sink or transactional histories", k)
					}
					continue
				}
				if !checked || n != c.counts[k] {
					t.Errorf("%s = %d (checked %v), want %d", k, n, checked, c.counts[k])
				}
			}
			assertFirst(t, res, c.first)
			if res.DeletedByRetention != c.deleted {
				t.Errorf("deleted by retention = %d, want %d", res.DeletedByRetention, c.deleted)
			}
			if res.Valid != c.valid || res.Expectation != "safe" || (len(res.Why) == 0) != c.valid {
				t.Errorf("valid = %v (why %q), want %v", res.Valid, res.Why, c.valid)
			}
			if t.Failed() {
				b, _ := json.MarshalIndent(res, "", "  ")
				t.Logf("result:\n%s", b)
			}
		})
	}
}

func TestCheckCountsAndJSON(t *testing.T) {
	s := scenario{sends: append(baseSends(), sendSpec{id: "p-aa-8", p: 1, err: kerr.NotEnoughReplicas, attempts: 1}),
		consumers: [][]consumer.HistoryLine{baseConsumer()}, log: baseLog()}
	res := s.run(t)
	if res.Sent != 9 || res.Acked != 8 || res.Failed != 1 || res.Processed != 8 || res.Read != 8 || res.LogRecords != 8 || !res.Valid {
		t.Fatalf("counters %+v", res)
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"counts", "anomalies", "acked", "failed", "read", "valid", "expectation", "log_records", "deleted_by_retention"} {
		if _, ok := back[k]; !ok {
			t.Errorf("JSON has no %q: %s", k, b)
		}
	}
	if _, ok := back["sink"]; ok {
		t.Errorf("JSON has a sink without one: %s", b)
	}
}

func TestCheckCapsAnomaliesPerKind(t *testing.T) {
	var sends []sendSpec
	for i := range MaxPerKind + 10 {
		sends = append(sends, sendSpec{id: "p-aa-" + strconv.Itoa(i), p: 0, off: int64(i)})
	}
	// Only the last record is read: every other one is a lost write.
	last := int64(MaxPerKind + 9)
	s := scenario{sends: sends, consumers: [][]consumer.HistoryLine{{assigned("c1", 1, 0), read("c1", 1, 0, last, "p-aa-"+strconv.FormatInt(last, 10))}}}
	res := s.run(t)
	if res.Counts[LostWrite] != MaxPerKind+9 {
		t.Fatalf("lost-write = %d, want %d", res.Counts[LostWrite], MaxPerKind+9)
	}
	var offs []int64
	for _, a := range res.Anomalies {
		if a.Kind == LostWrite {
			offs = append(offs, a.Offsets[0])
		}
	}
	if len(offs) != MaxPerKind || offs[0] != 0 || offs[MaxPerKind-1] != MaxPerKind-1 || !slices.IsSorted(offs) {
		t.Fatalf("listed lost-write offsets %v: want the first %d in order", offs, MaxPerKind)
	}
}

func TestCheckSink(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "sink.db")
	sk, err := sink.Open(db, sink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// p-aa-2 applied twice, p-aa-4 never; p-aa-5 after p-aa-6 (same key).
	for i, id := range []string{"p-aa-0", "p-aa-1", "p-aa-2", "p-aa-2", "p-aa-3", "p-aa-6", "p-aa-5", "p-aa-7"} {
		if _, err := sk.Apply(context.Background(), sink.Effect{Consumer: "c1", Generation: 1, Topic: "orders", Offset: int64(i), EventID: id, Key: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := sk.Close(); err != nil {
		t.Fatal(err)
	}
	prod := filepath.Join(dir, "producer.jsonl")
	writeProducer(t, prod, -1, baseSends())
	cons := filepath.Join(dir, "consumer.jsonl")
	writeConsumer(t, cons, baseConsumer())
	res, err := Check(context.Background(), Input{ProducerHistories: []string{prod}, ConsumerHistories: []string{cons}, SinkDB: db, Expect: Safe})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{DuplicateEffect: 1, NeverProcessed: 1, OutOfKeyOrder: 1}
	for k, n := range want {
		if res.Counts[k] != n {
			t.Errorf("%s = %d, want %d", k, res.Counts[k], n)
		}
	}
	firstOf := func(kind string) Anomaly {
		for _, a := range res.Anomalies {
			if a.Kind == kind {
				return trimmed(a)
			}
		}
		return Anomaly{}
	}
	if got, want := firstOf(DuplicateEffect), (Anomaly{Kind: DuplicateEffect, Partition: 0, Offsets: []int64{2}, EventIDs: []string{"p-aa-2"}}); !reflect.DeepEqual(got, want) {
		t.Errorf("duplicate-effect %+v, want %+v", got, want)
	}
	if got, want := firstOf(NeverProcessed), (Anomaly{Kind: NeverProcessed, Partition: 0, Offsets: []int64{4}, EventIDs: []string{"p-aa-4"}}); !reflect.DeepEqual(got, want) {
		t.Errorf("never-processed %+v, want %+v", got, want)
	}
	if got, want := firstOf(OutOfKeyOrder), (Anomaly{Kind: OutOfKeyOrder, Partition: 1, Offsets: []int64{0}, EventIDs: []string{"p-aa-5"}}); !reflect.DeepEqual(got, want) {
		t.Errorf("out-of-key-order %+v, want %+v", got, want)
	}
	if res.Sink == nil || res.Sink.Duplicates != 1 || res.Valid {
		t.Errorf("sink %+v valid %v: want the stats and not valid", res.Sink, res.Valid)
	}
	wantWhy := []string{"duplicate-effect = 1 (must be 0)", "never-processed = 1 (must be 0)"}
	if !reflect.DeepEqual(res.Why, wantWhy) {
		t.Errorf("why %q, want %q", res.Why, wantWhy)
	}
}

func TestMeets(t *testing.T) {
	r := Result{Counts: map[string]int{LostWrite: 0, Duplicate: 2}}
	cases := []struct {
		e    Expectation
		ok   bool
		want []string
	}{
		{None, true, nil},
		{Expectation{MustBeZero: []string{LostWrite, NeverProcessed}}, true, nil}, // never-processed not checked
		{Expectation{MustBeZero: []string{Duplicate}}, false, []string{"duplicate = 2 (must be 0)"}},
		{Expectation{MustBePositive: []string{Duplicate}}, true, nil},
		{Expectation{MustBePositive: []string{LostWrite, NeverProcessed}}, false,
			[]string{"lost-write = 0 (must be positive)", "never-processed not checked (must be positive)"}},
		{Expectation{MustBeZero: []string{"lost-writes"}}, false, []string{"lost-writes: no such anomaly kind"}},
	}
	for _, c := range cases {
		ok, why := r.Meets(c.e)
		if ok != c.ok || !reflect.DeepEqual(why, c.want) {
			t.Errorf("Meets(%+v) = %v %q, want %v %q", c.e, ok, why, c.ok, c.want)
		}
	}
}

func TestCheckInputErrors(t *testing.T) {
	dir := t.TempDir()
	prod := filepath.Join(dir, "producer.jsonl")
	writeProducer(t, prod, -1, baseSends())
	bad := filepath.Join(dir, "bad.jsonl")
	writeConsumer(t, bad, []consumer.HistoryLine{{Type: consumer.HistoryRecord, Consumer: "c1"}})
	cases := []struct {
		in   Input
		want string
	}{
		{Input{ConsumerHistories: []string{bad}}, "no producer history"},
		{Input{ProducerHistories: []string{prod}}, "nothing read"},
		{Input{ProducerHistories: []string{filepath.Join(dir, "missing.jsonl")}, ConsumerHistories: []string{bad}}, "missing.jsonl"},
		{Input{ProducerHistories: []string{prod}, ConsumerHistories: []string{bad}}, "line 1: a record line without partition or offset"},
		{Input{ProducerHistories: []string{prod}, Log: baseLog(), SinkDB: filepath.Join(dir, "missing.db")}, "missing.db"},
	}
	for _, c := range cases {
		_, err := Check(context.Background(), c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "check: ") {
			t.Errorf("Check(%+v) = %v, want an error mentioning %q", c.in, err, c.want)
		}
	}
	if _, err := Check(context.Background(), Input{ProducerHistories: []string{filepath.Join(dir, "missing.jsonl")}, Log: baseLog()}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing file: %v, want it to wrap fs.ErrNotExist", err)
	}
}
