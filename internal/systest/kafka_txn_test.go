package systest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	fkerr "github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tapes-dev/tapes/internal/eventually"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// End to end with franz-go's transactional producer (issue 13 point 1).
// These tests need the partition side of transactions (branch txnpart:
// transactional Produce, WriteTxnMarkers, read_committed Fetch) and pass
// once it is merged beside the coordinator (branch txncoord).

// txnProducer is a franz-go transactional producer of transactional id id.
func txnProducer(t *testing.T, e *testcluster.Env, id string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.KafkaBootstrap()...), kgo.TransactionalID(id),
		kgo.TransactionTimeout(60*time.Second), kgo.RecordRetries(100))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// produceTxn produces values (keyed by themselves) to topic inside cl's
// open transaction.
func produceTxn(t *testing.T, ctx context.Context, cl *kgo.Client, topic string, values []string) {
	t.Helper()
	for _, v := range values {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(v), Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatalf("produce %s: %v", v, err)
		}
	}
}

func txnValues(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// readTxnTopic reads topic from the start at isolation until every value of
// until was read (or the time is up), and returns how often each value was
// read.
func readTxnTopic(t *testing.T, e *testcluster.Env, topic string, isolation kgo.IsolationLevel, until []string) map[string]int {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.KafkaBootstrap()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(isolation))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	seen := map[string]int{}
	missing := func() int {
		n := 0
		for _, v := range until {
			if seen[v] == 0 {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(90 * time.Second)
	for missing() > 0 && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++ })
	}
	if n := missing(); n > 0 {
		t.Fatalf("%s: %d of %d records never read", topic, n, len(until))
	}
	return seen
}

func countPrefix(seen map[string]int, prefix string) (distinct, total int) {
	for v, n := range seen {
		if strings.HasPrefix(v, prefix) {
			distinct++
			total += n
		}
	}
	return distinct, total
}

// TestKafkaTransactionsCommitAbort: a franz-go transactional producer
// commits a transaction, aborts the next, commits a third: a
// read_committed consumer reads the committed records exactly once and
// none of the aborted ones; a read_uncommitted one reads the aborted ones
// too.
func TestKafkaTransactionsCommitAbort(t *testing.T) {
	e := start(t, 3)
	e.CreateTopic("eos", 3, 3, nil)
	e.WaitSettled("eos", 60*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := txnProducer(t, e, "e2e")
	for _, tx := range []struct {
		prefix string
		commit kgo.TransactionEndTry
	}{{"c", kgo.TryCommit}, {"a", kgo.TryAbort}, {"end", kgo.TryCommit}} {
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		produceTxn(t, ctx, p, "eos", txnValues(tx.prefix, 30))
		if err := p.EndTransaction(ctx, tx.commit); err != nil {
			t.Fatalf("end %s: %v", tx.prefix, err)
		}
	}
	committed := append(txnValues("c", 30), txnValues("end", 30)...)
	seen := readTxnTopic(t, e, "eos", kgo.ReadCommitted(), committed)
	for _, v := range committed {
		if seen[v] != 1 {
			t.Errorf("read_committed read %s %d times", v, seen[v])
		}
	}
	if d, n := countPrefix(seen, "a-"); n > 0 {
		t.Fatalf("read_committed read %d aborted records (%d distinct)", n, d)
	}
	seen = readTxnTopic(t, e, "eos", kgo.ReadUncommitted(), append(committed, txnValues("a", 30)...))
	if d, _ := countPrefix(seen, "a-"); d != 30 {
		t.Fatalf("read_uncommitted read %d of the 30 aborted records", d)
	}
}

// TestKafkaTransactionsFencing: a second producer with the same
// transactional id fences the first, whose open transaction is aborted
// (its records never visible to read_committed) and whose commit fails
// with a fencing error; the successor's commit is visible.
func TestKafkaTransactionsFencing(t *testing.T) {
	e := start(t, 3)
	e.CreateTopic("fence", 2, 3, nil)
	e.WaitSettled("fence", 60*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	zombie := txnProducer(t, e, "fenced")
	if err := zombie.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produceTxn(t, ctx, zombie, "fence", txnValues("zombie", 10))
	next := txnProducer(t, e, "fenced")
	if err := next.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produceTxn(t, ctx, next, "fence", txnValues("next", 10))
	if err := next.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatalf("the successor's commit: %v", err)
	}
	err := zombie.EndTransaction(ctx, kgo.TryCommit)
	if !errors.Is(err, fkerr.ProducerFenced) && !errors.Is(err, fkerr.InvalidProducerEpoch) {
		t.Fatalf("the zombie's commit: %v, want PRODUCER_FENCED or INVALID_PRODUCER_EPOCH", err)
	}
	seen := readTxnTopic(t, e, "fence", kgo.ReadCommitted(), txnValues("next", 10))
	if d, n := countPrefix(seen, "zombie-"); n > 0 {
		t.Fatalf("read_committed read %d records of the fenced producer (%d distinct)", n, d)
	}
}

// TestKafkaTransactionCoordinatorKilled: the coordinator broker is
// SIGKILLed after EndTxn(commit) was answered and before the markers
// could be written (the data partition's only replica SIGSTOPped
// meanwhile, and with it one of the three replicas of
// __transaction_state, so neither has a quorum until it resumes); the
// broker that next
// leads the transaction's __transaction_state partition finishes the
// prepared commit: the records become visible to read_committed and the
// transaction is CompleteCommit.
func TestKafkaTransactionCoordinatorKilled(t *testing.T) {
	e := start(t, 3)
	// One replica: while its broker is paused no marker can be written
	// there, whoever leads the other partitions.
	e.CreateTopic("kill", 1, 1, nil)
	e.WaitSettled("kill", 60*time.Second)
	leader := e.Partition("kill", 0).LeaderId
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// A transactional id whose coordinator is not the data leader.
	var id string
	var coord int32
	for i := 0; id == ""; i++ {
		cand := fmt.Sprintf("kill-%d", i)
		eventually.Nil(t, 60*time.Second, "the coordinator of "+cand, func() error {
			var err error
			coord, err = kafkaTxnCoordinator(e, cand) // grpc_txn_test.go
			return err
		})
		if coord != leader {
			id = cand
		}
	}
	p := txnProducer(t, e, id)
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	values := txnValues("k", 10)
	produceTxn(t, ctx, p, "kill", values)
	if err := e.C.Pause(testcluster.BrokerName(leader)); err != nil {
		t.Fatal(err)
	}
	if err := p.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatalf("commit: %v", err)
	}
	// Between EndTxn and completion: the coordinator holds PrepareCommit
	// (its markers cannot reach the paused broker).
	dreq := kmsg.NewPtrDescribeTransactionsRequest()
	dreq.TransactionalIDs = []string{id}
	dresp, err := rawKafka(e.KafkaAddress(coord), dreq)
	if err != nil {
		t.Fatal(err)
	}
	if st := dresp.(*kmsg.DescribeTransactionsResponse).TransactionStates[0]; st.State != "PrepareCommit" {
		t.Fatalf("before the kill: %+v, want PrepareCommit", st)
	}
	if err := e.C.Kill(testcluster.BrokerName(coord)); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	t.Logf("EndTxn answered; coordinator broker %d SIGKILLed, data leader %d paused", coord, leader)
	if err := e.C.Resume(testcluster.BrokerName(leader)); err != nil {
		t.Fatal(err)
	}
	seen := readTxnTopic(t, e, "kill", kgo.ReadCommitted(), values)
	t.Logf("the committed records visible to read_committed %v after the kill", time.Since(killed).Round(10*time.Millisecond))
	for _, v := range values {
		if seen[v] != 1 {
			t.Errorf("read %s %d times", v, seen[v])
		}
	}
	kc, err := kgo.NewClient(kgo.SeedBrokers(e.KafkaBootstrap()...))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	adm := kadm.NewClient(kc)
	// Only a new coordinator can have written CompleteCommit: it found the
	// transaction prepared when it loaded the partition and finished it.
	eventually.Nil(t, 60*time.Second, "CompleteCommit at the new coordinator", func() error {
		ds, err := adm.DescribeTransactions(ctx, id)
		if err != nil {
			return err
		}
		if d := ds[id]; d.Err != nil || d.State != "CompleteCommit" || d.Coordinator == coord {
			return fmt.Errorf("%+v", d)
		}
		return nil
	})
}
