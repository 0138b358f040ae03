package systest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tapes-dev/tapes/internal/eventually"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/partitioner"
	"github.com/tapes-dev/tapes/internal/producer"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// lockedBuffer is a bytes.Buffer safe for a writer and a reader.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// producerdProc is a running producerd or consumerd.
type producerdProc struct {
	t      *testing.T
	bin    string
	cmd    *exec.Cmd
	stdout *lockedBuffer
	stderr *lockedBuffer
	addr   string // control endpoint
	exited chan struct{}
	err    error // cmd.Wait's, once exited is closed
}

// startProducerd starts producerd against e's cluster and waits for its
// control endpoint line. The process is killed (by PID) at cleanup if it
// is still running.
func startProducerd(t *testing.T, e *testcluster.Env, args ...string) *producerdProc {
	t.Helper()
	return startDaemon(t, e, "producerd", args...)
}

// startDaemon starts binary bin (producerd or consumerd) against e's
// cluster and waits for its control endpoint line. The process is killed
// (by PID) at cleanup if it is still running.
func startDaemon(t *testing.T, e *testcluster.Env, bin string, args ...string) *producerdProc {
	t.Helper()
	p := &producerdProc{t: t, bin: bin, stdout: &lockedBuffer{}, stderr: &lockedBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(filepath.Join(binDir, bin), append(args, "--dir", e.Dir)...)
	pr, pw := io.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = pw, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		pw.Close()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("%s %s\nstdout:\n%s\nstderr (tail):\n%s", bin, strings.Join(args, " "), p.stdout.String(), tail(p.stderr.String(), 4000))
		}
	})
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			p.stdout.Write([]byte(line + "\n"))
			if _, addr, ok := strings.Cut(line, ": control endpoint "); ok && !sent {
				addrc <- addr
				sent = true
			}
		}
		io.Copy(io.Discard, pr)
	}()
	select {
	case p.addr = <-addrc:
	case <-p.exited:
		t.Fatalf("%s exited before serving its control endpoint: %v\n%s", bin, p.err, p.stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("no control endpoint line from %s after 30s\n%s", bin, p.stderr.String())
	}
	return p
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// wait waits for the process to exit and returns its exit status.
func (p *producerdProc) wait(d time.Duration) int {
	p.t.Helper()
	select {
	case <-p.exited:
	case <-time.After(d):
		p.t.Fatalf("%s still running after %v", p.bin, d)
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		p.t.Fatalf("%s: %v", p.bin, p.err)
	}
	return 0
}

func (p *producerdProc) control() tapesv1.ProducerControlServiceClient {
	return tapesv1.NewProducerControlServiceClient(p.conn())
}

func (p *producerdProc) consumerControl() tapesv1.ConsumerControlServiceClient {
	return tapesv1.NewConsumerControlServiceClient(p.conn())
}

func (p *producerdProc) conn() *grpc.ClientConn {
	p.t.Helper()
	cc, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { cc.Close() })
	return cc
}

// runProducerd runs producerd to its end and returns exit status, stdout
// and stderr.
func runProducerd(t *testing.T, e *testcluster.Env, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "producerd"), append(args, "--dir", e.Dir)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String(), errb.String()
	case err != nil:
		t.Fatalf("producerd: %v", err)
	}
	return 0, out.String(), errb.String()
}

func readHistory(t *testing.T, path string) []producer.HistoryLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines, err := producer.ReadHistory(f)
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

// eventSeq splits an event id "name-run-N" into its prefix and N.
func eventSeq(t *testing.T, id string) (string, int64) {
	t.Helper()
	i := strings.LastIndexByte(id, '-')
	n, err := strconv.ParseInt(id[i+1:], 10, 64)
	if i < 0 || err != nil {
		t.Fatalf("event id %q does not end in a number", id)
	}
	return id[:i], n
}

func header(r *tapesv1.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// checkHistoryComplete: the history holds exactly one line per record
// number 0..sent-1 of one run, and returns the lines by event id.
func checkHistoryComplete(t *testing.T, lines []producer.HistoryLine, sent int64) map[string]producer.HistoryLine {
	t.Helper()
	byID := map[string]producer.HistoryLine{}
	prefix := ""
	for _, l := range lines {
		if _, dup := byID[l.EventID]; dup {
			t.Fatalf("event %s has two history lines", l.EventID)
		}
		byID[l.EventID] = l
		p, n := eventSeq(t, l.EventID)
		if prefix == "" {
			prefix = p
		}
		if p != prefix || n < 0 || n >= sent {
			t.Fatalf("history line for %s: not one of the %d records of run %s", l.EventID, sent, prefix)
		}
	}
	if int64(len(byID)) != sent {
		t.Fatalf("%d history lines for %d records sent", len(byID), sent)
	}
	return byID
}

// readTopic reads every partition of topic: records by partition.
func readTopic(e *testcluster.Env, topic string, partitions int32) [][]*tapesv1.Record {
	out := make([][]*tapesv1.Record, partitions)
	for p := int32(0); p < partitions; p++ {
		out[p] = e.ReadAll(topic, p)
	}
	return out
}

// checkAckedAreInTheLog: every "ok" line's record is at its partition and
// offset, and no event id is in the log twice. It returns the number of
// records of the run in the log.
func checkAckedAreInTheLog(t *testing.T, byID map[string]producer.HistoryLine, logs [][]*tapesv1.Record) int {
	t.Helper()
	at := map[string]string{} // event id -> "p/offset"
	for p, recs := range logs {
		for _, r := range recs {
			id := header(r, producer.EventIDHeader)
			if _, ours := byID[id]; !ours {
				continue
			}
			where := fmt.Sprintf("%d/%d", p, r.Offset)
			if prev, dup := at[id]; dup {
				t.Fatalf("event %s is in the log twice: at %s and %s", id, prev, where)
			}
			at[id] = where
		}
	}
	for id, l := range byID {
		if l.Status != producer.StatusOK {
			continue
		}
		if want := fmt.Sprintf("%d/%d", l.Partition, l.Offset); at[id] != want {
			t.Fatalf("event %s acknowledged at %s, but the log has it at %q", id, want, at[id])
		}
	}
	return len(at)
}

var summarySent = regexp.MustCompile(`(?m)^  sent +(\d+)$`)

func sentFromSummary(t *testing.T, stdout string) int64 {
	t.Helper()
	m := summarySent.FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("no summary in producerd's output:\n%s", stdout)
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

// TestProducerd drives the real producerd binary against one 3-broker
// cluster: partition choice, history completeness after SIGTERM, the control
// endpoint, bad input, and the perf test's output.
func TestProducerd(t *testing.T) {
	e := start(t, 3)
	e.CreateTopic("keys", 5, 3, map[string]string{"min.insync.replicas": "2"})
	e.CreateTopic("small", 1, 3, map[string]string{"max.message.bytes": "1000"})
	e.CreateTopic("events", 3, 3, map[string]string{"min.insync.replicas": "2"})
	dir := t.TempDir()

	// Keyed records land on murmur2(key) mod partitions, as with Kafka's
	// Java client, and the same key lands on the same partition from two
	// different producers. Every record has exactly one history line, whose
	// partition and offset are where the record is.
	t.Run("keys land on Kafka's partition", func(t *testing.T) {
		const n = 600
		var all []map[string]producer.HistoryLine
		for _, name := range []string{"keyed-a", "keyed-b"} {
			h := filepath.Join(dir, name+".jsonl")
			code, out, errOut := runProducerd(t, e, "--topic", "keys", "--name", name, "--count", fmt.Sprint(n), "--rate", "0",
				"--key-space", "40", "--acks", "all", "--history", h, "--progress", "0")
			if code != 0 {
				t.Fatalf("producerd %s: exit %d\n%s\n%s", name, code, out, errOut)
			}
			all = append(all, checkHistoryComplete(t, readHistory(t, h), n))
		}
		logs := readTopic(e, "keys", 5)
		keyPart := map[string]int32{}
		for p, recs := range logs {
			for _, r := range recs {
				if want := partitioner.ForKey(r.Key, 5); want != int32(p) {
					t.Fatalf("record with key %q in partition %d; ForKey says %d", r.Key, p, want)
				}
				if q, ok := keyPart[string(r.Key)]; ok && q != int32(p) {
					t.Fatalf("key %q in partitions %d and %d", r.Key, q, p)
				}
				keyPart[string(r.Key)] = int32(p)
			}
		}
		for _, byID := range all {
			if got := checkAckedAreInTheLog(t, byID, logs); got != n {
				t.Fatalf("%d of %d records in the log", got, n)
			}
			for id, l := range byID {
				if l.Status != producer.StatusOK || l.Key == nil || l.Acks != "all" || l.Attempts < 1 || l.AckedAt == nil || l.AckedAt.Before(l.SentAt) {
					t.Fatalf("history line of %s: %+v", id, l)
				}
				if want := partitioner.ForKey([]byte(*l.Key), 5); l.Partition != want {
					t.Fatalf("%s: key %s sent to partition %d, ForKey says %d", id, *l.Key, l.Partition, want)
				}
			}
		}
		if len(keyPart) != 40 {
			t.Fatalf("%d distinct keys in the topic, want 40", len(keyPart))
		}
	})

	// SIGTERM in the middle of a run: the producer stops sending, waits for
	// what is in flight and writes one final line per record attempted.
	t.Run("history complete after SIGTERM", func(t *testing.T) {
		h := filepath.Join(dir, "sigterm.jsonl")
		p := startProducerd(t, e, "--topic", "events", "--name", "term", "--rate", "4000/s", "--keys", "off",
			"--linger", "20", "--history", h, "--progress", "500ms")
		time.Sleep(1500 * time.Millisecond)
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(30 * time.Second); code != 0 {
			t.Fatalf("exit %d after SIGTERM", code)
		}
		sent := sentFromSummary(t, p.stdout.String())
		if sent < 1000 {
			t.Fatalf("only %d records sent in 1.5s at 4000/s", sent)
		}
		byID := checkHistoryComplete(t, readHistory(t, h), sent)
		for id, l := range byID {
			if l.Status != producer.StatusOK || l.Key != nil {
				t.Fatalf("%s: %+v", id, l)
			}
		}
		if got := checkAckedAreInTheLog(t, byID, readTopic(e, "events", 3)); int64(got) != sent {
			t.Fatalf("%d of %d records in the log", got, sent)
		}
	})

	// The control endpoint: Status, Pause, SetRate, Resume, Stop.
	t.Run("control endpoint", func(t *testing.T) {
		h := filepath.Join(dir, "control.jsonl")
		p := startProducerd(t, e, "--topic", "events", "--name", "ctl", "--rate", "300", "--history", h, "--progress", "0")
		ctl := p.control()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		status := func() *tapesv1.StatusResponse {
			t.Helper()
			st, err := ctl.Status(ctx, &tapesv1.StatusRequest{})
			if err != nil {
				t.Fatal(err)
			}
			return st
		}
		time.Sleep(500 * time.Millisecond)
		st := status()
		if st.State != "running" || st.Topic != "events" || st.Acks != -1 || !st.Keys || st.Rate != 300 || st.Sent == 0 {
			t.Fatalf("status %v", st)
		}
		if _, err := ctl.Pause(ctx, &tapesv1.PauseRequest{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
		paused := status()
		time.Sleep(500 * time.Millisecond)
		if again := status(); again.State != "paused" || again.Sent != paused.Sent || again.InFlight != 0 {
			t.Fatalf("paused: %v, then %v; want no new records and none in flight", paused, again)
		}
		if _, err := ctl.SetRate(ctx, &tapesv1.SetRateRequest{RecordsPerSecond: -1}); err == nil {
			t.Fatal("a negative rate was accepted")
		}
		if _, err := ctl.SetRate(ctx, &tapesv1.SetRateRequest{RecordsPerSecond: 3000}); err != nil {
			t.Fatal(err)
		}
		if _, err := ctl.Resume(ctx, &tapesv1.ResumeRequest{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		resumed := status()
		if resumed.State != "running" || resumed.Rate != 3000 || resumed.Sent-paused.Sent < 1500 {
			t.Fatalf("a second at 3000/s after resuming: %d more records (%v)", resumed.Sent-paused.Sent, resumed)
		}
		stop, err := ctl.Stop(ctx, &tapesv1.StopRequest{})
		if err != nil {
			t.Fatal(err)
		}
		f := stop.Final
		var perPart int64
		for _, n := range f.AckedPerPartition {
			perPart += n
		}
		if f.State != "done" || f.InFlight != 0 || f.Acked != f.Sent || len(f.Failed) != 0 || perPart != f.Acked {
			t.Fatalf("final status %v", f)
		}
		if code := p.wait(15 * time.Second); code != 0 {
			t.Fatalf("exit %d after Stop", code)
		}
		checkHistoryComplete(t, readHistory(t, h), f.Sent)
	})

	// Bad input: a clear error naming the value, the exit status saying
	// which kind, and nothing written.
	t.Run("bad input", func(t *testing.T) {
		cases := []struct {
			args     []string
			code     int
			contains []string
		}{
			{[]string{"--topic", "nope", "--count", "10"}, 3, []string{"--topic nope", "UNKNOWN_TOPIC_OR_PARTITION", `"nope" does not exist`}},
			{[]string{"--topic", "small", "--value-size", "2000", "--count", "10"}, 3, []string{"RECORD_TOO_LARGE", "--value-size 2000", "max.message.bytes=1000"}},
			{[]string{"--topic", "events", "--acks", "2"}, 2, []string{`--acks "2"`, "want 0, 1 or all"}},
			{[]string{"--topic", "events", "--rate", "-5/s"}, 2, []string{`--rate "-5/s"`, "cannot be negative"}},
			{[]string{"perf", "--topic", "small", "--num-records", "10", "--record-size", "5000", "--throughput", "-1"}, 3, []string{"RECORD_TOO_LARGE", "--record-size 5000", "max.message.bytes=1000"}},
			{[]string{"perf", "--topic", "nope", "--num-records", "10", "--record-size", "10", "--throughput", "-1"}, 3, []string{"UNKNOWN_TOPIC_OR_PARTITION", "--partitions"}},
		}
		for _, c := range cases {
			code, out, errOut := runProducerd(t, e, c.args...)
			if code != c.code {
				t.Errorf("%v: exit %d, want %d\n%s%s", c.args, code, c.code, out, errOut)
			}
			for _, s := range c.contains {
				if !strings.Contains(errOut, s) {
					t.Errorf("%v: stderr %q lacks %q", c.args, errOut, s)
				}
			}
		}
		if hw := e.Partition("small", 0).HighWatermark; hw != 0 {
			t.Fatalf("topic small holds %d records after refused input", hw)
		}
	})

	// producerd perf creates its topic and prints kafka-producer-perf-test's
	// lines.
	t.Run("perf", func(t *testing.T) {
		code, out, errOut := runProducerd(t, e, "perf", "--topic", "perf-sys", "--partitions", "3", "--num-records", "4000",
			"--record-size", "100", "--throughput", "2000", "--acks", "1", "--reporting-interval", "500ms")
		if code != 0 {
			t.Fatalf("perf: exit %d\n%s\n%s", code, out, errOut)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		window := regexp.MustCompile(`^\d+ records sent, \d+\.\d records/sec \(\d+\.\d\d MB/sec\), \d+\.\d ms avg latency, \d+\.\d ms max latency\.$`)
		final := regexp.MustCompile(`^4000 records sent, \d+\.\d{6} records/sec \(\d+\.\d\d MB/sec\), \d+\.\d\d ms avg latency, \d+\.\d\d ms max latency, \d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms 99\.9th\.$`)
		if len(lines) < 3 || !final.MatchString(lines[len(lines)-1]) {
			t.Fatalf("perf output:\n%s", out)
		}
		for _, l := range lines[:len(lines)-1] {
			if !window.MatchString(l) {
				t.Fatalf("progress line %q", l)
			}
		}
		// acks=1: the last records are acknowledged by the leader before
		// the followers have them; the high watermark follows shortly.
		var total int64
		e.WaitFor(10*time.Second, "perf-sys to commit 4000 records", func() bool {
			total = 0
			for p := int32(0); p < 3; p++ {
				total += e.Partition("perf-sys", p).HighWatermark
			}
			return total >= 4000
		})
		if total != 4000 {
			t.Fatalf("perf-sys holds %d records, want 4000", total)
		}
	})
}

// TestProducerKeepsKeyOrderWhenTheLeaderIsKilled: keys on, idempotent,
// acks=all, 5 requests in flight per partition, and the leader of a
// partition SIGKILLed mid-stream. Reading every partition back, each key's
// records must be in send order with no duplicates, every acknowledged
// record must be where the history says, and the history complete.
// It needs the brokers' idempotence (producer state in the partition's
// replicated state machine).
func TestProducerKeepsKeyOrderWhenTheLeaderIsKilled(t *testing.T) {
	e := start(t, 3)
	e.CreateTopic("ordered", 3, 3, map[string]string{"min.insync.replicas": "2"})
	h := filepath.Join(t.TempDir(), "ordered.jsonl")
	// Small batches at a high rate keep several requests in flight per
	// partition when the leader dies.
	const total = 18000
	p := startProducerd(t, e, "--topic", "ordered", "--name", "ord", "--keys", "on", "--key-space", "30",
		"--idempotent", "--acks", "all", "--max-in-flight", "5", "--count", fmt.Sprint(total), "--rate", "6000",
		"--linger", "2", "--batch-bytes", "4096", "--request-timeout", "3s", "--history", h, "--progress", "1s", "--log-level", "debug")
	ctl := p.control()
	leader := e.Partition("ordered", 0).LeaderId
	eventually.Nil(t, 30*time.Second, fmt.Sprintf("%d records acknowledged", total/4), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := ctl.Status(ctx, &tapesv1.StatusRequest{})
		if err != nil {
			return err
		}
		if st.Acked < total/4 {
			return fmt.Errorf("%d acknowledged", st.Acked)
		}
		return nil
	})
	if err := e.C.Kill(testcluster.BrokerName(leader)); err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGKILLed broker-%d, leader of ordered-0", leader)
	code := p.wait(90 * time.Second)
	out := p.stdout.String()
	t.Logf("producerd:\n%s", out)
	if code != 0 {
		t.Fatalf("producerd exit %d: records failed across the failover", code)
	}
	// The kill hit the producer: requests to the dead leader failed and
	// were retried.
	if !regexp.MustCompile(`msg="retrying batch" producer=ord partition=0 .* error=(NETWORK_EXCEPTION|REQUEST_TIMED_OUT|NOT_LEADER_OR_FOLLOWER|LEADER_NOT_AVAILABLE)`).MatchString(p.stderr.String()) {
		t.Fatalf("no retry on partition 0 after its leader was killed")
	}
	byID := checkHistoryComplete(t, readHistory(t, h), total)
	logs := readTopic(e, "ordered", 3)
	if got := checkAckedAreInTheLog(t, byID, logs); got != total {
		t.Fatalf("%d of %d records in the log", got, total)
	}
	for part, recs := range logs {
		last := map[string]int64{}
		for _, r := range recs {
			_, n := eventSeq(t, header(r, producer.EventIDHeader))
			k := string(r.Key)
			if prev, ok := last[k]; ok && n <= prev {
				t.Fatalf("partition %d, key %s: record %d at offset %d after record %d", part, k, n, r.Offset, prev)
			}
			last[k] = n
		}
	}
	if got := e.Partition("ordered", 0).LeaderId; got == leader {
		t.Fatalf("broker-%d still leads ordered-0", leader)
	}
}
