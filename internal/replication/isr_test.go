package replication

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/metadata"
	"github.com/tapes-dev/tapes/internal/storage"
)

const testLag = 10 * time.Second

// leaderOf123 is broker 1's replica of an RF 3 partition, ready leader of
// term 1 with the given previous ISR, without Raft: the ISR and the acks
// waits only read the leader state.
func leaderOf123(previous ...metadata.BrokerID) *Replica {
	r := &Replica{cfg: Config{Topic: "t", LocalID: 1, Replicas: []metadata.BrokerID{1, 2, 3}, ReplicaLagTimeMax: testLag},
		stop: make(chan struct{})}
	r.lead.waiters = map[uint64]chan int64{}
	r.lead.mu.Lock()
	r.lead.barrierTerm = 1
	r.startProgressLocked()
	r.lead.readyTerm = 1
	r.graceLocked(time.Now(), previous)
	r.lead.mu.Unlock()
	return r
}

func (r *Replica) progress(id metadata.BrokerID, match uint64, tail bool) {
	r.lead.mu.Lock()
	r.progressLocked(id, match, tail, time.Now())
	r.lead.mu.Unlock()
}

// TestISRGraceOnlyForThePreviousISR: after a leader change only the
// replicas of the ISR the controller last recorded keep their place for a
// lag period; another replica enters only by catching up, and a replica
// whose match grows without reaching the tail does not.
func TestISRGraceOnlyForThePreviousISR(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := leaderOf123(1, 2)
		want := func(ids ...metadata.BrokerID) {
			t.Helper()
			if got := r.ISR(); !slices.Equal(got, ids) {
				t.Fatalf("ISR %v, want %v", got, ids)
			}
		}
		want(1, 2)
		r.progress(3, 40, false) // far behind: a full MaxAppendEntries batch
		want(1, 2)
		r.progress(3, 90, true) // reached the leader's tail
		want(1, 2, 3)
		time.Sleep(testLag)
		want(1, 2, 3) // at the limit, both still in
		time.Sleep(time.Millisecond)
		want(1) // neither caught up again; 2's grace is over
		r.progress(2, 90, true)
		want(1, 2)

		// A brand-new partition (no ISR recorded): nobody has grace.
		if got := leaderOf123().ISR(); !slices.Equal(got, []metadata.BrokerID{1}) {
			t.Fatalf("ISR of a new leader without a recorded ISR: %v", got)
		}
	})
}

// TestAwaitCopies: acks=all returns once min.insync.replicas members of
// the ISR hold the entry; a replica that holds it but is not in the ISR
// does not count; a shrinking ISR answers NOT_ENOUGH_REPLICAS_AFTER_APPEND
// exactly when the follower's lag runs out; the request's deadline answers
// REQUEST_TIMED_OUT; a lost leadership answers at once.
func TestAwaitCopies(t *testing.T) {
	await := func(r *Replica, ctx context.Context, index uint64, minISR int) <-chan error {
		ch := make(chan error, 1)
		go func() { ch <- r.awaitCopies(ctx, 1, index, minISR, 100) }()
		return ch
	}
	blocked := func(t *testing.T, ch <-chan error) {
		t.Helper()
		synctest.Wait()
		select {
		case err := <-ch:
			t.Fatalf("returned %v while copies were missing", err)
		default:
		}
	}
	t.Run("enough copies", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := leaderOf123(1, 2, 3)
			done := await(r, context.Background(), 5, 3)
			blocked(t, done)
			r.progress(2, 5, true)
			blocked(t, done)
			r.progress(3, 4, true) // not yet the entry
			blocked(t, done)
			r.progress(3, 7, true)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if r.lead.awaiting != 0 {
				t.Fatalf("%d waiters left", r.lead.awaiting)
			}
		})
	})
	t.Run("a copy outside the ISR does not count", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := leaderOf123(1, 2) // 3 was not in the ISR before the leader change
			done := await(r, context.Background(), 5, 2)
			r.progress(3, 6, false) // holds it, has not caught up to the tail
			blocked(t, done)
			r.progress(2, 5, false) // 2 is in the ISR (grace) and holds it
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("ISR shrinks", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := leaderOf123(1, 2, 3)
			start := time.Now()
			time.Sleep(time.Second)
			r.progress(2, 5, true) // 2 holds it; 3 is gone and never answers
			done := await(r, context.Background(), 5, 3)
			blocked(t, done)
			err := <-done
			if !kerr.Is(err, kerr.NotEnoughReplicasAfterAppend) {
				t.Fatalf("got %v, want %s", err, kerr.NotEnoughReplicasAfterAppend)
			}
			if d := time.Since(start); d != testLag+time.Nanosecond {
				t.Fatalf("answered after %v, want when 3's lag ran out (%v)", d, testLag)
			}
		})
	})
	t.Run("deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := leaderOf123(1, 2, 3)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if err := <-await(r, ctx, 5, 3); !kerr.Is(err, kerr.RequestTimedOut) {
				t.Fatalf("got %v, want %s", err, kerr.RequestTimedOut)
			}
		})
	})
	t.Run("leadership lost", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := leaderOf123(1, 2, 3)
			done := await(r, context.Background(), 5, 2)
			blocked(t, done)
			r.lead.mu.Lock()
			r.stopLeadingLocked()
			r.lead.mu.Unlock()
			if err := <-done; !kerr.Is(err, kerr.NotEnoughReplicasAfterAppend) {
				t.Fatalf("got %v, want %s", err, kerr.NotEnoughReplicasAfterAppend)
			}
		})
	})
}

// TestAcks1OffsetAfterShortEntry: an acks=1 batch stored behind an
// idempotent batch that has not applied yet learns its offset only when
// that one applies: a duplicate appends nothing, and the offset answered
// is the one the record gets. Plain batches behind plain ones are answered
// at once, at consecutive offsets.
func TestAcks1OffsetAfterShortEntry(t *testing.T) {
	r := leaderOf123(1, 2, 3)
	r.lead.base, r.lead.prefixEnd = 10, 10
	rec := []storage.Record{{Value: []byte("x")}, {Value: []byte("y")}}
	entry := func(index, waiter uint64, producer int64) *raft.Log {
		b := storage.EncodeBatch(rec)
		if producer >= 0 {
			b = storage.EncodeProducerBatch(storage.ProducerInfo{ID: producer}, rec)
		}
		return &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: encodeBatchCmd(waiter, b)}
	}
	wait := func(id uint64) chan int64 {
		ch := make(chan int64, 1)
		r.lead.mu.Lock()
		r.lead.waiters[id] = ch
		r.lead.mu.Unlock()
		return ch
	}
	answer := func(ch chan int64) (int64, bool) {
		select {
		case o := <-ch:
			return o, true
		default:
			return 0, false
		}
	}
	a, b, c := wait(1), wait(2), wait(3)
	r.stored([]*raft.Log{entry(5, 1, -1), entry(6, 0, 9), entry(7, 2, -1)})
	r.stored([]*raft.Log{entry(8, 3, -1)})
	if o, ok := answer(a); !ok || o != 10 {
		t.Fatalf("first plain batch: %d, %v; want 10 at once", o, ok)
	}
	if o, ok := answer(b); ok {
		t.Fatalf("a batch behind an unapplied idempotent one was answered %d", o)
	}
	r.appliedEntry(1, 5, 2)
	r.appliedEntry(1, 6, 0) // the idempotent batch was a duplicate
	if o, ok := answer(b); !ok || o != 12 {
		t.Fatalf("batch after the duplicate: %d, %v; want 12", o, ok)
	}
	if o, ok := answer(c); !ok || o != 14 {
		t.Fatalf("the next one: %d, %v; want 14", o, ok)
	}
	r.appliedEntry(1, 7, 2)
	r.appliedEntry(1, 8, 2)
	if st := &r.lead; st.base != 16 || len(st.pending) != 0 || st.pendingRecords != 0 || st.known != 0 {
		t.Fatalf("after every entry applied: base %d, %d pending (%d records), known %d", st.base, len(st.pending), st.pendingRecords, st.known)
	}
}
