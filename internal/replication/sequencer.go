package replication

import (
	"container/list"
	"context"
	"sync"
	"time"

	"github.com/tapes-dev/tapes/internal/storage"
)

// sequencerWait bounds how long a batch waits for its predecessor: one that
// never comes (lost, or refused) must not stall the producer; the batch is
// then proposed anyway and the FSM refuses it if it is still out of order.
const sequencerWait = 250 * time.Millisecond

// maxSequencedProducers bounds how many producers the sequencer remembers
// in a term (about 100 bytes each: 4096 cost under half a MB per leader
// replica). Past it, the producer idle longest is forgotten. That costs
// latency at worst, never correctness: a forgotten producer's next batch
// starts from the FSM's position again (known), which is current once its
// proposed batches have applied, as they have after a long idle; if a batch
// of it did overtake a predecessor still in flight, it waits sequencerWait
// and is proposed anyway, and the FSM, the authority on sequences, refuses
// it if it is still out of order. Without a bound, a long-lived leader fed
// by a new producer id every minute grows the map for its whole term.
const maxSequencedProducers = 4096

// seqPos is where a producer's next batch should start.
type seqPos struct {
	epoch int32
	next  int32
}

// seqEntry is one remembered producer, an element of sequencer.lru.
type seqEntry struct {
	id  int64
	pos seqPos
}

// sequencer orders an idempotent producer's pipelined batches on the
// leader. Requests arrive on concurrent gRPC handlers, so batch 2 can reach
// raft.Apply before batch 1 and be refused as OUT_OF_ORDER after a whole
// Raft round. A batch whose base sequence is ahead of the next expected one
// waits (up to sequencerWait) until its predecessor has been proposed.
// Retries and duplicates (at or behind the expected sequence) never wait.
// Its methods are called from Produce's goroutines.
type sequencer struct {
	mu sync.Mutex
	// limit is the most producers remembered (maxSequencedProducers).
	limit int
	// term is the leadership term the positions belong to; a new term
	// starts from the FSM's state again. Guarded by mu.
	term uint64
	// next finds a producer's element of lru; lru is ordered by last use,
	// most recent first. Invariant: they hold the same producers, at most
	// limit. Guarded by mu.
	next map[int64]*list.Element
	lru  *list.List
	// changed is closed and replaced whenever a position advances.
	changed chan struct{}
}

func newSequencer(limit int) *sequencer {
	return &sequencer{limit: max(limit, 1), next: map[int64]*list.Element{}, lru: list.New(), changed: make(chan struct{})}
}

// ahead reports whether sequence a comes after b (sequences wrap at MaxInt32).
func ahead(a, b int32) bool { return int32(a-b) > 0 }

// termLocked starts term's positions afresh if they belong to another
// term. Caller holds mu.
func (s *sequencer) termLocked(term uint64) {
	if s.term != term {
		s.term = term
		clear(s.next)
		s.lru.Init()
	}
}

// getLocked returns the position of producer id and marks it used. Caller
// holds mu.
func (s *sequencer) getLocked(id int64) (seqPos, bool) {
	e, ok := s.next[id]
	if !ok {
		return seqPos{}, false
	}
	s.lru.MoveToFront(e)
	return e.Value.(*seqEntry).pos, true
}

// putLocked sets the position of producer id, marks it used and forgets
// the producers idle longest beyond limit. Caller holds mu.
func (s *sequencer) putLocked(id int64, pos seqPos) {
	if e, ok := s.next[id]; ok {
		e.Value.(*seqEntry).pos = pos
		s.lru.MoveToFront(e)
		return
	}
	s.next[id] = s.lru.PushFront(&seqEntry{id: id, pos: pos})
	for s.lru.Len() > s.limit {
		old := s.lru.Back()
		s.lru.Remove(old)
		delete(s.next, old.Value.(*seqEntry).id)
	}
}

// waitTurn returns when p's batch may be proposed. known gives the FSM's
// position for a producer this term does not remember. It blocks up to
// sequencerWait (or ctx) while the batch is ahead of its predecessor.
func (s *sequencer) waitTurn(ctx context.Context, term uint64, p storage.ProducerInfo, known func(int64) (seqPos, bool)) {
	timer := time.NewTimer(sequencerWait)
	defer timer.Stop()
	for {
		s.mu.Lock()
		s.termLocked(term)
		pos, ok := s.getLocked(p.ID)
		if !ok {
			if pos, ok = known(p.ID); ok {
				s.putLocked(p.ID, pos)
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
// advances the producer's position past the batch when the batch starts at
// or after it (or is the first this term saw, or of another epoch): the
// position is the end of the furthest batch proposed. Proposals reach
// raft.Apply and then proposed on their own goroutines, so two batches
// that gave up waiting and their late predecessor may report here in
// another order than Raft took them; advancing only for the exact expected
// batch then left the position at a batch already proposed, never sent
// again, and every later batch of the producer waited sequencerWait (a
// partition at 600-1,100 records/s until the epoch changed:
// TestSequencerPositionNeverFallsBehind). A position past a batch the FSM
// then refuses costs at most ordering help for its resend and the batches
// behind it (they do not wait; the FSM still refuses a gap), never a wait.
func (s *sequencer) proposed(term uint64, p storage.ProducerInfo, count int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.term != term {
		return
	}
	pos, ok := s.getLocked(p.ID)
	if ok && pos.epoch == p.Epoch && ahead(pos.next, p.BaseSequence) {
		return // a retry or duplicate of a batch behind the position: no advance
	}
	s.putLocked(p.ID, seqPos{epoch: p.Epoch, next: nextSequence(p.LastSequence(count))})
	close(s.changed)
	s.changed = make(chan struct{})
}
