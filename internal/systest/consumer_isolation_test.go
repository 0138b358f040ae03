package systest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestConsumerdIsolationLevel: a transaction of five records is aborted,
// the next one of five committed. consumerd --isolation-level
// read_committed processes the five committed records only; the default
// (read_uncommitted, as Kafka's) processes all ten; each says its level in
// its status. Both end at the log end (past the markers).
func TestConsumerdIsolationLevel(t *testing.T) {
	e := start(t, 3)
	e.CreateTopic("orders", 1, 3, nil)
	e.WaitSettled("orders", 60*time.Second)
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.KafkaBootstrap()...), kgo.TransactionalID("isolation"),
		kgo.DefaultProduceTopic("orders"), kgo.RetryTimeout(60*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, c := range []struct {
		prefix string
		end    kgo.TransactionEndTry
	}{{"aborted", kgo.TryAbort}, {"committed", kgo.TryCommit}} {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			v := fmt.Sprintf("%s-%d", c.prefix, i)
			if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte(v), Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatalf("produce %s: %v", v, err)
			}
		}
		if err := cl.EndTransaction(ctx, c.end); err != nil {
			t.Fatalf("end transaction %s: %v", c.prefix, err)
		}
	}
	dir := t.TempDir()
	got := map[string][]string{}
	for _, level := range []string{"read_committed", "read_uncommitted"} {
		var extra []string
		if level == "read_committed" {
			extra = []string{"--isolation-level", level}
		}
		p := startConsumer(t, e, dir, "g-"+level, level, extra...)
		// offsets 0-4 aborted, 5 the abort marker, 6-10 committed, 11 the
		// commit marker: the position after the last record is 11.
		waitCaughtUp(t, e, "g-"+level, 11)
		if got := status(t, p).IsolationLevel; got != level {
			t.Errorf("%s: status isolation_level %q", level, got)
		}
		stopConsumer(t, p)
		for _, l := range history(t, dir, level) {
			if l.Value != nil {
				got[level] = append(got[level], *l.Value)
			}
		}
	}
	var committed, all []string
	for i := range 5 {
		committed = append(committed, fmt.Sprintf("committed-%d", i))
		all = append(all, fmt.Sprintf("aborted-%d", i))
	}
	all = append(all, committed...)
	if got := got["read_committed"]; !slices.Equal(got, committed) {
		t.Errorf("read_committed processed %v; want %v", got, committed)
	}
	if got := got["read_uncommitted"]; !slices.Equal(got, all) {
		t.Errorf("read_uncommitted processed %v; want %v", got, all)
	}
}

// TestConsumerdFromLatestReadCommittedStartsAtTheLSO: offsets 0-1 plain
// records, 2-4 a transaction left open, 5 a plain record, so the high
// watermark is 6 and the last stable offset 2. gRPC ListOffsets answers 6
// for latest read_uncommitted and 2 read_committed; consumerd --from
// latest --isolation-level read_committed starts at 2 (not 6, where it
// would never see the transaction) and, once the transaction commits,
// processes its three records and the plain one after it.
func TestConsumerdFromLatestReadCommittedStartsAtTheLSO(t *testing.T) {
	e := start(t, 1)
	e.CreateTopic("orders", 1, 1, nil)
	e.WaitSettled("orders", 60*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	plain, err := kgo.NewClient(kgo.SeedBrokers(e.KafkaBootstrap()...), kgo.DefaultProduceTopic("orders"), kgo.RetryTimeout(60*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	txn, err := kgo.NewClient(kgo.SeedBrokers(e.KafkaBootstrap()...), kgo.TransactionalID("from-latest"),
		kgo.DefaultProduceTopic("orders"), kgo.RetryTimeout(60*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	produce := func(cl *kgo.Client, v string) {
		t.Helper()
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatalf("produce %s: %v", v, err)
		}
	}
	produce(plain, "before-0")
	produce(plain, "before-1")
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		produce(txn, fmt.Sprintf("txn-%d", i))
	}
	produce(plain, "after")

	for _, c := range []struct {
		level int32
		want  int64
	}{{0, 6}, {1, 2}} {
		resp, err := e.Client.ListOffsetsIsolated(ctx, "orders", 0, -1, c.level)
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetOffset() != c.want {
			t.Errorf("ListOffsets latest, isolation level %d: %d; want %d", c.level, resp.GetOffset(), c.want)
		}
	}

	dir := t.TempDir()
	p := startConsumer(t, e, dir, "g-latest", "latest", "--from", "latest", "--isolation-level", "read_committed")
	var pos int64 = -1
	e.WaitFor(30*time.Second, "consumerd to own orders-0 with a position", func() bool {
		for _, cp := range status(t, p).Partitions {
			if cp.Partition == 0 && cp.Position >= 0 {
				pos = cp.Position
				return true
			}
		}
		return false
	})
	if pos != 2 {
		t.Fatalf("--from latest read_committed started at %d; want the last stable offset 2 (high watermark 6)", pos)
	}
	if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	// 0-1, 2-4, 5, the commit marker at 6: the position after the last
	// record is 6.
	waitCaughtUp(t, e, "g-latest", 6)
	stopConsumer(t, p)
	var got []string
	for _, l := range history(t, dir, "latest") {
		if l.Value != nil {
			got = append(got, *l.Value)
		}
	}
	if want := []string{"txn-0", "txn-1", "txn-2", "after"}; !slices.Equal(got, want) {
		t.Errorf("processed %v; want %v", got, want)
	}
}
