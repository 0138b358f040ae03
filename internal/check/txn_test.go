package check

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/consumer"
)

// Builders of transactional history lines, for hand-written histories.

func tBegin(proc, txn string) TxnLine {
	return TxnLine{Type: TxnBegin, Process: proc, Txn: txn, TransactionalID: strings.Split(txn, "/")[0]}
}

func tSend(proc, txn, id, topic string, p int32, off int64) TxnLine {
	return TxnLine{Type: TxnSend, Process: proc, Txn: txn, EventID: id, Topic: topic, Partition: &p, Offset: &off, Status: SendOK}
}

func tEnd(proc, txn, outcome, status string) TxnLine {
	return TxnLine{Type: TxnEnd, Process: proc, Txn: txn, Outcome: outcome, Status: status}
}

// tCommit is a commit asked and answered ok.
func tCommit(proc, txn string) []TxnLine {
	return []TxnLine{tEnd(proc, txn, OutcomeCommit, EndRequested), tEnd(proc, txn, OutcomeCommit, EndOK)}
}

func tIso(proc, level string) TxnLine {
	return TxnLine{Type: TxnIsolation, Process: proc, Isolation: level}
}

func tRead(proc, id, topic string, p int32, off int64) TxnLine {
	return TxnLine{Type: TxnRead, Process: proc, EventID: id, Topic: topic, Partition: &p, Offset: &off}
}

// tIn is the input id at offset off of topic "in" partition 0.
func tIn(id string, off int64) TxnInput {
	return TxnInput{Topic: "in", Partition: 0, Offset: off, EventID: id}
}

func tStep(proc, txn string, ins ...TxnInput) TxnLine {
	return TxnLine{Type: TxnStep, Process: proc, Txn: txn, Inputs: ins}
}

func tLSO(proc string, p int32, lso, hw int64, at time.Duration) TxnLine {
	return TxnLine{Type: TxnLSO, Process: proc, Topic: "out", Partition: &p, LSO: &lso, HW: &hw, At: t0.Add(at)}
}

func tEffect(sink, input string) TxnLine {
	return TxnLine{Type: TxnEffect, Process: sink, InputEventID: input}
}

// The base pipeline: proc consumes in-0..in-2 from "in" and writes out-N to
// "out". Transaction t/0/1 commits in-0 and in-1 (out-0, out-1 at 0, 1; its
// marker at 2); t/0/2 takes in-2, writes out-2 at 3, and proc is killed
// before asking to commit; proc restarts as t/1/1, writes out-2 again at 5
// (the abort marker at 4) and commits. rc reads out read_committed, ru
// read_uncommitted; the sink sms applies each input once.

func baseProc() []TxnLine {
	return slices.Concat(
		[]TxnLine{tBegin("proc", "t/0/1"), tStep("proc", "t/0/1", tIn("in-0", 0), tIn("in-1", 1)),
			tSend("proc", "t/0/1", "out-0", "out", 0, 0), tSend("proc", "t/0/1", "out-1", "out", 0, 1)},
		tCommit("proc", "t/0/1"),
		[]TxnLine{tBegin("proc", "t/0/2"), tStep("proc", "t/0/2", tIn("in-2", 2)), tSend("proc", "t/0/2", "out-2", "out", 0, 3)},
	)
}

func baseRestart() []TxnLine {
	return slices.Concat(
		[]TxnLine{tBegin("proc", "t/1/1"), tStep("proc", "t/1/1", tIn("in-2", 2)), tSend("proc", "t/1/1", "out-2", "out", 0, 5)},
		tCommit("proc", "t/1/1"),
	)
}

func baseRC(extra ...TxnLine) []TxnLine {
	return slices.Concat([]TxnLine{tIso("rc", ReadCommitted),
		tRead("rc", "out-0", "out", 0, 0), tRead("rc", "out-1", "out", 0, 1), tRead("rc", "out-2", "out", 0, 5)}, extra)
}

func baseRU() []TxnLine {
	return []TxnLine{tIso("ru", ReadUncommitted), tRead("ru", "out-0", "out", 0, 0), tRead("ru", "out-1", "out", 0, 1),
		tRead("ru", "out-2", "out", 0, 3), tRead("ru", "out-2", "out", 0, 5)}
}

// baseLSO: rc sees LSO 3 (t/0/2 open) for 2 s, then 6.
func baseLSO() []TxnLine {
	return []TxnLine{tLSO("rc", 0, 3, 4, 0), tLSO("rc", 0, 3, 4, time.Second), tLSO("rc", 0, 6, 6, 2*time.Second)}
}

func baseSMS() []TxnLine {
	return []TxnLine{tEffect("sms", "in-0"), tEffect("sms", "in-1"), tEffect("sms", "in-2")}
}

func baseTxnFiles() [][]TxnLine {
	return [][]TxnLine{baseProc(), baseRestart(), baseRC(), baseRU(), baseLSO(), baseSMS()}
}

// replace returns files with file i replaced.
func replace(files [][]TxnLine, i int, f []TxnLine) [][]TxnLine {
	files = slices.Clone(files)
	files[i] = f
	return files
}

func writeTxnHistories(t *testing.T, files [][]TxnLine) []string {
	t.Helper()
	dir := t.TempDir()
	var paths []string
	for i, f := range files {
		var b []byte
		for _, l := range f {
			j, err := json.Marshal(l)
			if err != nil {
				t.Fatal(err)
			}
			b = append(append(b, j...), '\n')
		}
		path := filepath.Join(dir, "txn-"+strconv.Itoa(i)+".jsonl")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, path)
	}
	return paths
}

func runTxn(t *testing.T, files [][]TxnLine, hungAfter time.Duration) Result {
	t.Helper()
	res, err := Check(context.Background(), Input{TxnHistories: writeTxnHistories(t, files), HungLSOAfter: hungAfter, Expect: Safe})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestCheckTxnFindsEachAnomaly(t *testing.T) {
	// G1c's histories: a consumes mid from b, b consumes out from a.
	cycle := func(bConsumesA bool) []TxnLine {
		bIn := []TxnInput{{Topic: "in", Partition: 0, Offset: 7, EventID: "in-7"}}
		if bConsumesA {
			bIn = append(bIn, TxnInput{Topic: "out", Partition: 1, Offset: 0, EventID: "x"})
		}
		return slices.Concat(
			[]TxnLine{tBegin("pa", "a/0/1"), tStep("pa", "a/0/1", TxnInput{Topic: "mid", Partition: 0, Offset: 0, EventID: "y"}),
				tSend("pa", "a/0/1", "x", "out", 1, 0)},
			tCommit("pa", "a/0/1"),
			[]TxnLine{tBegin("pb", "b/0/1"), tStep("pb", "b/0/1", bIn...), tSend("pb", "b/0/1", "y", "mid", 0, 0)},
			tCommit("pb", "b/0/1"))
	}
	// Write-write order only: c and d interleave on two partitions.
	interleaved := slices.Concat(
		[]TxnLine{tBegin("pc", "c/0/1"), tBegin("pd", "d/0/1"),
			tSend("pc", "c/0/1", "c1", "out", 2, 0), tSend("pd", "d/0/1", "d1", "out", 2, 1),
			tSend("pd", "d/0/1", "d2", "out", 3, 0), tSend("pc", "c/0/1", "c2", "out", 3, 1)},
		tCommit("pc", "c/0/1"), tCommit("pd", "d/0/1"))
	// The zombie committed t/0/2 too: in-2 is in two committed transactions.
	zombieCommitted := slices.Concat(baseProc(), tCommit("proc", "t/0/2"))
	// t/0/2 asked to commit and never heard back.
	commitUnknown := append(baseProc(), tEnd("proc", "t/0/2", OutcomeCommit, EndRequested), tEnd("proc", "t/0/2", OutcomeCommit, EndUnknown))

	// A zombie z (epoch 0) began at 0 s; its successor s (epoch 1) began
	// at 5 s; z asks to commit at askAt, answered with status.
	zombie := func(askAt time.Duration, status string) []TxnLine {
		at := func(l TxnLine, d time.Duration, epoch int16) TxnLine {
			l.At = t0.Add(d)
			if l.Type == TxnBegin {
				l.Epoch = &epoch
			}
			return l
		}
		return []TxnLine{at(tBegin("z", "t/0/5"), 0, 0), at(tSend("z", "t/0/5", "zz", "out", 4, 0), time.Second, 0),
			at(tBegin("s", "t/1/1"), 5*time.Second, 1),
			at(tEnd("z", "t/0/5", OutcomeCommit, EndRequested), askAt, 0), at(tEnd("z", "t/0/5", OutcomeCommit, status), 12*time.Second, 0)}
	}

	cases := []struct {
		name      string
		files     [][]TxnLine
		hungAfter time.Duration
		counts    map[string]int
		first     map[string]Anomaly
		stats     func(t *testing.T, st *TxnStats)
	}{
		{name: "clean: a killed attempt aborted, retried and committed once",
			files: baseTxnFiles(),
			stats: func(t *testing.T, st *TxnStats) {
				want := TxnStats{Transactions: 3, Committed: 2, Aborted: 1, Steps: 3, ReadCommitted: 3, ReadUncommitted: 4,
					AbortedSeenUncommitted: 1, Effects: 3, HungLSOAfter: DefaultHungLSOAfter.Seconds(),
					LongestLSOHang: &LSOHang{Reader: "rc", Topic: "out", LSO: 3, MaxHW: 4, From: t0, To: t0.Add(2 * time.Second), Seconds: 2, Moved: true}}
				if !reflect.DeepEqual(*st, want) {
					t.Errorf("stats\n got %+v %+v\nwant %+v %+v", *st, st.LongestLSOHang, want, want.LongestLSOHang)
				}
			}},
		{name: "aborted-read: rc read the killed attempt's out-2",
			files:  replace(baseTxnFiles(), 2, baseRC(tRead("rc", "out-2", "out", 0, 3))),
			counts: map[string]int{AbortedRead: 1, Duplicate: 1},
			first: map[string]Anomaly{
				AbortedRead: {Kind: AbortedRead, Topic: "out", Partition: 0, Offsets: []int64{3}, EventIDs: []string{"out-2"}, Txns: []string{"t/0/2"}, Consumer: "rc"},
				Duplicate:   {Kind: Duplicate, Topic: "out", Partition: 0, Offsets: []int64{3, 5}, EventIDs: []string{"out-2"}, Txns: []string{"t/0/2", "t/1/1"}},
			}},
		{name: "no aborted-read: an abort asked but unanswered is still never committed; read_uncommitted may see it",
			files: replace(baseTxnFiles(), 0, append(baseProc(), tEnd("proc", "t/0/2", OutcomeAbort, EndRequested))),
			stats: func(t *testing.T, st *TxnStats) {
				if st.Aborted != 1 || st.AbortedSeenUncommitted != 1 {
					t.Errorf("aborted %d, seen by read_uncommitted %d; want 1, 1", st.Aborted, st.AbortedSeenUncommitted)
				}
			}},
		{name: "commit asked, answer unknown, read by rc: committed, so no aborted-read but a duplicate",
			files:  replace(replace(baseTxnFiles(), 0, commitUnknown), 2, baseRC(tRead("rc", "out-2", "out", 0, 3))),
			counts: map[string]int{Duplicate: 2},
			stats: func(t *testing.T, st *TxnStats) {
				if st.Committed != 3 || st.Unknown != 0 {
					t.Errorf("committed %d unknown %d, want 3 0", st.Committed, st.Unknown)
				}
			}},
		{name: "commit asked, answer unknown, unread: neither lost nor aborted",
			files: replace(baseTxnFiles(), 0, commitUnknown),
			stats: func(t *testing.T, st *TxnStats) {
				if st.Unknown != 1 || st.Aborted != 0 {
					t.Errorf("unknown %d aborted %d, want 1 0", st.Unknown, st.Aborted)
				}
			}},
		{name: "G1a: a committed transaction consumed the aborted out-2",
			files: append(baseTxnFiles(), slices.Concat(
				[]TxnLine{tBegin("p2", "u/0/1"), tStep("p2", "u/0/1", TxnInput{Topic: "out", Partition: 0, Offset: 3, EventID: "out-2"})},
				tCommit("p2", "u/0/1"))),
			counts: map[string]int{G1a: 1},
			first: map[string]Anomaly{G1a: {Kind: G1a, Topic: "out", Partition: 0, Offsets: []int64{3}, EventIDs: []string{"out-2"},
				Txns: []string{"t/0/2", "u/0/1"}, Consumer: "p2"}},
		},
		{name: "no G1a: the transaction that consumed the aborted out-2 aborted too",
			files: append(baseTxnFiles(), []TxnLine{tBegin("p2", "u/0/1"),
				tStep("p2", "u/0/1", TxnInput{Topic: "out", Partition: 0, Offset: 3, EventID: "out-2"}), tEnd("p2", "u/0/1", OutcomeAbort, EndOK)}),
		},
		{name: "lost-write: committed out-1 unread, offset 5 read",
			files:  replace(baseTxnFiles(), 2, []TxnLine{tIso("rc", ReadCommitted), tRead("rc", "out-0", "out", 0, 0), tRead("rc", "out-2", "out", 0, 5)}),
			counts: map[string]int{LostWrite: 1},
			first:  map[string]Anomaly{LostWrite: {Kind: LostWrite, Topic: "out", Partition: 0, Offsets: []int64{1}, EventIDs: []string{"out-1"}, Txns: []string{"t/0/1"}}},
		},
		{name: "no lost-write: rc has not read past out-1 yet; ru read everything",
			files: replace(baseTxnFiles(), 2, []TxnLine{tIso("rc", ReadCommitted), tRead("rc", "out-0", "out", 0, 0)}),
		},
		{name: "duplicate: the zombie's t/0/2 committed too, in-2 processed twice and out-2 twice in committed output",
			files:  replace(replace(baseTxnFiles(), 0, zombieCommitted), 2, baseRC(tRead("rc", "out-2", "out", 0, 3))),
			counts: map[string]int{Duplicate: 2},
			first: map[string]Anomaly{Duplicate: {Kind: Duplicate, Topic: "in", Partition: 0, Offsets: []int64{2}, EventIDs: []string{"in-2"},
				Txns: []string{"t/0/2", "t/1/1"}}},
		},
		{name: "G1c: a consumed b's y, b consumed a's x",
			files:  [][]TxnLine{cycle(true)},
			counts: map[string]int{G1c: 1},
			first:  map[string]Anomaly{G1c: {Kind: G1c, Partition: -1, EventIDs: []string{"x", "y"}, Txns: []string{"a/0/1", "b/0/1"}}},
		},
		{name: "no G1c: a consumed b's y only",
			files: [][]TxnLine{cycle(false)},
		},
		{name: "no G1c: write-write order cycles (c before d on 2, d before c on 3) are allowed by Kafka",
			files: [][]TxnLine{interleaved},
		},
		{name: "zombie-commit: z asked to commit after s began at a higher epoch, and it committed",
			files:  [][]TxnLine{zombie(10*time.Second, EndOK)},
			counts: map[string]int{ZombieCommit: 1},
			first:  map[string]Anomaly{ZombieCommit: {Kind: ZombieCommit, Partition: -1, Txns: []string{"t/0/5", "t/1/1"}, Consumer: "z"}},
		},
		{name: "no zombie-commit: z was fenced (its commit failed)",
			files: [][]TxnLine{zombie(10*time.Second, EndError)},
		},
		{name: "no zombie-commit: z asked before s began; the ok answer came late",
			files: [][]TxnLine{zombie(3*time.Second, EndOK)},
		},
		{name: "hung-lso: rc stayed at LSO 3 for 15 s, held by t/0/2",
			files: replace(baseTxnFiles(), 4, []TxnLine{tLSO("rc", 0, 3, 4, 0), tLSO("rc", 0, 3, 5, 6*time.Second),
				tLSO("rc", 0, 3, 6, 12*time.Second), tLSO("rc", 0, 7, 7, 15*time.Second)}),
			counts: map[string]int{HungLSO: 1},
			first:  map[string]Anomaly{HungLSO: {Kind: HungLSO, Topic: "out", Partition: 0, Offsets: []int64{3}, Txns: []string{"t/0/2"}, Consumer: "rc"}},
			stats: func(t *testing.T, st *TxnStats) {
				if h := st.LongestLSOHang; h == nil || h.Seconds != 15 || h.MaxHW != 6 || !h.Moved {
					t.Errorf("longest hang %+v, want 15 s up to hw 6, moved", h)
				}
			}},
		{name: "hung-lso with a 1 s threshold: the base 2 s stretch counts",
			files: baseTxnFiles(), hungAfter: time.Second,
			counts: map[string]int{HungLSO: 1},
		},
		{name: "no hung-lso: 20 s at one LSO with nothing above it",
			files: replace(baseTxnFiles(), 4, []TxnLine{tLSO("rc", 0, 6, 6, 0), tLSO("rc", 0, 6, 6, 20*time.Second)}),
			stats: func(t *testing.T, st *TxnStats) {
				if st.LongestLSOHang != nil {
					t.Errorf("longest hang %+v, want none", st.LongestLSOHang)
				}
			}},
		{name: "external-duplicate: sms applied in-2 for the killed attempt and the retry",
			files:  replace(baseTxnFiles(), 5, append(baseSMS(), tEffect("sms", "in-2"))),
			counts: map[string]int{ExternalDuplicate: 1},
			first: map[string]Anomaly{ExternalDuplicate: {Kind: ExternalDuplicate, Partition: -1, EventIDs: []string{"in-2"},
				Txns: []string{"t/0/2", "t/1/1"}, Consumer: "sms"}},
			stats: func(t *testing.T, st *TxnStats) {
				if st.Effects != 4 || st.ExternalDuplicates != 1 {
					t.Errorf("effects %d duplicates %d, want 4 1", st.Effects, st.ExternalDuplicates)
				}
			}},
		{name: "no external-duplicate: an idempotent receiver applied in-2 once; another sink counts apart",
			files: replace(baseTxnFiles(), 5, append(baseSMS(), tEffect("sms-idempotent", "in-2"))),
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := runTxn(t, c.files, c.hungAfter)
			for _, k := range Kinds {
				n, checked := res.Counts[k]
				if slices.Contains(sinkKinds, k) {
					continue
				}
				if !checked || n != c.counts[k] {
					t.Errorf("%s = %d (checked %v), want %d", k, n, checked, c.counts[k])
				}
			}
			assertFirst(t, res, c.first)
			if res.Txn == nil {
				t.Fatal("no txn stats")
			}
			if c.stats != nil {
				c.stats(t, res.Txn)
			}
			if t.Failed() {
				b, _ := json.MarshalIndent(res, "", "  ")
				t.Logf("result:\n%s", b)
			}
		})
	}
}

// The report's lines name the topic, offsets, events, transactions and
// reader, then say what happened.
func TestCheckTxnReportText(t *testing.T) {
	files := replace(baseTxnFiles(), 2, baseRC(tRead("rc", "out-2", "out", 0, 3)))
	files = replace(files, 4, []TxnLine{tLSO("rc", 0, 3, 4, 0), tLSO("rc", 0, 3, 9, 30*time.Second)})
	res := runTxn(t, files, 0)
	var lines []string
	for _, a := range res.Anomalies {
		lines = append(lines, a.String())
	}
	want := []string{
		"topic out partition 0 offsets 3,5 events out-2 txns t/0/2,t/1/1: read_committed readers read out-2 at 2 positions: " +
			"topic out partition 0 offset 3 (read by rc, written by transaction t/0/2 (aborted: never asked to commit)); " +
			"topic out partition 0 offset 5 (read by rc, written by transaction t/1/1 (committed: commit answered ok))",
		"topic out partition 0 offsets 3 events out-2 txns t/0/2 consumer rc: read_committed reader rc read out-2 at topic out partition 0 offset 3, " +
			"written by transaction t/0/2 (aborted: never asked to commit)",
		"topic out partition 0 offsets 3 txns t/0/2 consumer rc: read_committed reader rc stayed at LSO 3 of topic out partition 0 for 30.0 s " +
			"(from 12:00:00.000, still there at the last observation, 12:00:30.000) while the high watermark was up to 9; " +
			"offset 3 was written by transaction t/0/2 (aborted: never asked to commit)",
	}
	if !reflect.DeepEqual(lines, want) {
		t.Errorf("report lines:\n got %q\nwant %q", lines, want)
	}
	if res.Valid || !slices.Contains(res.Why, "aborted-read = 1 (must be 0)") {
		t.Errorf("valid %v why %q: want invalid for aborted-read", res.Valid, res.Why)
	}
}

// Old inputs beside transactional histories are checked as before, and a
// run without transactional histories reports no transactional section.
func TestCheckTxnBesideOldHistories(t *testing.T) {
	s := scenario{sends: baseSends(), consumers: [][]consumer.HistoryLine{baseConsumer()}}
	old := s.run(t)
	if old.Txn != nil {
		t.Errorf("txn stats %+v without transactional histories", old.Txn)
	}
	s.txn = writeTxnHistories(t, replace(baseTxnFiles(), 2, baseRC(tRead("rc", "out-2", "out", 0, 3))))
	both := s.run(t)
	if both.Txn == nil || both.Counts[AbortedRead] != 1 || both.Sent != old.Sent || both.Read != old.Read {
		t.Errorf("with txn histories: txn %+v, aborted-read %d, sent %d read %d; want stats, 1, %d, %d",
			both.Txn, both.Counts[AbortedRead], both.Sent, both.Read, old.Sent, old.Read)
	}
}

func TestReadTxnHistoryErrors(t *testing.T) {
	cases := []struct {
		name, text, want string
	}{
		{"not JSON, then a line", "{\n" + `{"type":"isolation","process":"p","isolation":"read_committed"}`, "line 1"},
		{"a blank line", `{"type":"isolation","process":"p","isolation":"read_committed"}` + "\n\n" + `{"type":"begin","process":"p","txn":"t"}`, "line 2"},
		{"unknown type", `{"type":"nope","process":"p"}`, `unknown line type "nope"`},
		{"no process", `{"type":"begin","txn":"t"}`, "without process"},
		{"send without offset", `{"type":"send","process":"p","txn":"t","event_id":"e","partition":0,"status":"ok"}`, "a send line without offset"},
		{"end with a bad status", `{"type":"end","process":"p","txn":"t","outcome":"commit","status":"maybe"}`, `status "requested", "ok", "error" or "unknown"`},
		{"bad isolation", `{"type":"isolation","process":"p","isolation":"serializable"}`, `isolation "read_committed" or "read_uncommitted"`},
		{"step without inputs", `{"type":"step","process":"p","txn":"t"}`, "without inputs"},
		{"lso without at", `{"type":"lso","process":"p","partition":0,"lso":1,"hw":2}`, "without at"},
		{"read before isolation", `{"type":"read","process":"p","event_id":"e","partition":0,"offset":1}`, "before its isolation line"},
		{"two transactions at one offset",
			`{"type":"send","process":"p","txn":"a","event_id":"e","topic":"o","partition":0,"offset":1,"status":"ok"}` + "\n" +
				`{"type":"send","process":"p","txn":"b","event_id":"f","topic":"o","partition":0,"offset":1,"status":"ok"}`,
			"transactions a and b both acknowledged at topic o partition 0 offset 1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "txn.jsonl")
			if err := os.WriteFile(path, []byte(c.text+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Check(context.Background(), Input{TxnHistories: []string{path}})
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("error %v, want one naming %s and containing %q", err, path, c.want)
			}
		})
	}
}

// A writer killed mid-line leaves a torn last line: ignored, the lines
// before it read.
func TestReadTxnHistoryTornLastLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "txn.jsonl")
	text := `{"type":"begin","process":"p","txn":"t/0/1"}` + "\n" + `{"type":"end","process":"p","txn":"t/0/1","outc`
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	lines, err := ReadTxnHistory(path)
	if err != nil || len(lines) != 1 || lines[0].Type != TxnBegin {
		t.Fatalf("lines %+v err %v, want the begin line only", lines, err)
	}
	if err := os.WriteFile(path, []byte(text+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadTxnHistory(path); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("a bad line ended by a newline: error %v, want one naming line 2", err)
	}
}

// ExactlyOnce fails on the transactional anomalies and passes the clean
// pipeline, whose external duplicates and LSO stretches it only reports.
func TestExactlyOnce(t *testing.T) {
	clean := runTxn(t, replace(baseTxnFiles(), 5, append(baseSMS(), tEffect("sms", "in-2"))), time.Second)
	if ok, why := clean.Meets(ExactlyOnce); !ok || clean.Counts[ExternalDuplicate] != 1 || clean.Counts[HungLSO] != 1 {
		t.Errorf("clean pipeline: meets %v (why %q), external-duplicate %d, hung-lso %d; want true, 1, 1",
			ok, why, clean.Counts[ExternalDuplicate], clean.Counts[HungLSO])
	}
	g1a := runTxn(t, append(baseTxnFiles(), slices.Concat(
		[]TxnLine{tBegin("p2", "u/0/1"), tStep("p2", "u/0/1", TxnInput{Topic: "out", Partition: 0, Offset: 3, EventID: "out-2"})},
		tCommit("p2", "u/0/1"))), 0)
	if ok, why := g1a.Meets(ExactlyOnce); ok || !reflect.DeepEqual(why, []string{"G1a = 1 (must be 0)"}) {
		t.Errorf("G1a pipeline: meets %v why %q, want false for G1a only", ok, why)
	}
	if Expectations["exactly-once"].Name != ExactlyOnce.Name {
		t.Error("exactly-once is not a named expectation")
	}
}
