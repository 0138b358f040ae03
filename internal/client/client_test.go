package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestRoutesEachCallToThePartitionLeader(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.setTopic("orders", 1, 2, 3, 1) // partition 0 on broker 2, 1 on 3, 2 on 1
	cl := fc.client()
	ctx := testCtx(t)

	for p, leader := range []int32{2, 3, 1} {
		resp, err := cl.Produce(ctx, &tapesv1.ProduceRequest{Topic: "orders", Partition: int32(p), Acks: AcksAll})
		if err != nil {
			t.Fatalf("produce partition %d: %v", p, err)
		}
		if resp.BaseOffset != int64(leader)*1000 {
			t.Fatalf("partition %d answered by broker %d, want leader %d", p, resp.BaseOffset/1000, leader)
		}
		fr, err := cl.Fetch(ctx, &tapesv1.FetchRequest{Topic: "orders", Partition: int32(p)})
		if err != nil || fr.HighWatermark != int64(leader) {
			t.Fatalf("fetch partition %d: answered by %d, %v", p, fr.GetHighWatermark(), err)
		}
		lo, err := cl.ListOffsets(ctx, "orders", int32(p), EarliestOffset)
		if err != nil || lo.Offset != int64(leader)*100+EarliestOffset {
			t.Fatalf("list offsets partition %d: %v, %v", p, lo, err)
		}
		id, addr, err := cl.Leader(ctx, "orders", int32(p))
		if err != nil || id != leader || addr != fc.broker(leader).addr {
			t.Fatalf("Leader(%d) = %d %s %v", p, id, addr, err)
		}
	}
	for _, b := range fc.brokers {
		if b.produces.Load() != 1 || b.fetches.Load() != 1 || b.listOffsets.Load() != 1 {
			t.Errorf("broker %d got %d produces, %d fetches, %d list offsets; want 1 each (one partition each)",
				b.id, b.produces.Load(), b.fetches.Load(), b.listOffsets.Load())
		}
	}
	if n := fc.metadataCalls.Load(); n != 1 {
		t.Errorf("%d metadata requests, want 1 (the cache serves the rest)", n)
	}
	if n, err := cl.Partitions(ctx, "orders"); n != 3 || err != nil {
		t.Errorf("Partitions = %d, %v", n, err)
	}
}

func TestNotLeaderHintIsUsedWithoutRefresh(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.setTopic("orders", 4, 1)
	cl := fc.client()
	ctx := testCtx(t)
	if _, _, err := cl.Leader(ctx, "orders", 0); err != nil { // caches orders
		t.Fatal(err)
	}
	// Broker 1 lost leadership to broker 2 at epoch 5; metadata has not
	// caught up (it still says broker 1 at epoch 4).
	fc.broker(1).setProduce(func(_ int64, req *tapesv1.ProduceRequest) (*tapesv1.ProduceResponse, error) {
		return nil, kerr.NotLeader(2, fc.broker(2).addr, 5, "broker 1 was deposed")
	})
	fc.broker(2).setProduce(func(_ int64, req *tapesv1.ProduceRequest) (*tapesv1.ProduceResponse, error) {
		return &tapesv1.ProduceResponse{BaseOffset: 42, LeaderEpoch: 5}, nil
	})
	before := fc.metadataCalls.Load()
	resp, err := cl.Produce(ctx, &tapesv1.ProduceRequest{Topic: "orders", Acks: AcksAll})
	if err != nil || resp.BaseOffset != 42 {
		t.Fatalf("produce = %v, %v; want broker 2's answer", resp, err)
	}
	if n := fc.metadataCalls.Load() - before; n != 0 {
		t.Errorf("%d metadata requests after the hint, want 0", n)
	}
	// Metadata still naming broker 1 at the older epoch must not undo the hint.
	if err := cl.RefreshMetadata(ctx); err != nil {
		t.Fatal(err)
	}
	if id, _, err := cl.Leader(ctx, "orders", 0); id != 2 || err != nil {
		t.Fatalf("after a refresh with an older epoch, leader = %d, %v; want 2", id, err)
	}
	if n := fc.broker(1).produces.Load(); n != 1 {
		t.Errorf("deposed broker got %d produces, want 1", n)
	}
}

func TestNotLeaderWithoutNewerHintRefreshesMetadata(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.setTopic("orders", 4, 1)
	cl := fc.client()
	ctx := testCtx(t)
	if _, _, err := cl.Leader(ctx, "orders", 0); err != nil { // caches orders
		t.Fatal(err)
	}
	// Broker 1 knows no leader (-1); the controller already knows broker 3.
	fc.broker(1).setProduce(func(_ int64, _ *tapesv1.ProduceRequest) (*tapesv1.ProduceResponse, error) {
		fc.setTopic("orders", 6, 3)
		return nil, kerr.NotLeader(-1, "", 0, "election in progress")
	})
	before := fc.metadataCalls.Load()
	resp, err := cl.Produce(ctx, &tapesv1.ProduceRequest{Topic: "orders", Acks: AcksAll})
	if err != nil || resp.BaseOffset != 3000 {
		t.Fatalf("produce = %v, %v; want broker 3's answer", resp, err)
	}
	if n := fc.metadataCalls.Load() - before; n != 1 {
		t.Errorf("%d metadata requests, want exactly 1 refresh", n)
	}
}

func TestSwitchesBootstrapBrokersWhenTheFirstIsDown(t *testing.T) {
	fc := newFakeCluster(t, 2)
	fc.setTopic("orders", 1, 2)
	cl := fc.client(deadAddr(t), fc.broker(1).addr)
	ctx := testCtx(t)
	md, err := cl.Metadata(ctx, nil, false)
	if err != nil {
		t.Fatalf("metadata with the first bootstrap broker down: %v", err)
	}
	if md.BrokerId != 1 {
		t.Fatalf("answered by %d, want 1", md.BrokerId)
	}
	// Broker 1 (the only bootstrap that works) dies: the client still knows
	// broker 2 from metadata and asks it.
	fc.broker(1).srv.Stop()
	md, err = cl.Metadata(ctx, []string{"orders"}, false)
	if err != nil || md.BrokerId != 2 {
		t.Fatalf("metadata after broker 1 died = %v, %v; want broker 2's answer", md, err)
	}
}

func TestTransportFailureRefreshesAndFindsTheNewLeader(t *testing.T) {
	fc := newFakeCluster(t, 2)
	fc.setTopic("orders", 1, 1)
	cl := fc.client()
	ctx := testCtx(t)
	if err := cl.RefreshMetadata(ctx); err != nil {
		t.Fatal(err)
	}
	fc.broker(1).srv.Stop()
	fc.setTopic("orders", 2, 2)
	fr, err := cl.Fetch(ctx, &tapesv1.FetchRequest{Topic: "orders", MaxWaitMs: 10})
	if err != nil || fr.HighWatermark != 2 {
		t.Fatalf("fetch after the leader died = %v, %v; want broker 2's answer", fr, err)
	}
}

func TestRetryUnknownOutcomePolicy(t *testing.T) {
	// failOnce answers the first produce with err and accepts the next.
	failOnce := func(err error) func(int64, *tapesv1.ProduceRequest) (*tapesv1.ProduceResponse, error) {
		return func(n int64, _ *tapesv1.ProduceRequest) (*tapesv1.ProduceResponse, error) {
			if n == 1 {
				return nil, err
			}
			return &tapesv1.ProduceResponse{BaseOffset: 7}, nil
		}
	}
	// hangOnce never answers the first produce within the attempt deadline:
	// the request reached the broker, the outcome is unknown.
	hangOnce := func(n int64, _ *tapesv1.ProduceRequest) (*tapesv1.ProduceResponse, error) {
		if n == 1 {
			time.Sleep(time.Second)
		}
		return &tapesv1.ProduceResponse{BaseOffset: 7}, nil
	}
	cases := []struct {
		name        string
		hook        func(int64, *tapesv1.ProduceRequest) (*tapesv1.ProduceResponse, error)
		retryUnk    bool
		wantCode    kerr.Code // "" means success
		wantTimeout bool
		wantCalls   int64
	}{
		{"request timed out, retried", failOnce(kerr.New(kerr.RequestTimedOut, "raft commit")), true, "", false, 2},
		{"request timed out, returned", failOnce(kerr.New(kerr.RequestTimedOut, "raft commit")), false, kerr.RequestTimedOut, false, 1},
		{"after append, returned", failOnce(kerr.New(kerr.NotEnoughReplicasAfterAppend, "isr shrank")), false, kerr.NotEnoughReplicasAfterAppend, false, 1},
		{"after append, retried", failOnce(kerr.New(kerr.NotEnoughReplicasAfterAppend, "isr shrank")), true, "", false, 2},
		{"not enough replicas is safe", failOnce(kerr.New(kerr.NotEnoughReplicas, "isr 1 < 2")), false, "", false, 2},
		{"leader not available is safe", failOnce(kerr.New(kerr.LeaderNotAvailable, "electing")), false, "", false, 2},
		{"attempt deadline, returned", hangOnce, false, "", true, 1},
		{"attempt deadline, retried", hangOnce, true, "", false, 2},
		{"non-retriable never retried", failOnce(kerr.New(kerr.RecordTooLarge, "record of 2 MiB")), true, kerr.RecordTooLarge, false, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fc := newFakeCluster(t, 1)
			fc.setTopic("orders", 1, 1)
			fc.broker(1).setProduce(tc.hook)
			cl := fc.client()
			resp, err := cl.ProduceWith(testCtx(t), &tapesv1.ProduceRequest{Topic: "orders", Acks: AcksAll},
				ProduceOptions{RetryUnknownOutcome: tc.retryUnk})
			switch {
			case tc.wantCode != "":
				if !kerr.Is(err, tc.wantCode) {
					t.Fatalf("err = %v, want %s", err, tc.wantCode)
				}
			case tc.wantTimeout:
				if err == nil || kerr.CodeOf(err) != "" || !isTransport(errors.Unwrap(err)) {
					t.Fatalf("err = %v, want the attempt's deadline", err)
				}
			default:
				if err != nil || resp.BaseOffset != 7 {
					t.Fatalf("produce = %v, %v; want success", resp, err)
				}
			}
			if n := fc.broker(1).produces.Load(); n != tc.wantCalls {
				t.Fatalf("broker got %d produce requests, want %d", n, tc.wantCalls)
			}
		})
	}
}

func TestUnreachableLeaderIsRetriedEvenWithoutUnknownOutcomeRetries(t *testing.T) {
	fc := newFakeCluster(t, 2)
	fc.setTopic("orders", 1, 1)
	cl := fc.client(fc.broker(2).addr)
	ctx := testCtx(t)
	if err := cl.RefreshMetadata(ctx); err != nil {
		t.Fatal(err)
	}
	// Broker 1 is gone before the produce: no connection could carry it, so
	// nothing can have been appended and a retry is safe.
	fc.broker(1).srv.Stop()
	fc.setTopic("orders", 2, 2)
	resp, err := cl.ProduceWith(ctx, &tapesv1.ProduceRequest{Topic: "orders", Acks: AcksAll}, ProduceOptions{})
	if err != nil || resp.BaseOffset != 2000 {
		t.Fatalf("produce = %v, %v; want broker 2's answer", resp, err)
	}
}

func TestContextDeadlineEndsRetries(t *testing.T) {
	fc := newFakeCluster(t, 1)
	fc.setTopic("orders", 1, 1)
	fc.broker(1).setProduce(func(int64, *tapesv1.ProduceRequest) (*tapesv1.ProduceResponse, error) {
		return nil, kerr.New(kerr.NotEnoughReplicas, "isr 1 below min.insync.replicas 2")
	})
	cl := fc.client()
	// Metadata first, so that the deadline below is spent on produce
	// attempts and not on a loaded machine's first connection.
	if _, err := cl.Partitions(testCtx(t), "orders"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	_, err := cl.Produce(ctx, &tapesv1.ProduceRequest{Topic: "orders", Acks: AcksAll})
	if el := time.Since(start); el > 4*time.Second {
		t.Fatalf("Produce returned after %v, long after its 1s context", el)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !kerr.Is(err, kerr.NotEnoughReplicas) {
		t.Fatalf("err = %v; want the deadline and the last Kafka error", err)
	}
	if n := fc.broker(1).produces.Load(); n < 2 {
		t.Fatalf("only %d attempts in 1s: retries did not happen", n)
	}
}

func TestErrorsKeepTheirKafkaName(t *testing.T) {
	fc := newFakeCluster(t, 1)
	fc.setTopic("orders", 1, 1)
	fc.broker(1).mu.Lock()
	fc.broker(1).onFetch = func(int64, *tapesv1.FetchRequest) (*tapesv1.FetchResponse, error) {
		return nil, kerr.OutOfRange(3, 10, 20)
	}
	fc.broker(1).mu.Unlock()
	cl := fc.client()
	ctx := testCtx(t)

	_, err := cl.Fetch(ctx, &tapesv1.FetchRequest{Topic: "orders", Offset: 3})
	ke, ok := kerr.As(err)
	if !ok || ke.Code() != kerr.OffsetOutOfRange || ke.Detail.LogStartOffset != 10 || ke.Detail.HighWatermark != 20 {
		t.Fatalf("fetch err = %v; want OFFSET_OUT_OF_RANGE with bounds [10, 20]", err)
	}
	if !strings.Contains(err.Error(), "orders-0") {
		t.Errorf("error %q does not name the partition", err)
	}
	if fc.broker(1).fetches.Load() != 1 {
		t.Errorf("a non-retriable error was retried")
	}

	if _, err := cl.Partitions(ctx, "missing"); !kerr.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("Partitions(missing) = %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
	}
	if _, _, err := cl.Leader(ctx, "orders", 5); !kerr.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("Leader(orders, 5) = %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
	}
	if _, err := cl.DescribeReplicas(ctx, 9); !kerr.Is(err, kerr.BrokerNotAvailable) {
		t.Fatalf("DescribeReplicas(9) = %v, want BROKER_NOT_AVAILABLE", err)
	}
	if r, err := cl.DescribeReplicas(ctx, 1); err != nil || r.BrokerId != 1 {
		t.Fatalf("DescribeReplicas(1) = %v, %v", r, err)
	}
}

func TestCreateAndDeleteTopicsJoinPerTopicErrors(t *testing.T) {
	fc := newFakeCluster(t, 1)
	fc.setTopic("orders", 1, 1)
	cl := fc.client()
	ctx := testCtx(t)

	err := cl.CreateTopics(ctx, []*tapesv1.TopicSpec{
		{Name: "orders", Partitions: 3, ReplicationFactor: 1},
		{Name: "payments", Partitions: 2, ReplicationFactor: 1},
		{Name: "bad", Partitions: 0, ReplicationFactor: 1},
	}, false)
	if !kerr.Is(err, kerr.TopicAlreadyExists) || !kerr.Is(errors.Unwrap(secondOf(t, err)), kerr.InvalidPartitions) {
		t.Fatalf("err = %v; want TOPIC_ALREADY_EXISTS and INVALID_PARTITIONS", err)
	}
	if !strings.Contains(err.Error(), `"orders"`) || !strings.Contains(err.Error(), `"bad"`) || strings.Contains(err.Error(), "payments") {
		t.Fatalf("err = %q; want it to name orders and bad only", err)
	}
	// The new topic is routable at once: creating it made the cache stale.
	if n, err := cl.Partitions(ctx, "payments"); n != 2 || err != nil {
		t.Fatalf("Partitions(payments) = %d, %v", n, err)
	}
	if err := cl.CreateTopics(ctx, []*tapesv1.TopicSpec{{Name: "x", Partitions: 1}}, true); err != nil {
		t.Fatalf("validate only: %v", err)
	}
	if _, err := cl.Partitions(ctx, "x"); !kerr.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("validate only created the topic: %v", err)
	}

	if err := cl.DeleteTopics(ctx, []string{"payments"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Partitions(ctx, "payments"); !kerr.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("deleted topic still known: %v", err)
	}
	if err := cl.DeleteTopics(ctx, []string{"payments"}); !kerr.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("deleting twice = %v", err)
	}
}

// secondOf returns the second error joined in err.
func secondOf(t *testing.T, err error) error {
	t.Helper()
	j, ok := err.(interface{ Unwrap() []error })
	if !ok || len(j.Unwrap()) != 2 {
		t.Fatalf("err = %v; want two joined errors", err)
	}
	return j.Unwrap()[1]
}

func TestMetadataAgeTriggersRefresh(t *testing.T) {
	fc := newFakeCluster(t, 1)
	fc.setTopic("orders", 1, 1)
	cl, err := New(Config{Bootstrap: []string{fc.broker(1).addr}, MetadataMaxAge: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := testCtx(t)
	if _, err := cl.Partitions(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Partitions(ctx, "orders"); err != nil || fc.metadataCalls.Load() != 1 {
		t.Fatalf("fresh cache: %d metadata requests, %v", fc.metadataCalls.Load(), err)
	}
	fc.setTopic("orders", 1, 1, 1, 1)
	time.Sleep(60 * time.Millisecond)
	if n, err := cl.Partitions(ctx, "orders"); n != 3 || err != nil {
		t.Fatalf("after MetadataMaxAge, Partitions = %d, %v; want the refreshed 3", n, err)
	}
}

func TestClosedClientAndBadConfig(t *testing.T) {
	if _, err := New(Config{Bootstrap: []string{""}}); !errors.Is(err, ErrNoBootstrap) {
		t.Fatalf("New without bootstrap = %v", err)
	}
	fc := newFakeCluster(t, 1)
	cl := fc.client()
	if err := cl.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Metadata(testCtx(t), nil, false); !errors.Is(err, ErrClosed) {
		t.Fatalf("Metadata after Close = %v, want ErrClosed", err)
	}
}
