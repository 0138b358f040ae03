package systest

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/check"
	"github.com/tapes-dev/tapes/internal/producer"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// startEOSInput starts a cluster with orders and orders-out (3 partitions,
// 3 replicas, min.insync.replicas 2) and writes n records to orders with
// an idempotent producerd; it returns the cluster, a directory and the
// producer's history.
func startEOSInput(t *testing.T, n int) (*testcluster.Env, string, string) {
	t.Helper()
	e := start(t, 3)
	for _, topic := range []string{"orders", "orders-out"} {
		e.CreateTopic(topic, 3, 3, map[string]string{"min.insync.replicas": "2"})
		e.WaitSettled(topic, 60*time.Second)
	}
	dir := t.TempDir()
	ph := filepath.Join(dir, "producer.jsonl")
	if code, out, errOut := runProducerd(t, e, "--topic", "orders", "--count", strconv.Itoa(n), "--idempotent", "--name", "producer-1", "--history", ph); code != 0 {
		t.Fatalf("producerd exit %d\n%s\n%s", code, out, errOut)
	}
	return e, dir, ph
}

// readOrdersOut reads orders-out back read_committed and read_uncommitted
// into the transactional history dir/txn-readers.jsonl (returned) and
// returns the event ids read at each level.
func readOrdersOut(t *testing.T, e *testcluster.Env, dir string) (string, map[string][]string) {
	t.Helper()
	readers := filepath.Join(dir, "txn-readers.jsonl")
	h, err := check.CreateTxnHistory(readers)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	read := map[string][]string{}
	for _, level := range []string{check.ReadCommitted, check.ReadUncommitted} {
		if read[level], err = check.ReadTopicTxn(ctx, e.Client, "orders-out", level, "reader-"+level, h); err != nil {
			t.Fatal(err)
		}
	}
	return readers, read
}

// TestConsumerdEOSThroughLeaderAndProcessorKill: consumerd --eos reads
// orders (read_committed) and writes one result per input to orders-out,
// its input offsets in the same transaction, through gRPC. The leader of
// orders-out partition 0 is SIGKILLed (and restarted), then the processor
// itself, mid-transaction; a new processor of the same name (and so
// transactional id) finishes. orders-out read back read_committed holds
// every acknowledged input exactly once, and the checker finds no
// transactional anomaly (exactly-once) in the processor's and readers'
// histories.
func TestConsumerdEOSThroughLeaderAndProcessorKill(t *testing.T) {
	e, dir, ph := startEOSInput(t, 800)
	txnHist := filepath.Join(dir, "txn-processor.jsonl")
	args := []string{"--eos", "--output-topic", "orders-out", "--txn-history", txnHist, "--records-per-poll", "20", "--process-time", "5ms", "--transaction-timeout", "10s"}
	p := startConsumer(t, e, dir, "eos", "processor", args...)
	e.WaitFor(60*time.Second, "the processor to process 150 records", func() bool { return status(t, p).Processed >= 150 })
	leader := e.Partition("orders-out", 0).LeaderId
	if err := e.C.Kill(testcluster.BrokerName(leader)); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(60*time.Second, "the processor to go on past the leader's SIGKILL", func() bool { return status(t, p).Processed >= 350 })
	if err := e.C.Restart(testcluster.BrokerName(leader)); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.wait(10 * time.Second)
	p = startConsumer(t, e, dir, "eos", "processor", args...)
	waitCaughtUp(t, e, "eos", 800)
	stopConsumer(t, p)

	acked := map[string]bool{}
	lines, err := producer.ReadHistoryFile(ph)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		if l.Status == producer.StatusOK {
			acked[l.EventID] = true
		}
	}
	readers, read := readOrdersOut(t, e, dir)
	committed, uncommitted := read[check.ReadCommitted], read[check.ReadUncommitted]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	seen := map[string]int{}
	for _, id := range committed {
		seen[id]++
	}
	for id := range acked {
		if seen[id] != 1 {
			t.Errorf("input %s is in orders-out %d times (read_committed); want once", id, seen[id])
		}
	}
	if len(committed) != len(acked) || len(acked) != 800 {
		t.Errorf("read_committed read %d records for %d acknowledged inputs (800 sent)", len(committed), len(acked))
	}
	t.Logf("orders-out: %d records read_committed, %d read_uncommitted (aborted attempts included)", len(committed), len(uncommitted))
	res, err := check.Check(ctx, check.Input{TxnHistories: []string{txnHist, readers}, Expect: check.ExactlyOnce})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Valid {
		for _, a := range res.Anomalies {
			t.Log(a.String())
		}
		t.Fatalf("checker: %v", res.Why)
	}
	if res.Txn.Committed == 0 {
		t.Fatalf("no committed transaction in the processor's history: %+v", res.Txn)
	}
}

// TestConsumerdEOSZombieIsFenced: a second consumerd --eos with the same
// --transactional-id (another member of the group) bumps the producer
// epoch: the first one's next transactional request is refused as fenced
// and it exits with status 1 saying so, its open transaction aborted; the
// second finishes, and orders-out read_committed has every input once.
func TestConsumerdEOSZombieIsFenced(t *testing.T) {
	e, dir, _ := startEOSInput(t, 600)
	args := []string{"--eos", "--output-topic", "orders-out", "--transactional-id", "shared", "--records-per-poll", "10", "--process-time", "10ms"}
	first := startConsumer(t, e, dir, "eos", "first", append(args, "--txn-history", filepath.Join(dir, "txn-first.jsonl"))...)
	e.WaitFor(60*time.Second, "the first processor to process 50 records", func() bool { return status(t, first).Processed >= 50 })
	second := startConsumer(t, e, dir, "eos", "second", append(args, "--txn-history", filepath.Join(dir, "txn-second.jsonl"))...)
	if code := first.wait(60 * time.Second); code != 1 {
		t.Fatalf("the fenced processor exited %d; want 1", code)
	}
	if s := first.stderr.String(); !strings.Contains(s, "fenced") {
		t.Fatalf("the fenced processor does not say it was fenced:\n%s", tail(s, 2000))
	}
	waitCaughtUp(t, e, "eos", 600)
	stopConsumer(t, second)
	readers, read := readOrdersOut(t, e, dir)
	ids := read[check.ReadCommitted]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := check.Check(ctx, check.Input{TxnHistories: []string{filepath.Join(dir, "txn-first.jsonl"), filepath.Join(dir, "txn-second.jsonl"), readers}, Expect: check.ExactlyOnce})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Valid {
		for _, a := range res.Anomalies {
			t.Log(a.String())
		}
		t.Errorf("checker: %v", res.Why)
	}
	seen := map[string]int{}
	for _, id := range ids {
		seen[id]++
	}
	if len(seen) != 600 || len(ids) != 600 {
		t.Fatalf("orders-out read_committed: %d records, %d distinct inputs; want 600 and 600", len(ids), len(seen))
	}
}
