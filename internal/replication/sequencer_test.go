package replication

import (
	"context"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/storage"
)

// TestSequencerOrdersPipelinedBatches: a batch that overtook its
// predecessor waits for it; retries never wait; a predecessor that never
// comes stalls nothing beyond sequencerWait.
func TestSequencerOrdersPipelinedBatches(t *testing.T) {
	s := newSequencer()
	known := func(int64) (seqPos, bool) { return seqPos{epoch: 0, next: 0}, true }
	order := make(chan int32, 3)
	second := storage.ProducerInfo{ID: 7, BaseSequence: 10}
	go func() {
		s.waitTurn(context.Background(), 1, second, known)
		order <- second.BaseSequence
		s.proposed(1, second, 10)
	}()
	time.Sleep(50 * time.Millisecond) // the second batch is now waiting
	first := storage.ProducerInfo{ID: 7, BaseSequence: 0}
	s.waitTurn(context.Background(), 1, first, known)
	order <- first.BaseSequence
	s.proposed(1, first, 10)
	if a, b := <-order, <-order; a != 0 || b != 10 {
		t.Fatalf("proposed %d then %d, want 0 then 10", a, b)
	}
	// A retry of an earlier batch does not wait.
	start := time.Now()
	s.waitTurn(context.Background(), 1, first, known)
	if d := time.Since(start); d > sequencerWait/2 {
		t.Fatalf("a retry waited %v", d)
	}
	// A gap nobody fills: proposed after sequencerWait, and no advance.
	start = time.Now()
	gap := storage.ProducerInfo{ID: 7, BaseSequence: 50}
	s.waitTurn(context.Background(), 1, gap, known)
	if d := time.Since(start); d < sequencerWait {
		t.Fatalf("a batch ahead of a gap waited only %v", d)
	}
	s.proposed(1, gap, 1)
	if pos := s.next[7]; pos.next != 20 {
		t.Fatalf("position after an out-of-order proposal = %d, want 20", pos.next)
	}
	// A new term starts from the FSM's position again.
	s.waitTurn(context.Background(), 2, storage.ProducerInfo{ID: 7, BaseSequence: 0}, known)
	if pos := s.next[7]; pos.next != 0 {
		t.Fatalf("new term kept the old position %d", pos.next)
	}
}
