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
		// A gap nobody fills: proposed after exactly sequencerWait, and no advance.
		start = time.Now()
		gap := storage.ProducerInfo{ID: 7, BaseSequence: 50}
		s.waitTurn(context.Background(), 1, gap, known)
		if d := time.Since(start); d != sequencerWait {
			t.Fatalf("a batch ahead of a gap waited %v, want %v", d, sequencerWait)
		}
		s.proposed(1, gap, 1)
		if pos, _ := s.position(7); pos.next != 20 {
			t.Fatalf("position after an out-of-order proposal = %d, want 20", pos.next)
		}
		// A cancelled request stops waiting at once.
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			s.waitTurn(ctx, 1, gap, known)
			close(done)
		}()
		synctest.Wait()
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
