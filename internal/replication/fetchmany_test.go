package replication

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/storage"
)

// waitAsync runs w.Wait on its own goroutine (the test's stand-in for a
// long-poll request) and returns what it reports.
func waitAsync(ctx context.Context, w *Wakeup, timeout <-chan time.Time) <-chan bool {
	out := make(chan bool, 1)
	go func() { out <- w.Wait(ctx, timeout) }()
	return out
}

// mustNotReturn fails when the wait returned; it checks once, without a
// time bound (the wait blocks on channels only nothing has closed).
func mustNotReturn(t *testing.T, ch <-chan bool) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("the wait returned %v before anything changed", v)
	default:
	}
}

func TestFetchBatchesOnTheLeader(t *testing.T) {
	r := openSolo(t, t.TempDir(), nil)
	for i := range 3 {
		if _, err := produceValues(t, r, AcksAll, storage.NoProducer, "a"+strconv.Itoa(i), "b"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	res, err := r.FetchBatches(3, 1<<20, true, ReadUncommitted)
	if err != nil {
		t.Fatal(err)
	}
	if res.HighWatermark != 6 || res.LogStart != 0 || res.Term != r.ReadyTerm() {
		t.Fatalf("result %+v", res)
	}
	if len(res.Batches) != 2 || res.Batches[0].BaseOffset != 2 || res.Batches[1].BaseOffset != 4 {
		t.Fatalf("batches %+v, want those at 2 and 4", res.Batches)
	}
	if res, err = r.FetchBatches(6, 1<<20, true, ReadUncommitted); err != nil || len(res.Batches) != 0 || res.HighWatermark != 6 {
		t.Fatalf("at the high watermark: %+v, %v", res, err)
	}
	_, err = r.FetchBatches(7, 1<<20, true, ReadUncommitted)
	if ke, ok := kerr.As(err); !ok || ke.Code() != kerr.OffsetOutOfRange || ke.Detail.HighWatermark != 6 {
		t.Fatalf("past the high watermark: %v", err)
	}
}

// TestWatchWokenByAnyReplica: one wait over three partitions is woken by an
// append to any one of them, and only by a change after Watch.
func TestWatchWokenByAnyReplica(t *testing.T) {
	var rs []*Replica
	for i := range 3 {
		rs = append(rs, openSolo(t, filepath.Join(t.TempDir(), strconv.Itoa(i)), nil))
	}
	for i := range rs {
		// Changes before Watch do not wake it.
		if _, err := produceValues(t, rs[i], AcksAll, storage.NoProducer, "before"); err != nil {
			t.Fatal(err)
		}
		w := Watch(rs)
		ctx, cancel := context.WithCancel(context.Background())
		done := waitAsync(ctx, w, nil)
		mustNotReturn(t, done)
		if _, err := produceValues(t, rs[i], AcksAll, storage.NoProducer, "after"); err != nil {
			t.Fatal(err)
		}
		if !<-done {
			t.Fatalf("partition %d: the wait ended without a replica waking it", i)
		}
		cancel()
	}
}

// TestWatchEnds: the wait ends on the request's context, on its timeout,
// on a leadership change, and when a replica closes.
func TestWatchEnds(t *testing.T) {
	r := openSolo(t, t.TempDir(), nil)
	other := openSolo(t, t.TempDir(), nil)
	rs := []*Replica{other, r}

	ctx, cancel := context.WithCancel(context.Background())
	done := waitAsync(ctx, Watch(rs), nil)
	mustNotReturn(t, done)
	cancel()
	if <-done {
		t.Fatal("cancelled: reported a replica's wake")
	}

	timeout := make(chan time.Time, 1)
	done = waitAsync(context.Background(), Watch(rs), timeout)
	timeout <- time.Now()
	if <-done {
		t.Fatal("timed out: reported a replica's wake")
	}

	// Leadership lost: the leader state is dropped (as CheckLeadership does
	// when Raft says so).
	done = waitAsync(context.Background(), Watch(rs), nil)
	mustNotReturn(t, done)
	r.lead.mu.Lock()
	r.stopLeadingLocked()
	r.lead.mu.Unlock()
	if !<-done {
		t.Fatal("leadership lost: not woken")
	}
	if _, err := r.FetchBatches(0, 1<<20, true, ReadUncommitted); err == nil {
		t.Fatal("FetchBatches served after the leader state was dropped")
	}

	done = waitAsync(context.Background(), Watch(rs), nil)
	mustNotReturn(t, done)
	r.Close()
	if !<-done {
		t.Fatal("replica closed: not woken")
	}
}
