package replication

import (
	"context"
	"sync"
	"time"

	"github.com/tapes-dev/tapes/internal/storage"
)

// sequencerWait bounds how long a batch waits for its predecessor: one that
// never comes (lost, or refused) must not stall the producer; the batch is
// then proposed anyway and the FSM refuses it if it is still out of order.
const sequencerWait = 250 * time.Millisecond

// seqPos is where a producer's next batch should start.
type seqPos struct {
	epoch int32
	next  int32
}

// sequencer orders an idempotent producer's pipelined batches on the
// leader. Requests arrive on concurrent gRPC handlers, so batch 2 can reach
// raft.Apply before batch 1 and be refused as OUT_OF_ORDER after a whole
// Raft round. A batch whose base sequence is ahead of the next expected one
// waits (up to sequencerWait) until its predecessor has been proposed.
// Retries and duplicates (at or behind the expected sequence) never wait.
type sequencer struct {
	mu sync.Mutex
	// term is the leadership term the positions belong to; a new term
	// starts from the FSM's state again. Guarded by mu.
	term uint64
	next map[int64]seqPos
	// changed is closed and replaced whenever a position advances.
	changed chan struct{}
}

func newSequencer() *sequencer {
	return &sequencer{next: map[int64]seqPos{}, changed: make(chan struct{})}
}

// ahead reports whether sequence a comes after b (sequences wrap at MaxInt32).
func ahead(a, b int32) bool { return int32(a-b) > 0 }

// waitTurn returns when p's batch may be proposed. known gives the FSM's
// position for a producer this term has not seen yet.
func (s *sequencer) waitTurn(ctx context.Context, term uint64, p storage.ProducerInfo, known func(int64) (seqPos, bool)) {
	timer := time.NewTimer(sequencerWait)
	defer timer.Stop()
	for {
		s.mu.Lock()
		if s.term != term {
			s.term, s.next = term, map[int64]seqPos{}
		}
		pos, ok := s.next[p.ID]
		if !ok {
			if pos, ok = known(p.ID); ok {
				s.next[p.ID] = pos
			}
		}
		if !ok || pos.epoch != p.Epoch || !ahead(p.BaseSequence, pos.next) {
			s.mu.Unlock()
			return
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-timer.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// proposed records that p's batch of count records went to raft.Apply. It
// advances the producer's position when the batch was the expected one (or
// the first this term saw).
func (s *sequencer) proposed(term uint64, p storage.ProducerInfo, count int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.term != term {
		return
	}
	pos, ok := s.next[p.ID]
	if ok && pos.epoch == p.Epoch && pos.next != p.BaseSequence {
		return // out of order after a timeout, or a retry: no advance
	}
	s.next[p.ID] = seqPos{epoch: p.Epoch, next: nextSequence(p.LastSequence(count))}
	close(s.changed)
	s.changed = make(chan struct{})
}
