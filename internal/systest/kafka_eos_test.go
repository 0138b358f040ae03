package systest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tapes-dev/tapes/internal/compat"
	"github.com/tapes-dev/tapes/internal/eventually"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// eosPipelineEnv makes the test binary a franz-go consume-transform-produce
// process (runEOSPipeline) instead of running tests.
const eosPipelineEnv = "TAPES_TEST_EOS_PIPELINE"

func init() {
	if spec := os.Getenv(eosPipelineEnv); spec != "" {
		os.Exit(runEOSPipeline(strings.Fields(spec)))
	}
}

// runEOSPipeline is a franz-go GroupTransactSession: a member of group
// args[1] reading topic args[2] with read_committed and stable offsets, that
// writes for every input record one record to topic args[3] (the input's
// key, value "out:" + the input's value, headers in-partition and
// in-offset) and commits its input offsets in the same transaction, with
// transactional id args[4]. Per poll it prints
//
//	begin n=RECORDS
//	end committed=BOOL err=ERR
//
// When the file args[5] exists, after the records of a transaction are all
// acknowledged and before EndTxn, it prints "holding" and waits (to be
// SIGKILLed with a transaction open whose records are in the log). It runs
// until killed.
func runEOSPipeline(args []string) int {
	if len(args) != 6 {
		fmt.Fprintf(os.Stderr, "%s: want BOOTSTRAP GROUP IN OUT TXNID HOLDFILE, got %q\n", eosPipelineEnv, args)
		return 2
	}
	group, in, out, txnID, hold := args[1], args[2], args[3], args[4], args[5]
	sess, err := kgo.NewGroupTransactSession(kgo.SeedBrokers(strings.Split(args[0], ",")...), kgo.ClientID("eos-pipeline"),
		kgo.TransactionalID(txnID), kgo.TransactionTimeout(20*time.Second),
		kgo.ConsumerGroup(group), kgo.ConsumeTopics(in), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(), kgo.SessionTimeout(6*time.Second), kgo.HeartbeatInterval(500*time.Millisecond),
		kgo.FetchMaxPartitionBytes(4096), // small polls: many transactions
		kgo.RetryTimeout(60*time.Second), kgo.ProduceRequestTimeout(10*time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx := context.Background()
	for {
		fs := sess.PollFetches(ctx)
		fs.EachError(func(t string, p int32, err error) { fmt.Fprintf(os.Stderr, "fetch %s-%d: %v\n", t, p, err) })
		if fs.NumRecords() == 0 {
			continue
		}
		if err := sess.Begin(); err != nil {
			fmt.Fprintf(os.Stderr, "begin: %v\n", err)
			return 1
		}
		fmt.Printf("begin n=%d\n", fs.NumRecords())
		done := make(chan error, fs.NumRecords())
		fs.EachRecord(func(r *kgo.Record) {
			o := &kgo.Record{Topic: out, Key: r.Key, Value: append([]byte("out:"), r.Value...), Headers: []kgo.RecordHeader{
				{Key: "in-partition", Value: []byte(strconv.Itoa(int(r.Partition)))},
				{Key: "in-offset", Value: []byte(strconv.FormatInt(r.Offset, 10))},
			}}
			sess.Produce(ctx, o, func(_ *kgo.Record, err error) { done <- err })
		})
		for range fs.NumRecords() {
			if err := <-done; err != nil {
				fmt.Fprintf(os.Stderr, "produce: %v\n", err)
			}
		}
		if _, err := os.Stat(hold); err == nil {
			fmt.Println("holding")
			select {}
		}
		committed, err := sess.End(ctx, kgo.TryCommit)
		fmt.Printf("end committed=%v err=%v\n", committed, err)
	}
}

// eosPipeline is a running runEOSPipeline process.
type eosPipeline struct {
	cmd    *exec.Cmd
	out    *lockedBuffer
	stderr *lockedBuffer
	exited chan struct{}
}

func startEOSPipeline(t *testing.T, e *testcluster.Env, group, in, out, txnID, hold string) *eosPipeline {
	t.Helper()
	p := &eosPipeline{out: &lockedBuffer{}, stderr: &lockedBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(os.Args[0], "-test.run=^$")
	p.cmd.Env = append(os.Environ(), eosPipelineEnv+"="+strings.Join([]string{strings.Join(e.KafkaBootstrap(), ","), group, in, out, txnID, hold}, " "))
	pr, pw := io.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = pw, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.cmd.Wait()
		pw.Close()
		close(p.exited)
	}()
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			p.out.Write([]byte(sc.Text() + "\n"))
		}
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("pipeline (pid %d) stdout (tail):\n%s\nstderr (tail):\n%s", p.cmd.Process.Pid, tail(p.out.String(), 3000), tail(p.stderr.String(), 4000))
		}
	})
	return p
}

func (p *eosPipeline) kill() {
	select {
	case <-p.exited:
	default:
		p.cmd.Process.Kill()
		<-p.exited
	}
}

// commits is how many transactions the pipeline has committed.
func (p *eosPipeline) commits() int { return strings.Count(p.out.String(), "end committed=true") }

// txnCoordinatorState describes, for a failure message, the coordinator of
// transactional id: the broker FindCoordinator names, its process state,
// and the transaction's state as that coordinator describes it.
func txnCoordinatorState(e *testcluster.Env, adm *kadm.Client, id string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, ok := adm.FindTxnCoordinators(ctx, id)[id]
	switch {
	case !ok:
		return fmt.Sprintf("FindCoordinator(%s): no answer", id)
	case r.Err != nil:
		return fmt.Sprintf("FindCoordinator(%s): %v", id, r.Err)
	}
	out := fmt.Sprintf("coordinator of %s: broker %d", id, r.NodeID)
	if st, err := e.C.ProcessStatus(testcluster.BrokerName(r.NodeID)); err == nil {
		out += fmt.Sprintf(" (%s%s)", st.State, map[bool]string{true: ", last exit " + st.LastExit}[st.LastExit != ""])
	}
	ds, err := adm.DescribeTransactions(ctx, id)
	if d, ok := ds[id]; err == nil && ok && d.Err == nil {
		return out + fmt.Sprintf(", transaction %s producer %d epoch %d partitions %v (DescribeTransactions by broker %d)",
			d.State, d.ProducerID, d.ProducerEpoch, d.Topics.Sorted(), d.Coordinator)
	} else if ok && d.Err != nil {
		err = d.Err
	}
	return out + fmt.Sprintf(", DescribeTransactions: %v", err)
}

// TestKafkaEOSReadProcessWrite: franz-go's GroupTransactSession reads an
// input topic and writes one output record per input record, committing
// its input offsets in the same transaction, while (a) the leader of an
// output partition is SIGKILLed, (b) the transaction coordinator's broker is
// SIGKILLed, and (c) the pipeline itself is SIGKILLed with a transaction
// open whose records are in the log, and a second incarnation with the same
// transactional id takes over. Read with read_committed, the output holds
// every input record exactly once; read with read_uncommitted it also holds
// the records of the aborted transaction (c).
func TestKafkaEOSReadProcessWrite(t *testing.T) {
	e := start(t, 3)
	cfg := map[string]string{"min.insync.replicas": "2"}
	e.CreateTopic("eos-in", 3, 3, cfg)
	e.CreateTopic("eos-out", 3, 3, cfg)
	e.WaitSettled("eos-in", 60*time.Second)
	e.WaitSettled("eos-out", 60*time.Second)
	_, adm := kafkaAdmin(t, e)

	const inputs = 3000
	pcl, err := kgo.NewClient(kgo.SeedBrokers(e.KafkaBootstrap()...), kgo.DefaultProduceTopic("eos-in"),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	for i := range inputs {
		r := &kgo.Record{Key: []byte(fmt.Sprintf("k-%d", i%20)), Value: []byte(fmt.Sprintf("v-%d", i))}
		if err := pcl.ProduceSync(context.Background(), r).FirstErr(); err != nil && i == 0 {
			t.Fatal(err)
		} else if err != nil {
			t.Fatalf("input %d: %v", i, err)
		}
	}
	t.Logf("%d input records written", inputs)
	// More inputs keep coming until the pipeline's kill (c), so that each
	// phase's transactions have records to process however many the
	// retries after a failover took (a fixed set can be used up before a
	// phase's commits are counted). A record in the log is an input
	// whatever its produce answer: the check below reads the end offsets.
	stopInputs := make(chan struct{})
	var stopOnce sync.Once
	stop := func() { stopOnce.Do(func() { close(stopInputs) }) }
	inputsDone := make(chan struct{})
	go func() {
		defer close(inputsDone)
		for i := inputs; ; i++ {
			select {
			case <-stopInputs:
				return
			case <-time.After(20 * time.Millisecond):
			}
			r := &kgo.Record{Key: []byte(fmt.Sprintf("k-%d", i%20)), Value: []byte(fmt.Sprintf("v-%d", i))}
			pcl.ProduceSync(context.Background(), r)
		}
	}()
	t.Cleanup(func() { stop(); <-inputsDone })

	dir := t.TempDir()
	hold := filepath.Join(dir, "hold")
	const txnID, group = "eos-pipeline", "eos-group"
	first := startEOSPipeline(t, e, group, "eos-in", "eos-out", txnID, hold)
	waitCommits := func(p *eosPipeline, n int, what string) {
		t.Helper()
		if eventually.Wait(120*time.Second, func() error {
			if p.commits() < n {
				return fmt.Errorf("%d", p.commits())
			}
			return nil
		}) != nil {
			t.Fatalf("%s: %d committed transactions after 2m, want %d; %s", what, p.commits(), n, txnCoordinatorState(e, adm, txnID))
		}
	}
	killRestart := func(id int32, why string) {
		t.Helper()
		name := testcluster.BrokerName(id)
		if err := e.C.Kill(name); err != nil {
			t.Fatal(err)
		}
		t.Logf("SIGKILLed %s (%s)", name, why)
		time.Sleep(2 * time.Second)
		if err := e.C.Restart(name); err != nil {
			t.Fatal(err)
		}
	}

	// (a) the leader of eos-out-0.
	waitCommits(first, 5, "before the output leader's kill")
	killRestart(e.Partition("eos-out", 0).LeaderId, "leader of eos-out-0")
	// (b) the transaction coordinator.
	n := first.commits()
	waitCommits(first, n+5, "after the output leader's kill")
	var coord int32 = -1
	eventually.Nil(t, 60*time.Second, "the transaction coordinator is found", func() error {
		resps := adm.FindTxnCoordinators(context.Background(), txnID)
		r, ok := resps[txnID]
		switch {
		case !ok:
			return fmt.Errorf("no answer for %s", txnID)
		case r.Err != nil:
			return r.Err
		}
		coord = r.NodeID
		return nil
	})
	killRestart(coord, "transaction coordinator of "+txnID)
	// (c) the pipeline, with a transaction open whose records are written.
	n = first.commits()
	waitCommits(first, n+5, "after the coordinator's kill")
	stop()
	<-inputsDone
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 60*time.Second, "the pipeline holds a transaction open", func() bool { return strings.Contains(first.out.String(), "holding") })
	first.kill()
	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGKILLed the pipeline with a transaction open after %d commits; starting its successor", first.commits())
	second := startEOSPipeline(t, e, group, "eos-in", "eos-out", txnID, hold)

	// Every input offset is committed.
	eventually.Nil(t, 240*time.Second, "every input offset is committed", func() error {
		ends, err := adm.ListEndOffsets(context.Background(), "eos-in")
		if err != nil {
			return err
		}
		offs, err := adm.FetchOffsets(context.Background(), group)
		if err != nil {
			return err
		}
		var behind []string
		ends.Each(func(o kadm.ListedOffset) {
			c, ok := offs.Lookup("eos-in", o.Partition)
			if !ok || c.At < o.Offset {
				behind = append(behind, fmt.Sprintf("eos-in-%d committed %d of %d", o.Partition, c.At, o.Offset))
			}
		})
		if len(behind) > 0 {
			return fmt.Errorf("%s (%d commits by the successor)", strings.Join(behind, ", "), second.commits())
		}
		return nil
	})
	second.kill()

	committed := readEOSOutput(t, e, kgo.ReadCommitted())
	uncommitted := readEOSOutput(t, e, kgo.ReadUncommitted())
	seen := map[string]int{}
	for _, r := range committed {
		seen[r]++
	}
	var dup, missing, total int
	ends, err := adm.ListEndOffsets(context.Background(), "eos-in")
	if err != nil {
		t.Fatal(err)
	}
	for p := range 3 {
		end, _ := ends.Lookup("eos-in", int32(p))
		total += int(end.Offset)
		for o := int64(0); o < end.Offset; o++ {
			switch c := seen[fmt.Sprintf("%d/%d", p, o)]; {
			case c == 0:
				missing++
			case c > 1:
				dup++
			}
		}
	}
	t.Logf("output: %d records read_committed, %d read_uncommitted (%d of aborted transactions)", len(committed), len(uncommitted), len(uncommitted)-len(committed))
	if dup > 0 || missing > 0 || len(committed) != total || total < inputs {
		t.Fatalf("read_committed output of %d inputs: %d records, %d inputs duplicated, %d missing", total, len(committed), dup, missing)
	}
	if len(uncommitted) <= len(committed) {
		t.Fatalf("read_uncommitted shows no aborted record (%d records), but the pipeline was killed holding a transaction with written records", len(uncommitted))
	}
}

// readEOSOutput reads eos-out at the isolation level, once nothing writes
// it any more, and returns each record's input position "PARTITION/OFFSET".
func readEOSOutput(t *testing.T, e *testcluster.Env, level kgo.IsolationLevel) []string {
	t.Helper()
	out, err := compat.ReadInputPositions(e.KafkaBootstrap(), "eos-out", level, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
