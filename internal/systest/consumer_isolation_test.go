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
