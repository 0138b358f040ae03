package bench

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tapes-dev/tapes/internal/testcluster"
	"github.com/tapes-dev/tapes/internal/txn"
)

// TestBenchTransactions prints what transactions cost, through the Kafka
// listeners with franz-go on one fresh 3-broker cluster (6 partitions, RF 3,
// min.insync.replicas=2, 100-byte records, acks=all, idempotent):
//
//   - records/s of a transactional producer writing transactions of
//     TAPES_BENCH_TXN_RECORDS records (default 1,000) for
//     TAPES_BENCH_SECONDS (default 10), beside the same producer without a
//     transactional id, and the commit latency (EndTxn, from the
//     transaction's last record acknowledged to the commit answered) p50
//     and p99;
//   - the end-to-end latency added by the LSO: a producer writing
//     transactions of 100 records at 2,000 records/s, read by a
//     read_committed and a read_uncommitted consumer at once; latency is
//     from the record's hand-over to the producer to its arrival at the
//     consumer, p50/p99 for each.
//
// Nothing is asserted.
func TestBenchTransactions(t *testing.T) {
	needBench(t)
	e := testcluster.Start(t, binDir, 3, append(slices.Clone(observeArgs), brokerArgs()...)...)
	d := time.Duration(setting("TAPES_BENCH_SECONDS", 10)) * time.Second
	perTxn := setting("TAPES_BENCH_TXN_RECORDS", 1000)
	cfg := map[string]string{"min.insync.replicas": "2"}
	value := []byte(strings.Repeat("x", 100))

	fmt.Printf("\ntransactions through the Kafka listener (franz-go), 6 partitions RF 3, min.insync.replicas=2, acks=all, idempotent, 100-byte records, %v per row\n", d)
	fmt.Printf("%-44s %12s %8s %14s %14s\n", "producer", "records/s", "MB/s", "commit p50 ms", "commit p99 ms")
	for i, txnal := range []bool{false, true} {
		topic := fmt.Sprintf("txn-bench-%d", i)
		e.CreateTopic(topic, 6, 3, cfg)
		e.WaitSettled(topic, 60*time.Second)
		opts := []kgo.Opt{kgo.SeedBrokers(e.KafkaBootstrap()...), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(5 * time.Millisecond)}
		name := "idempotent, no transactions"
		if txnal {
			opts = append(opts, kgo.TransactionalID("txn-bench"))
			name = fmt.Sprintf("transactional, %d records per transaction", perTxn)
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			t.Fatal(err)
		}
		concurrent0 := scrapeConcurrent(t, e)
		o := observe(t, e, min(d, 5*time.Second))
		var commits []time.Duration
		records := 0
		start := time.Now()
		for time.Since(start) < d {
			ctx := context.Background()
			if txnal {
				if err := cl.BeginTransaction(); err != nil {
					t.Fatal(err)
				}
			}
			var wg sync.WaitGroup
			var mu sync.Mutex
			var perr error
			for range perTxn {
				wg.Add(1)
				cl.Produce(ctx, &kgo.Record{Value: value}, func(_ *kgo.Record, err error) {
					defer wg.Done()
					if err != nil {
						mu.Lock()
						perr = err
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if perr != nil {
				t.Fatalf("%s: produce: %v", name, perr)
			}
			if txnal {
				c := time.Now()
				if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
					t.Fatalf("%s: commit: %v", name, err)
				}
				commits = append(commits, time.Since(c))
			}
			records += perTxn
		}
		elapsed := time.Since(start).Seconds()
		cl.Close()
		p50, p99 := "-", "-"
		if len(commits) > 0 {
			p50, p99 = ms(quantile(commits, 0.50)), ms(quantile(commits, 0.99))
		}
		fmt.Printf("%-44s %12.0f %8.2f %14s %14s\n", name, float64(records)/elapsed, float64(records)*100/elapsed/1e6, p50, p99)
		if len(commits) > 0 {
			concurrent1 := scrapeConcurrent(t, e)
			for _, k := range txn.Kinds() {
				fmt.Printf("  CONCURRENT_TRANSACTIONS answers to %s per transaction: %.3f\n", k, (concurrent1[k]-concurrent0[k])/float64(len(commits)))
			}
		}
		o.print()
	}

	// The LSO's cost to read_committed readers.
	topic := "txn-bench-lso"
	e.CreateTopic(topic, 6, 3, cfg)
	e.WaitSettled(topic, 60*time.Second)
	const rate, lsoTxn = 2000, 100
	type arrival struct {
		mu   sync.Mutex
		lats []time.Duration
	}
	sent := sync.Map{} // value -> hand-over time
	readers := map[string]*arrival{"read_committed": {}, "read_uncommitted": {}}
	ctx, cancel := context.WithCancel(context.Background())
	var rwg sync.WaitGroup
	for level, a := range readers {
		iso := kgo.ReadUncommitted()
		if level == "read_committed" {
			iso = kgo.ReadCommitted()
		}
		rc, err := kgo.NewClient(kgo.SeedBrokers(e.KafkaBootstrap()...), kgo.FetchIsolationLevel(iso), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			defer rc.Close()
			for ctx.Err() == nil {
				fs := rc.PollFetches(ctx)
				now := time.Now()
				fs.EachRecord(func(r *kgo.Record) {
					if at, ok := sent.Load(string(r.Value)); ok {
						a.mu.Lock()
						a.lats = append(a.lats, now.Sub(at.(time.Time)))
						a.mu.Unlock()
					}
				})
			}
		}()
	}
	pcl, err := kgo.NewClient(kgo.SeedBrokers(e.KafkaBootstrap()...), kgo.DefaultProduceTopic(topic), kgo.TransactionalID("txn-bench-lso"),
		kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	tick := time.NewTicker(time.Second / rate)
	n := 0
	start := time.Now()
	for time.Since(start) < d {
		if err := pcl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for range lsoTxn {
			<-tick.C
			v := fmt.Sprintf("lso-%09d", n)
			n++
			sent.Store(v, time.Now())
			pcl.Produce(context.Background(), &kgo.Record{Value: []byte(v)}, nil)
		}
		if err := pcl.EndTransaction(context.Background(), kgo.TryCommit); err != nil {
			t.Fatalf("commit: %v", err)
		}
	}
	tick.Stop()
	pcl.Close()
	time.Sleep(3 * time.Second) // the readers catch up
	cancel()
	rwg.Wait()
	fmt.Printf("\nend-to-end latency, transactions of %d records at %d records/s (%d records), hand-over to arrival:\n", lsoTxn, rate, n)
	for _, level := range []string{"read_uncommitted", "read_committed"} {
		a := readers[level]
		if len(a.lats) == 0 {
			fmt.Printf("  %-17s no record arrived\n", level)
			continue
		}
		fmt.Printf("  %-17s %d records, p50 %s ms, p99 %s ms\n", level, len(a.lats), ms(quantile(a.lats, 0.50)), ms(quantile(a.lats, 0.99)))
	}
}

// quantile is the q-quantile of ds (sorted in place).
func quantile(ds []time.Duration, q float64) time.Duration {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d.Microseconds())/1000) }

// scrapeConcurrent sums tapes_txn_concurrent_transactions_total by request
// over e's brokers.
func scrapeConcurrent(t *testing.T, e *testcluster.Env) map[string]float64 {
	t.Helper()
	sum := map[string]float64{}
	for _, b := range e.Brokers() {
		for k, v := range scrapeCounter(t, e.ServedURL(b.Name, "metrics"), "tapes_txn_concurrent_transactions_total", "request") {
			sum[k] += v
		}
	}
	return sum
}
