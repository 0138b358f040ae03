package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/tapes-dev/tapes/internal/check"
	"github.com/tapes-dev/tapes/internal/client"
	"github.com/tapes-dev/tapes/internal/consumer"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/producer"
	"github.com/tapes-dev/tapes/internal/sink"
)

// runCheck runs `chaos check ARGS` and returns its output and exit status.
func runCheck(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := (&checkCommand{stdout: &out, stderr: &errOut}).Run(ctx, args)
	if err != nil {
		errOut.WriteString(err.Error())
	}
	return out.String(), errOut.String(), exitCode(err)
}

var checkT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// checkFixture writes, with the producer's and the consumer's own writers,
// a producer history of p-aa-0..4 acknowledged at offsets 0..4 of
// partition 0 (acks=all), a consumer history c1.jsonl that read all of
// them, and one c1-dirty.jsonl that skipped offset 2 after a commit
// (c1) and went on with c2.jsonl: offset 2 is then a lost write. It also
// writes a sink where every record has one effect.
func checkFixture(t *testing.T) (dir string) {
	t.Helper()
	dir = t.TempDir()
	h, err := producer.CreateHistory(filepath.Join(dir, "producer.jsonl"), -1)
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{"p-aa-0", "p-aa-1", "p-aa-2", "p-aa-3", "p-aa-4"}
	for i, id := range ids {
		sent := checkT0.Add(time.Duration(i) * time.Millisecond)
		h.Write(&producer.Result{Partition: 0, BaseOffset: int64(i), Attempts: 1, Done: sent.Add(time.Millisecond),
			Records: []*producer.Record{{Value: []byte("v-" + id), SentAt: sent, Headers: []*tapesv1.Header{{Key: producer.EventIDHeader, Value: []byte(id)}}}}})
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	p := int32(0)
	line := func(c string, typ string, offs ...int64) []consumer.HistoryLine {
		if typ != consumer.HistoryRecord {
			return []consumer.HistoryLine{{Type: typ, Consumer: c, Generation: 1, Partitions: []int32{0}}}
		}
		var out []consumer.HistoryLine
		for _, o := range offs {
			id, v := ids[o], "v-"+ids[o]
			out = append(out, consumer.HistoryLine{Type: typ, Consumer: c, Generation: 1, Partition: &p, Offset: &o, EventID: &id, Value: &v})
		}
		return out
	}
	write := func(name string, parts ...[]consumer.HistoryLine) {
		w, err := consumer.CreateHistory(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, part := range parts {
			for _, l := range part {
				l.Topic, l.At = "orders", checkT0
				if err := w.Write(l); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	write("c1.jsonl", line("c1", consumer.HistoryAssigned), line("c1", consumer.HistoryRecord, 0, 1, 2, 3, 4))
	write("c1-dirty.jsonl", line("c1", consumer.HistoryAssigned), line("c1", consumer.HistoryRecord, 0, 1), line("c1", consumer.HistoryRevoked))
	write("c2.jsonl", line("c2", consumer.HistoryAssigned), line("c2", consumer.HistoryRecord, 3, 4))

	sk, err := sink.Open(filepath.Join(dir, "sink.db"), sink.Options{Idempotent: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		if _, err := sk.Apply(context.Background(), sink.Effect{Consumer: "c1", Topic: "orders", Offset: int64(i), EventID: id, Key: "key-1"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := sk.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

const cleanOutput = `Producers: 5 sent, 5 acknowledged, 0 failed (1 history)
Consumers: 5 records processed (1 history)
Sink:      5 effects, 5 event ids delivered (SINK)
Read:      5 distinct records; 0 acknowledged records deleted by retention before anyone read them

KIND                  COUNT  VERDICT
lost-write            0      ok
unseen                0      ok
duplicate             0      ok
inconsistent-offsets  0      ok
nonmonotonic-poll     0      ok
poll-skip             0      ok
nonmonotonic-send     0      reported
aborted-read          0      ok
indeterminate-read    0      reported
duplicate-effect      0      ok
never-processed       0      ok
out-of-key-order      0      reported

Expectation safe: met
`

const dirtyOutput = `Producers: 5 sent, 5 acknowledged, 0 failed (1 history)
Consumers: 4 records processed (2 histories)
Read:      4 distinct records; 0 acknowledged records deleted by retention before anyone read them

KIND                  COUNT  VERDICT
lost-write            1      FAIL (must be 0)
unseen                1      FAIL (must be 0)
duplicate             0      ok
inconsistent-offsets  0      ok
nonmonotonic-poll     0      ok
poll-skip             0      ok
nonmonotonic-send     0      reported
aborted-read          0      ok
indeterminate-read    0      reported
duplicate-effect      -      not checked (no --sink)
never-processed       -      not checked (no --sink)
out-of-key-order      -      not checked (no --sink)

lost-write (1):
  partition 0 offsets 2 events p-aa-2: acknowledged (acks=all) at offset 2, never read, though offset 4 of partition 0 was read

unseen (1):
  partition 0 offsets 2 events p-aa-2: acknowledged (acks=all) at offset 2, never read; the highest offset read in partition 0 is 4

Expectation safe: NOT met: lost-write = 1 (must be 0); unseen = 1 (must be 0)
`

func TestCheckCommand(t *testing.T) {
	dir := checkFixture(t)
	f := func(name string) string { return filepath.Join(dir, name) }
	dirty := []string{"--producer-history", f("producer.jsonl"), "--consumer-history", f("c1-dirty.jsonl") + "," + f("c2.jsonl")}
	cases := []struct {
		name       string
		args       []string
		code       int
		stdout     string // exact, when set
		stdoutHas  []string
		stderrHas  []string
		wantsValid *bool // with --json
	}{
		{name: "clean with a sink", code: 0, stdout: strings.ReplaceAll(cleanOutput, "SINK", f("sink.db")),
			args: []string{"--producer-history", f("producer.jsonl"), "--consumer-history", f("c1.jsonl"), "--sink", f("sink.db")}},
		{name: "dirty: a lost write", code: 1, stdout: dirtyOutput, args: dirty,
			stderrHas: []string{"expectation not met (safe): lost-write = 1 (must be 0); unseen = 1 (must be 0)"}},
		{name: "dirty, repeated flags, --expect none", code: 0,
			args:      []string{"--producer-history", f("producer.jsonl"), "--consumer-history", f("c1-dirty.jsonl"), "--consumer-history", f("c2.jsonl"), "--expect", "none"},
			stdoutHas: []string{"lost-write            1      reported\n", "Expectation none: met\n"}},
		{name: "dirty as JSON", code: 1, args: append(dirty, "--json"), wantsValid: new(bool)},
		{name: "dirty with the sink: its kinds are checked", code: 1, args: append(dirty, "--sink", f("sink.db")),
			stdoutHas: []string{"duplicate-effect      0      ok\n", "never-processed       0      ok\n"}},

		{name: "help", code: 0, args: []string{"--help"},
			stderrHas: []string{"-producer-history", "-consumer-history", "-sink", "-topic", "-dir", "-bootstrap-server", "-timeout", "-expect", "-json", "lost-write", "Exit status"}},
		{name: "no producer history", code: 2, args: []string{"--consumer-history", f("c1.jsonl")}, stderrHas: []string{"--producer-history is required"}},
		{name: "nothing read", code: 2, args: []string{"--producer-history", f("producer.jsonl")}, stderrHas: []string{"nothing read"}},
		{name: "unknown expectation", code: 2, args: append(dirty, "--expect", "strict"), stderrHas: []string{`--expect "strict": want safe, exactly-once or none`}},
		{name: "--dir without --topic", code: 2, args: append(dirty, "--dir", dir), stderrHas: []string{"is not an experiment's run directory (no events.jsonl", "--topic, which is missing"}},
		{name: "an argument", code: 2, args: append(dirty, "extra"), stderrHas: []string{`check takes no arguments, got ["extra"]`}},
		{name: "unknown flag", code: 2, args: append(dirty, "--nope"), stderrHas: []string{"flag provided but not defined: -nope"}},
		{name: "missing history file", code: 1, args: []string{"--producer-history", f("missing.jsonl"), "--consumer-history", f("c1.jsonl")},
			stderrHas: []string{"check: producer history: open " + f("missing.jsonl")}},
		{name: "full read from an unreachable cluster", code: 1,
			args:      []string{"--producer-history", f("producer.jsonl"), "--topic", "orders", "--bootstrap-server", "127.0.0.1:1", "--timeout", "300ms"},
			stderrHas: []string{"check: read topic: "}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, code := runCheck(t, c.args...)
			if code != c.code {
				t.Errorf("exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", code, c.code, out, errOut)
			}
			if c.stdout != "" && out != c.stdout {
				t.Errorf("stdout:\n%s\nwant:\n%s", out, c.stdout)
			}
			for _, s := range c.stdoutHas {
				if !strings.Contains(out, s) {
					t.Errorf("stdout has no %q:\n%s", s, out)
				}
			}
			for _, s := range c.stderrHas {
				if !strings.Contains(errOut, s) {
					t.Errorf("stderr has no %q:\n%s", s, errOut)
				}
			}
			if c.wantsValid != nil {
				var res check.Result
				if err := json.Unmarshal([]byte(out), &res); err != nil {
					t.Fatalf("--json output is not a check.Result: %v\n%s", err, out)
				}
				if res.Valid != *c.wantsValid || res.Counts[check.LostWrite] != 1 || len(res.Anomalies) != 2 || res.Anomalies[0].EventIDs[0] != "p-aa-2" {
					t.Errorf("--json result %+v", res)
				}
			}
		})
	}
}

// checkBroker is one in-memory broker leading the one partition of topic
// "orders": enough BrokerService for the full read of `chaos check --topic`.
type checkBroker struct {
	tapesv1.UnimplementedBrokerServiceServer
	addr     string
	logStart int64
	records  []*tapesv1.Record // offsets logStart...
}

func newCheckBroker(t *testing.T, logStart int64, ids ...string) *checkBroker {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &checkBroker{addr: lis.Addr().String(), logStart: logStart}
	for i, id := range ids {
		b.records = append(b.records, &tapesv1.Record{Offset: logStart + int64(i), Value: []byte("v-" + id),
			Headers: []*tapesv1.Header{{Key: producer.EventIDHeader, Value: []byte(id)}}})
	}
	srv := grpc.NewServer()
	tapesv1.RegisterBrokerServiceServer(srv, b)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return b
}

func (b *checkBroker) hw() int64 { return b.logStart + int64(len(b.records)) }

func (b *checkBroker) Metadata(context.Context, *tapesv1.MetadataRequest) (*tapesv1.MetadataResponse, error) {
	return &tapesv1.MetadataResponse{BrokerId: 1, ControllerId: 1, Brokers: []*tapesv1.BrokerInfo{{Id: 1, Address: b.addr, Alive: true}},
		Topics: []*tapesv1.TopicMetadata{{Name: "orders", TopicId: 1, Partitions: []*tapesv1.PartitionMetadata{
			{Partition: 0, LeaderId: 1, LeaderEpoch: 1, Replicas: []int32{1}, Isr: []int32{1}, HighWatermark: -1, LogStartOffset: -1, LogEndOffset: -1}}}}}, nil
}

func (b *checkBroker) ListOffsets(_ context.Context, req *tapesv1.ListOffsetsRequest) (*tapesv1.ListOffsetsResponse, error) {
	if req.GetTimestampMs() == client.EarliestOffset {
		return &tapesv1.ListOffsetsResponse{Offset: b.logStart}, nil
	}
	return &tapesv1.ListOffsetsResponse{Offset: b.hw()}, nil
}

func (b *checkBroker) Fetch(_ context.Context, req *tapesv1.FetchRequest) (*tapesv1.FetchResponse, error) {
	if req.GetOffset() < b.logStart || req.GetOffset() > b.hw() {
		return nil, kerr.ToStatus(kerr.OutOfRange(req.GetOffset(), b.logStart, b.hw()))
	}
	return &tapesv1.FetchResponse{Records: b.records[req.GetOffset()-b.logStart:], HighWatermark: b.hw(), LogStartOffset: b.logStart}, nil
}

func TestCheckCommandFullRead(t *testing.T) {
	dir := checkFixture(t)
	f := func(name string) string { return filepath.Join(dir, name) }
	// Retention deleted offsets 0 and 1; 2..4 are in the log: the full read
	// alone shows that nothing acknowledged was lost.
	b := newCheckBroker(t, 2, "p-aa-2", "p-aa-3", "p-aa-4")
	out, errOut, code := runCheck(t, "--producer-history", f("producer.jsonl"), "--topic", "orders", "--bootstrap-server", b.addr)
	if code != 0 || !strings.Contains(out, "Full read: 3 records of orders, log start 0:2\n") ||
		!strings.Contains(out, "Read:      3 distinct records; 2 acknowledged records deleted by retention before anyone read them\n") {
		t.Fatalf("exit status %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}

	// With c1-dirty.jsonl (offsets 0 and 1 read) and a log that lost
	// offset 3 to another record: inconsistent-offsets, and p-aa-3 is lost.
	b = newCheckBroker(t, 0, "p-aa-0", "p-aa-1", "p-aa-2", "p-zz-0", "p-aa-4")
	out, errOut, code = runCheck(t, "--producer-history", f("producer.jsonl"), "--consumer-history", f("c1-dirty.jsonl"),
		"--topic", "orders", "--bootstrap-server", b.addr)
	for _, s := range []string{
		"inconsistent-offsets  1      FAIL (must be 0)\n",
		"lost-write            1      FAIL (must be 0)\n",
		"  partition 0 offsets 3 events p-aa-3,p-zz-0: 2 different records at partition 0 offset 3: p-aa-3 (ack (acks=all)); p-zz-0 (full read)\n",
	} {
		if code != 1 || !strings.Contains(out, s) {
			t.Fatalf("exit status %d, stdout has no %q:\n%s\nstderr:\n%s", code, s, out, errOut)
		}
	}
}

// TestCheckCommandTxnHistory: `chaos check --txn-history` reads a
// transactional history, prints its transactions and judges it by
// --expect exactly-once: a read_committed reader that saw the write of a
// transaction killed before it asked to commit is an aborted-read (exit 1);
// without that read the history meets the expectation (exit 0).
func TestCheckCommandTxnHistory(t *testing.T) {
	dir := t.TempDir()
	p := func(v int32) *int32 { return &v }
	o := func(v int64) *int64 { return &v }
	at := checkT0
	line := func(l check.TxnLine) check.TxnLine {
		at = at.Add(time.Millisecond)
		l.At = at
		return l
	}
	base := []check.TxnLine{
		line(check.TxnLine{Type: check.TxnBegin, Process: "proc", Txn: "t/0/1", TransactionalID: "t"}),
		line(check.TxnLine{Type: check.TxnStep, Process: "proc", Txn: "t/0/1", Inputs: []check.TxnInput{{Topic: "in", Partition: 0, Offset: 0, EventID: "in-0"}}}),
		line(check.TxnLine{Type: check.TxnSend, Process: "proc", Txn: "t/0/1", EventID: "out-0", Topic: "out", Partition: p(0), Offset: o(0), Status: check.SendOK}),
		line(check.TxnLine{Type: check.TxnEnd, Process: "proc", Txn: "t/0/1", Outcome: check.OutcomeCommit, Status: check.EndRequested}),
		line(check.TxnLine{Type: check.TxnEnd, Process: "proc", Txn: "t/0/1", Outcome: check.OutcomeCommit, Status: check.EndOK}),
		// killed before asking to commit: aborted.
		line(check.TxnLine{Type: check.TxnBegin, Process: "proc", Txn: "t/0/2", TransactionalID: "t"}),
		line(check.TxnLine{Type: check.TxnStep, Process: "proc", Txn: "t/0/2", Inputs: []check.TxnInput{{Topic: "in", Partition: 0, Offset: 1, EventID: "in-1"}}}),
		line(check.TxnLine{Type: check.TxnSend, Process: "proc", Txn: "t/0/2", EventID: "out-1", Topic: "out", Partition: p(0), Offset: o(2), Status: check.SendOK}),
		line(check.TxnLine{Type: check.TxnBegin, Process: "proc", Txn: "t/1/1", TransactionalID: "t"}),
		line(check.TxnLine{Type: check.TxnStep, Process: "proc", Txn: "t/1/1", Inputs: []check.TxnInput{{Topic: "in", Partition: 0, Offset: 1, EventID: "in-1"}}}),
		line(check.TxnLine{Type: check.TxnSend, Process: "proc", Txn: "t/1/1", EventID: "out-1", Topic: "out", Partition: p(0), Offset: o(4), Status: check.SendOK}),
		line(check.TxnLine{Type: check.TxnEnd, Process: "proc", Txn: "t/1/1", Outcome: check.OutcomeCommit, Status: check.EndRequested}),
		line(check.TxnLine{Type: check.TxnEnd, Process: "proc", Txn: "t/1/1", Outcome: check.OutcomeCommit, Status: check.EndOK}),
		line(check.TxnLine{Type: check.TxnIsolation, Process: "rc", Isolation: check.ReadCommitted}),
		line(check.TxnLine{Type: check.TxnRead, Process: "rc", EventID: "out-0", Topic: "out", Partition: p(0), Offset: o(0)}),
		line(check.TxnLine{Type: check.TxnRead, Process: "rc", EventID: "out-1", Topic: "out", Partition: p(0), Offset: o(4)}),
	}
	write := func(name string, lines []check.TxnLine) string {
		var b bytes.Buffer
		for _, l := range lines {
			j, err := json.Marshal(l)
			if err != nil {
				t.Fatal(err)
			}
			b.Write(append(j, '\n'))
		}
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	clean := write("clean.jsonl", base)
	dirty := write("dirty.jsonl", append(slices.Clone(base),
		line(check.TxnLine{Type: check.TxnRead, Process: "rc", EventID: "out-1", Topic: "out", Partition: p(0), Offset: o(2)})))

	out, _, code := runCheck(t, "--txn-history", clean, "--expect", "exactly-once")
	if code != 0 || !strings.Contains(out, "Txns:      3 transactions (2 committed, 1 aborted, 0 unknown)") || !strings.Contains(out, "Expectation exactly-once: met") {
		t.Fatalf("clean history: exit %d\n%s", code, out)
	}
	out, _, code = runCheck(t, "--txn-history", dirty, "--expect", "exactly-once")
	if code != 1 || !strings.Contains(out, "aborted-read          1      FAIL (must be 0)") || !strings.Contains(out, "Expectation exactly-once: NOT met") {
		t.Fatalf("history with an aborted read: exit %d\n%s", code, out)
	}
	if _, stderr, code := runCheck(t, "--expect", "exactly-once"); code != 2 || !strings.Contains(stderr, "--txn-history") {
		t.Fatalf("no history at all: exit %d, stderr %q", code, stderr)
	}
}

// TestCheckCommandRunDir: `chaos check --dir RUN_DIR` checks an
// experiment's run again from its own files: the histories by the runner's
// names, the sink, and from check-input.json the experiment's expectation
// and its full read (offsets 0 and 1 deleted by retention, 2..4 read), so
// no flag is needed and no cluster either. --expect given wins over the
// recorded one. Without a consumer history or a recorded full read it says
// what is missing (a directory that is no run directory: TestCheckCommand).
func TestCheckCommandRunDir(t *testing.T) {
	fix := checkFixture(t)
	run := t.TempDir()
	link := func(from, to string) {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(fix, from))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(run, to), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link("producer.jsonl", "producer-p.jsonl")
	if err := os.WriteFile(filepath.Join(run, "events.jsonl"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	_, errOut, code := runCheck(t, "--dir", run)
	if code != 1 || !strings.Contains(errOut, "no consumer-*.jsonl history, and no full read recorded (check-input.json") {
		t.Fatalf("run without reads: exit status %d, stderr:\n%s", code, errOut)
	}

	key := "key-1"
	rec := map[string]any{
		"experiment": "retention-test",
		"expect":     check.Expectation{Name: "no loss", MustBeZero: []string{check.LostWrite}},
		"topic":      "orders",
		"log_start":  map[int32]int64{0: 2},
		"log": map[int32][]check.LogRecord{0: {
			{Offset: 2, EventID: "p-aa-2", Key: &key, Value: "v-p-aa-2"},
			{Offset: 3, EventID: "p-aa-3", Key: &key, Value: "v-p-aa-3"},
			{Offset: 4, EventID: "p-aa-4", Key: &key, Value: "v-p-aa-4"}}},
	}
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(run, "check-input.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runCheck(t, "--dir", run)
	for _, s := range []string{
		"Run:       " + run + " (retention-test); expectation the experiment's, recorded in check-input.json\n",
		"Full read: 3 records of orders, log start 0:2\n",
		"Read:      3 distinct records; 2 acknowledged records deleted by retention before anyone read them\n",
		"Expectation no loss: met\n",
	} {
		if code != 0 || !strings.Contains(out, s) {
			t.Fatalf("exit status %d, stdout has no %q:\n%s\nstderr:\n%s", code, s, out, errOut)
		}
	}

	// The sink of the run is read too, and --expect wins.
	link("sink.db", "sink.db")
	link("c1-dirty.jsonl", "consumer-c1.jsonl")
	out, errOut, code = runCheck(t, "--dir", run, "--expect", "safe")
	for _, s := range []string{
		"expectation --expect\n",
		"Consumers: 2 records processed (1 history)\n",
		"Sink:      5 effects, 5 event ids delivered (" + filepath.Join(run, "sink.db") + ")\n",
		"Expectation safe: ",
	} {
		if !strings.Contains(out, s) {
			t.Fatalf("exit status %d, stdout has no %q:\n%s\nstderr:\n%s", code, s, out, errOut)
		}
	}

}
