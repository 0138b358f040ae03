package client

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// While brokers are still registering, the controller answers a topic's
// creation with a retriable error in its result; CreateTopics sends that
// topic again (only that one) until it is created, telling OnRetry what it
// waits for.
func TestCreateTopicsRetriesRetriableTopicResults(t *testing.T) {
	fc := newFakeCluster(t, 1)
	var calls atomic.Int64
	var sent [][]string
	var mu sync.Mutex
	fc.broker(1).onCreate = func(req *tapesv1.CreateTopicsRequest) (*tapesv1.CreateTopicsResponse, error) {
		n := calls.Add(1)
		resp := &tapesv1.CreateTopicsResponse{}
		var names []string
		for _, s := range req.GetTopics() {
			names = append(names, s.GetName())
			r := &tapesv1.TopicResult{Name: s.GetName()}
			switch {
			case s.GetName() == "bad":
				r.Error = kerr.New(kerr.InvalidPartitions, "no").Detail
			case n < 3:
				// Not in kerr's retriable table, but marked retriable by
				// the broker: what "0 available brokers" is at start-up.
				d := kerr.New(kerr.InvalidReplicationFactor, "replication factor 3 is larger than the 0 available brokers").Detail
				d.Retriable = true
				r.Error = d
			}
			resp.Results = append(resp.Results, r)
		}
		mu.Lock()
		sent = append(sent, names)
		mu.Unlock()
		return resp, nil
	}
	var notices []Retry
	cl, err := New(Config{Bootstrap: []string{fc.broker(1).addr}, RequestTimeout: 500 * time.Millisecond, RetryBackoff: time.Millisecond,
		OnRetry: func(r Retry) { mu.Lock(); notices = append(notices, r); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	err = cl.CreateTopics(testCtx(t), []*tapesv1.TopicSpec{{Name: "t1", Partitions: 1, ReplicationFactor: 3}, {Name: "bad"}}, false)
	if !kerr.Is(err, kerr.InvalidPartitions) || strings.Contains(err.Error(), "t1") {
		t.Fatalf("err = %v; want only bad's INVALID_PARTITIONS", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sent) != 3 || len(sent[0]) != 2 || len(sent[1]) != 1 || sent[1][0] != "t1" {
		t.Fatalf("requests sent %v; want [t1 bad] then [t1] twice", sent)
	}
	if len(notices) != 2 || notices[0].Op != "create topics" || !kerr.Is(notices[0].Err, kerr.InvalidReplicationFactor) {
		t.Fatalf("notices %+v; want two about create topics' INVALID_REPLICATION_FACTOR", notices)
	}
}

// A non-retriable result is final at once; a retriable one that never
// clears ends with the caller's deadline and says what it waited for.
func TestCreateTopicsGivesUpOnRetriableResultsAtTheDeadline(t *testing.T) {
	fc := newFakeCluster(t, 1)
	fc.broker(1).onCreate = func(req *tapesv1.CreateTopicsRequest) (*tapesv1.CreateTopicsResponse, error) {
		return &tapesv1.CreateTopicsResponse{Results: []*tapesv1.TopicResult{
			{Name: "t1", Error: kerr.New(kerr.NotController, "no controller yet").Detail}}}, nil
	}
	cl := fc.client()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := cl.CreateTopics(ctx, []*tapesv1.TopicSpec{{Name: "t1", Partitions: 1, ReplicationFactor: 1}}, false)
	if !errors.Is(err, context.DeadlineExceeded) || !kerr.Is(err, kerr.NotController) || !strings.Contains(err.Error(), `"t1"`) {
		t.Fatalf("err = %v; want the deadline with t1's NOT_CONTROLLER", err)
	}
}

// Every bootstrap address refuses connections and no broker ever answered:
// with UnreachableAfter the call says so instead of retrying until its
// deadline; each wait before that names the addresses as unreachable.
func TestUnreachableClusterIsReportedEarly(t *testing.T) {
	a, b := deadAddr(t), deadAddr(t)
	var notices atomic.Int64
	var unreachable atomic.Value
	cl, err := New(Config{Bootstrap: []string{a, b}, RetryBackoff: time.Millisecond, UnreachableAfter: 50 * time.Millisecond,
		UnreachableHint: "is the cluster running?",
		OnRetry:         func(r Retry) { notices.Add(1); unreachable.Store(r.Unreachable) }})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = cl.Partitions(ctx, "orders")
	var ue *UnreachableError
	if !errors.Is(err, ErrUnreachable) || !errors.As(err, &ue) || ctx.Err() != nil {
		t.Fatalf("err = %v (ctx %v); want ErrUnreachable before the deadline", err, ctx.Err())
	}
	if want := "no broker answers at " + a + ", " + b + ": is the cluster running?"; !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %q; want it to contain %q", err, want)
	}
	if got, _ := unreachable.Load().([]string); notices.Load() == 0 || len(got) != 2 {
		t.Fatalf("%d notices, last unreachable %v; want notices naming both addresses", notices.Load(), got)
	}
}

// Once a broker has answered, a cluster that stops answering is a restart
// to wait for, not a cluster that is not running: retries go on until the
// caller's deadline. Without UnreachableAfter they always do.
func TestUnreachableOnlyBeforeAnyAnswer(t *testing.T) {
	fc := newFakeCluster(t, 1)
	fc.setTopic("orders", 1, 1)
	cl, err := New(Config{Bootstrap: []string{fc.broker(1).addr}, RequestTimeout: 200 * time.Millisecond, RetryBackoff: time.Millisecond,
		UnreachableAfter: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.Metadata(testCtx(t), nil, false); err != nil {
		t.Fatal(err)
	}
	fc.broker(1).srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := cl.Metadata(ctx, nil, false); errors.Is(err, ErrUnreachable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v; want the deadline, not ErrUnreachable", err)
	}

	never, err := New(Config{Bootstrap: []string{deadAddr(t)}, RetryBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer never.Close()
	ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := never.Metadata(ctx, nil, false); errors.Is(err, ErrUnreachable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("without UnreachableAfter: err = %v; want the deadline", err)
	}
}
