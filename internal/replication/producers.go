package replication

import (
	"math"
	"sync"

	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/storage"
)

// maxProducerBatches is how many recent batches per producer the state
// remembers for deduplication, as Kafka does (max.in.flight 5).
const maxProducerBatches = 5

// seqBatch is one appended batch of an idempotent producer.
type seqBatch struct {
	firstSeq, lastSeq int32
	baseOffset        int64
}

// producerEntry is one producer's state in one partition.
type producerEntry struct {
	epoch int32
	// batches are the most recent appended batches, oldest first. Invariant:
	// at most maxProducerBatches; consecutive sequences; every baseOffset is
	// at or above the log start (DeleteBefore prunes the rest).
	batches []seqBatch
}

// producerState is the idempotent producers' state of one partition. It is
// a pure function of the batches in the log: Apply changes it only when it
// appends a batch (record) or deletes segments (prune), and Open and Restore
// rebuild it by scanning the log's batch headers. So every replica holds the
// same state, whether it applied each entry live, replayed them after a
// restart, or was rebuilt from a snapshot. Only the FSM goroutine touches it.
type producerState struct {
	// mu guards m against position (read by request goroutines); the FSM
	// goroutine is the only writer.
	mu sync.RWMutex
	m  map[int64]*producerEntry
}

func newProducerState() *producerState { return &producerState{m: map[int64]*producerEntry{}} }

// check decides what to do with a batch of count records from p:
// append it (nil error, dup false), answer it as the duplicate of the batch
// at dupBase, or refuse it (INVALID_PRODUCER_EPOCH for a stale epoch,
// OUT_OF_ORDER_SEQUENCE_NUMBER for a gap or a partial overlap). A producer
// the state does not know (new, or whose batches retention deleted) may
// start at any sequence.
func (ps *producerState) check(p storage.ProducerInfo, count int) (dupBase int64, dup bool, err error) {
	e := ps.m[p.ID]
	if e == nil {
		return 0, false, nil
	}
	first, last := p.BaseSequence, p.LastSequence(count)
	switch {
	case p.Epoch < e.epoch:
		return 0, false, kerr.New(kerr.InvalidProducerEpoch, "producer %d epoch %d is older than the current epoch %d", p.ID, p.Epoch, e.epoch)
	case p.Epoch > e.epoch:
		if first != 0 {
			return 0, false, kerr.New(kerr.OutOfOrderSequenceNumber, "producer %d starts epoch %d at sequence %d, want 0", p.ID, p.Epoch, first)
		}
		return 0, false, nil
	}
	for _, b := range e.batches {
		if b.firstSeq == first && b.lastSeq == last {
			return b.baseOffset, true, nil
		}
	}
	if n := len(e.batches); n > 0 {
		if want := nextSequence(e.batches[n-1].lastSeq); first != want {
			return 0, false, kerr.New(kerr.OutOfOrderSequenceNumber, "producer %d epoch %d sent sequence %d, expected %d", p.ID, p.Epoch, first, want)
		}
	}
	return 0, false, nil
}

// position returns where producer id's next batch should start, for the
// leader's sequencer. Safe from any goroutine.
func (ps *producerState) position(id int64) (seqPos, bool) {
	ps.mu.RLock()
	defer ps.mu.RUnlock()
	e := ps.m[id]
	if e == nil || len(e.batches) == 0 {
		return seqPos{}, false
	}
	return seqPos{epoch: e.epoch, next: nextSequence(e.batches[len(e.batches)-1].lastSeq)}, true
}

// record notes an appended batch.
func (ps *producerState) record(p storage.ProducerInfo, count int, baseOffset int64) {
	if p.ID < 0 {
		return
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	e := ps.m[p.ID]
	if e == nil || p.Epoch != e.epoch {
		e = &producerEntry{epoch: p.Epoch}
		ps.m[p.ID] = e
	}
	e.batches = append(e.batches, seqBatch{firstSeq: p.BaseSequence, lastSeq: p.LastSequence(count), baseOffset: baseOffset})
	if len(e.batches) > maxProducerBatches {
		e.batches = e.batches[len(e.batches)-maxProducerBatches:]
	}
}

// prune forgets batches below the log start, and producers with none left.
func (ps *producerState) prune(logStart int64) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for id, e := range ps.m {
		i := 0
		for i < len(e.batches) && e.batches[i].baseOffset < logStart {
			i++
		}
		e.batches = e.batches[i:]
		if len(e.batches) == 0 {
			delete(ps.m, id)
		}
	}
}

// rebuild replaces the state with what the log's batch headers say,
// leaving out a batch that begins below the log start (prune would have).
func (ps *producerState) rebuild(l *storage.Log) error {
	ps.mu.Lock()
	ps.m = map[int64]*producerEntry{}
	ps.mu.Unlock()
	start := l.StartOffset()
	return l.ScanBatches(start, func(m storage.BatchMeta) bool {
		if m.BaseOffset >= start {
			ps.record(m.Producer, m.Count, m.BaseOffset)
		}
		return true
	})
}

// nextSequence follows Kafka: after MaxInt32 comes 0.
func nextSequence(last int32) int32 {
	if last == math.MaxInt32 {
		return 0
	}
	return last + 1
}
