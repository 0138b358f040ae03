package replication

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tapes-dev/tapes/internal/storage"
)

// position returns the remembered position of producer id, for tests.
func (s *sequencer) position(id int64) (seqPos, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.next[id]
	if !ok {
		return seqPos{}, false
	}
	return e.Value.(*seqEntry).pos, true
}

// TestSequencerOrdersPipelinedBatches: a batch that overtook its
// predecessor waits for it; retries never wait; a predecessor that never
// comes stalls nothing beyond sequencerWait. Time is the bubble's clock.
func TestSequencerOrdersPipelinedBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSequencer(maxSequencedProducers)
		known := func(int64) (seqPos, bool) { return seqPos{epoch: 0, next: 0}, true }
		order := make(chan int32, 3)
		second := storage.ProducerInfo{ID: 7, BaseSequence: 10}
		go func() {
			s.waitTurn(context.Background(), 1, second, known)
			order <- second.BaseSequence
			s.proposed(1, second, 10)
		}()
		synctest.Wait() // the second batch is now blocked in waitTurn
		select {
		case got := <-order:
			t.Fatalf("batch %d went ahead of its predecessor", got)
		default:
		}
		start := time.Now()
		first := storage.ProducerInfo{ID: 7, BaseSequence: 0}
		s.waitTurn(context.Background(), 1, first, known)
		if d := time.Since(start); d != 0 {
			t.Fatalf("the expected batch waited %v", d)
		}
		order <- first.BaseSequence
		s.proposed(1, first, 10)
		if a, b := <-order, <-order; a != 0 || b != 10 {
			t.Fatalf("proposed %d then %d, want 0 then 10", a, b)
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("the second batch was released %v after its predecessor", d)
		}
		// A retry of an earlier batch does not wait.
		start = time.Now()
		s.waitTurn(context.Background(), 1, first, known)
		if d := time.Since(start); d != 0 {
			t.Fatalf("a retry waited %v", d)
		}
		// A gap nobody fills: proposed after exactly sequencerWait; the
		// position moves past it, so nothing behind it waits again.
		start = time.Now()
		gap := storage.ProducerInfo{ID: 7, BaseSequence: 50}
		s.waitTurn(context.Background(), 1, gap, known)
		if d := time.Since(start); d != sequencerWait {
			t.Fatalf("a batch ahead of a gap waited %v, want %v", d, sequencerWait)
		}
		s.proposed(1, gap, 1)
		if pos, _ := s.position(7); pos.next != 51 {
			t.Fatalf("position after a proposal ahead of a gap = %d, want 51", pos.next)
		}
		start = time.Now()
		s.waitTurn(context.Background(), 1, storage.ProducerInfo{ID: 7, BaseSequence: 20}, known)
		if d := time.Since(start); d != 0 {
			t.Fatalf("a late batch behind the position waited %v", d)
		}
		// A cancelled request stops waiting at once.
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			s.waitTurn(ctx, 1, storage.ProducerInfo{ID: 7, BaseSequence: 100}, known)
			close(done)
		}()
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("a batch ahead of the position did not wait")
		default:
		}
		start = time.Now()
		cancel()
		<-done
		if d := time.Since(start); d != 0 {
			t.Fatalf("a cancelled wait took %v", d)
		}
		// A new term starts from the FSM's position again.
		s.waitTurn(context.Background(), 2, storage.ProducerInfo{ID: 7, BaseSequence: 0}, known)
		if pos, _ := s.position(7); pos.next != 0 {
			t.Fatalf("new term kept the old position %d", pos.next)
		}
	})
}

// TestSequencerForgetsIdleProducers: the sequencer remembers at most its
// limit of producers, forgetting the one idle longest; a forgotten
// producer starts again from the FSM's position and is still ordered.
func TestSequencerForgetsIdleProducers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSequencer(3)
		fsmPos := map[int64]seqPos{}
		known := func(id int64) (seqPos, bool) { p, ok := fsmPos[id]; return p, ok }
		send := func(id int64, seq int32, n int) {
			p := storage.ProducerInfo{ID: id, BaseSequence: seq}
			s.waitTurn(context.Background(), 1, p, known)
			s.proposed(1, p, n)
		}
		for id := int64(1); id <= 3; id++ {
			send(id, 0, 5)
		}
		send(1, 5, 5) // producer 1 is now the most recently used
		send(4, 0, 5) // one too many: producer 2, idle longest, is forgotten
		for id, want := range map[int64]bool{1: true, 2: false, 3: true, 4: true} {
			if _, ok := s.position(id); ok != want {
				t.Errorf("producer %d remembered: %v, want %v", id, ok, want)
			}
		}
		if s.lru.Len() != 3 || len(s.next) != 3 {
			t.Fatalf("remembers %d (%d in the map), limit 3", s.lru.Len(), len(s.next))
		}
		// Producer 2's batches have applied: the FSM says 5 comes next. Its
		// batch 10 overtakes batch 5 and waits for it, as before.
		fsmPos[2] = seqPos{next: 5}
		released := make(chan struct{})
		go func() {
			send(2, 10, 5)
			close(released)
		}()
		synctest.Wait()
		select {
		case <-released:
			t.Fatal("a forgotten producer's batch went ahead of its predecessor")
		default:
		}
		start := time.Now()
		send(2, 5, 5)
		<-released
		if d := time.Since(start); d != 0 {
			t.Fatalf("released %v after its predecessor", d)
		}
		if pos, _ := s.position(2); pos.next != 15 {
			t.Fatalf("producer 2 at %d, want 15", pos.next)
		}
	})
}

// TestSequencerPositionNeverFallsBehind: proposals of one producer can
// reach proposed in another order than they reached raft.Apply (two
// batches that timed out in waitTurn and the late predecessor all call
// Apply at once). Measured on 2026-12-02: batches 12580 and 12728 timed out
// waiting for 12432, Raft took 12432, 12580, 12728 (all appended), but
// proposed saw 12728, 12432, 12580, and the position stopped at 12728, a
// batch never sent again: every later batch of that producer waited
// sequencerWait, was proposed in timeout order and often refused as out of
// order, and the partition crawled (600-1,100 records/s) until the
// producer's epoch changed. The position is the end of the furthest batch
// proposed, whatever the order the calls arrive in.
func TestSequencerPositionNeverFallsBehind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSequencer(maxSequencedProducers)
		known := func(int64) (seqPos, bool) { return seqPos{}, true }
		batch := func(seq int32) storage.ProducerInfo { return storage.ProducerInfo{ID: 7, BaseSequence: seq} }
		// 10 and 20 overtook 0 and gave up waiting for it.
		for _, seq := range []int32{10, 20} {
			start := time.Now()
			s.waitTurn(context.Background(), 1, batch(seq), known)
			if d := time.Since(start); d != sequencerWait {
				t.Fatalf("batch %d ahead of a gap waited %v, want %v", seq, d, sequencerWait)
			}
		}
		s.waitTurn(context.Background(), 1, batch(0), known)
		// Raft appended 0, 10, 20; proposed hears of 20, 0, 10.
		for _, seq := range []int32{20, 0, 10} {
			s.proposed(1, batch(seq), 10)
		}
		if pos, _ := s.position(7); pos.next != 30 {
			t.Fatalf("position after batches 0-29 were proposed = %d, want 30", pos.next)
		}
		// The pipeline goes on without waiting.
		for seq := int32(30); seq < 80; seq += 10 {
			start := time.Now()
			s.waitTurn(context.Background(), 1, batch(seq), known)
			if d := time.Since(start); d != 0 {
				t.Fatalf("batch %d, next in line, waited %v", seq, d)
			}
			s.proposed(1, batch(seq), 10)
		}
	})
}
