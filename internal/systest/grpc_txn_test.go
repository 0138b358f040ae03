package systest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	fkerr "github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tapes-dev/tapes/internal/client"
	"github.com/tapes-dev/tapes/internal/eventually"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// Transactions over gRPC (issue 13 point 3): internal/client's
// TxnProducer against real brokers, read back by gRPC and by franz-go, and
// franz-go's transactional producer read back by gRPC read_committed: one
// coordinator, two front ends.

// grpcTxnRecords are n records valued prefix-0 ... prefix-(n-1).
func grpcTxnRecords(prefix string, n int) []*tapesv1.Record {
	out := make([]*tapesv1.Record, n)
	for i, v := range txnValues(prefix, n) {
		out[i] = &tapesv1.Record{Key: []byte(v), Value: []byte(v)}
	}
	return out
}

// grpcReadCommitted reads topic's partitions with gRPC Fetch at
// isolation (0 read_uncommitted, 1 read_committed) from the start to the
// last stable offset (read_committed) or high watermark and counts each
// value.
func grpcRead(t *testing.T, e *testcluster.Env, topic string, partitions int32, isolation int32) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	seen := map[string]int{}
	for p := range partitions {
		for off := int64(0); ; {
			resp, err := e.Client.Fetch(ctx, &tapesv1.FetchRequest{Topic: topic, Partition: p, Offset: off, MaxBytes: 1 << 20, IsolationLevel: isolation})
			if err != nil {
				t.Fatalf("fetch %s-%d at %d: %v", topic, p, off, err)
			}
			for _, r := range resp.Records {
				seen[string(r.Value)]++
			}
			next := client.NextOffset(resp, off)
			end := resp.HighWatermark
			if isolation == 1 {
				end = resp.LastStableOffset
			}
			if next == off || next >= end {
				break
			}
			off = next
		}
	}
	return seen
}

// kafkaTxnCoordinator is the broker Kafka's FindCoordinator (v3, key type
// 1) names as id's transaction coordinator.
func kafkaTxnCoordinator(e *testcluster.Env, id string) (int32, error) {
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.Version, fc.CoordinatorType, fc.CoordinatorKey = 3, 1, id
	resp, err := rawKafka(e.KafkaBootstrap()[0], fc)
	if err != nil {
		return -1, err
	}
	r := resp.(*kmsg.FindCoordinatorResponse)
	return r.NodeID, fkerr.ErrorForCode(r.ErrorCode)
}

func TestGRPCTransactions(t *testing.T) {
	e := start(t, 3)
	e.CreateTopic("gtx", 2, 3, nil)
	e.WaitSettled("gtx", 60*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// gRPC's FindCoordinator with key type 1 names the broker Kafka's does.
	for _, id := range []string{"grpc-1", "zombie", "offsets", "kafka-1"} {
		eventually.Nil(t, 60*time.Second, "both front ends name the coordinator of "+id, func() error {
			k, err := kafkaTxnCoordinator(e, id)
			if err != nil {
				return err
			}
			g, err := e.Client.FindTransactionCoordinator(ctx, id)
			if err != nil {
				return err
			}
			if g.NodeId != k {
				return fmt.Errorf("gRPC names broker %d, Kafka broker %d", g.NodeId, k)
			}
			return nil
		})
	}

	// commit, abort, commit over gRPC, on both partitions.
	p, err := e.Client.NewTransactionalProducer(ctx, "grpc-1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, tx := range []struct {
		prefix string
		commit bool
	}{{"c", true}, {"a", false}, {"end", true}} {
		if err := p.Begin(); err != nil {
			t.Fatal(err)
		}
		for part := range int32(2) {
			if _, err := p.Produce(ctx, "gtx", part, grpcTxnRecords(fmt.Sprintf("%s%d", tx.prefix, part), 10)); err != nil {
				t.Fatalf("produce %s: %v", tx.prefix, err)
			}
		}
		if tx.commit {
			err = p.Commit(ctx)
		} else {
			err = p.Abort(ctx)
		}
		if err != nil {
			t.Fatalf("end %s: %v", tx.prefix, err)
		}
	}
	want := append(txnValues("c0", 10), append(txnValues("c1", 10), append(txnValues("end0", 10), txnValues("end1", 10)...)...)...)
	// franz-go read_committed reads what the gRPC producer committed, once,
	// and nothing it aborted; read_uncommitted reads the aborted records.
	rc := readTxnTopic(t, e, "gtx", kgo.ReadCommitted(), want)
	for _, v := range want {
		if rc[v] != 1 {
			t.Errorf("kgo read_committed read %s %d times, want 1", v, rc[v])
		}
	}
	for _, pre := range []string{"a0", "a1"} {
		if d, _ := countPrefix(rc, pre); d != 0 {
			t.Errorf("kgo read_committed read %d aborted records %s-*", d, pre)
		}
	}
	ru := readTxnTopic(t, e, "gtx", kgo.ReadUncommitted(), append(txnValues("a0", 10), txnValues("a1", 10)...))
	if d, _ := countPrefix(ru, "a"); d != 20 {
		t.Errorf("kgo read_uncommitted read %d of the 20 aborted records", d)
	}
	// gRPC read_committed agrees.
	eventually.True(t, 30*time.Second, "gRPC read_committed reads the committed records", func() bool {
		g := grpcRead(t, e, "gtx", 2, 1)
		d, _ := countPrefix(g, "a")
		return len(g) == len(want) && d == 0 && g["end1-9"] == 1
	})

	// franz-go's transactional producer, read by gRPC read_committed.
	kp := txnProducer(t, e, "kafka-1")
	for _, tx := range []struct {
		prefix string
		end    kgo.TransactionEndTry
	}{{"kc", kgo.TryCommit}, {"ka", kgo.TryAbort}} {
		if err := kp.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		produceTxn(t, ctx, kp, "gtx", txnValues(tx.prefix, 10))
		if err := kp.EndTransaction(ctx, tx.end); err != nil {
			t.Fatal(err)
		}
	}
	eventually.True(t, 30*time.Second, "gRPC read_committed reads franz-go's committed records and not its aborted ones", func() bool {
		g := grpcRead(t, e, "gtx", 2, 1)
		kc, kcTotal := countPrefix(g, "kc")
		ka, _ := countPrefix(g, "ka")
		return kc == 10 && kcTotal == 10 && ka == 0
	})
	if d, _ := countPrefix(grpcRead(t, e, "gtx", 2, 0), "ka"); d != 10 {
		t.Errorf("gRPC read_uncommitted read %d of franz-go's 10 aborted records", d)
	}

	// A second producer with the same id fences the first.
	z1, err := e.Client.NewTransactionalProducer(ctx, "zombie", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := z1.Begin(); err != nil {
		t.Fatal(err)
	}
	if _, err := z1.Produce(ctx, "gtx", 0, grpcTxnRecords("z1", 5)); err != nil {
		t.Fatal(err)
	}
	z2, err := e.Client.NewTransactionalProducer(ctx, "zombie", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if z2.Epoch <= z1.Epoch && z2.ProducerID == z1.ProducerID {
		t.Fatalf("second producer epoch %d not above the first's %d", z2.Epoch, z1.Epoch)
	}
	if _, err := z1.Produce(ctx, "gtx", 0, grpcTxnRecords("z1late", 5)); !errors.Is(err, client.ErrProducerFenced) {
		t.Fatalf("fenced producer's Produce: %v, want ErrProducerFenced", err)
	}
	if err := z1.Commit(ctx); !errors.Is(err, client.ErrProducerFenced) {
		t.Fatalf("fenced producer's Commit: %v, want ErrProducerFenced", err)
	}
	// A fenced producer that had not used a partition yet is fenced on it too.
	z1b, err := e.Client.NewTransactionalProducer(ctx, "zombie2", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Client.NewTransactionalProducer(ctx, "zombie2", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := z1b.Begin(); err != nil {
		t.Fatal(err)
	}
	if _, err := z1b.Produce(ctx, "gtx", 1, grpcTxnRecords("z1b", 5)); !errors.Is(err, client.ErrProducerFenced) {
		t.Fatalf("fenced producer's first Produce: %v, want ErrProducerFenced", err)
	}
	if err := z2.Begin(); err != nil {
		t.Fatal(err)
	}
	if _, err := z2.Produce(ctx, "gtx", 0, grpcTxnRecords("z2", 5)); err != nil {
		t.Fatal(err)
	}
	if err := z2.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 30*time.Second, "the successor's records are read_committed, none of the zombie's", func() bool {
		g := grpcRead(t, e, "gtx", 2, 1)
		d1, _ := countPrefix(g, "z1")
		d2, _ := countPrefix(g, "z2")
		return d1 == 0 && d2 == 5
	})

	// Offsets in a transaction are applied only when it commits.
	offsetOf := func() int64 {
		got, err := e.Client.OffsetFetch(ctx, "gtx-group", []*tapesv1.TopicPartitions{{Topic: "gtx", Partitions: []int32{0}}})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 {
			t.Fatalf("offset fetch: %v", got)
		}
		return got[0].Offset
	}
	op, err := e.Client.NewTransactionalProducer(ctx, "offsets", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, tx := range []struct {
		offset int64
		commit bool
	}{{5, false}, {7, true}} {
		if err := op.Begin(); err != nil {
			t.Fatal(err)
		}
		if _, err := op.Produce(ctx, "gtx", 1, grpcTxnRecords(fmt.Sprintf("o%d", tx.offset), 1)); err != nil {
			t.Fatal(err)
		}
		if err := op.SendOffsets(ctx, "gtx-group", -1, "", []*tapesv1.OffsetCommitPartition{{Topic: "gtx", Partition: 0, Offset: tx.offset}}); err != nil {
			t.Fatal(err)
		}
		if got := offsetOf(); got != -1 {
			t.Fatalf("offset %d visible before the transaction ended", got)
		}
		if tx.commit {
			err = op.Commit(ctx)
		} else {
			err = op.Abort(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		if !tx.commit {
			// the abort's marker drops the pending commit: wait for the
			// partition's LSO to pass it, then the offset is still unset.
			eventually.True(t, 30*time.Second, "the aborted transaction completes", func() bool {
				_, n := countPrefix(grpcRead(t, e, "gtx", 2, 0), "o5")
				return n == 1
			})
			if got := offsetOf(); got != -1 {
				t.Fatalf("aborted transaction's offset %d applied", got)
			}
		}
	}
	eventually.True(t, 30*time.Second, "the committed transaction's offset applies", func() bool { return offsetOf() == 7 })
}
