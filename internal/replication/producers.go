package replication

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/recordbatch"
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
	// batches are the most recent appended batches of epoch, oldest first.
	// Invariant: at most maxProducerBatches; consecutive sequences; every
	// baseOffset is at or above the log start (DeleteBefore prunes the
	// rest). A marker that raises the epoch empties it.
	batches []seqBatch
	// last is the offset of the producer's last batch or marker: the entry
	// goes when retention deletes it (prune), as a rebuild from the log
	// start would not see the producer.
	last int64
	// txnFirst is the first offset of the producer's ongoing transaction in
	// this partition (its first transactional batch since its last
	// marker), -1 when none. Invariant: txnFirst >= 0 exactly when the
	// producer is in producerState.ongoing with that offset.
	txnFirst int64
	// coordEpoch is the coordinator epoch of the producer's last marker
	// here, -1 before any: a marker of an older one comes from a deposed
	// transaction coordinator (checkMarker).
	coordEpoch int32
}

// producerState is the idempotent producers' state of one partition. It is
// a pure function of the batches in the log: Apply changes it only when it
// appends a batch (record) or deletes segments (prune), and Open and Restore
// rebuild it by scanning the log's batch headers. So every replica holds the
// same state, whether it applied each entry live, replayed them after a
// restart, or was rebuilt from a snapshot. Only the FSM goroutine touches it.
type producerState struct {
	// mu guards everything below against the readers (position, lso,
	// aborted: request goroutines); the FSM goroutine is the only writer.
	mu sync.RWMutex
	m  map[int64]*producerEntry
	// ongoing is the first offset of each open transaction, by producer
	// id (see producerEntry.txnFirst).
	ongoing map[int64]int64
	// aborted are the aborted transactions whose marker is at or above the
	// log start, in marker order (so by LastOffset). Invariant: each
	// FirstOffset is at or above the log start (a transaction cut by
	// retention is rebuilt from its batches kept, see prune).
	aborted []AbortedTxn
	// end is the log end as of the last batch the state took in: the last
	// stable offset never passes it, so a reader that sees the log end
	// move before the state took the batch in never sees an open
	// transaction's batch as stable.
	end int64
}

func newProducerState() *producerState {
	return &producerState{m: map[int64]*producerEntry{}, ongoing: map[int64]int64{}}
}

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

// checkMarker decides whether marker mk of p may be appended: not with an
// epoch older than the producer's current one (INVALID_PRODUCER_EPOCH),
// nor from a coordinator epoch older than that of the producer's last
// marker here (TRANSACTION_COORDINATOR_FENCED: a deposed coordinator), as
// Kafka's partition answers the coordinator (ProducerAppendInfo.appendEndTxnMarker).
func (ps *producerState) checkMarker(p storage.ProducerInfo, mk *recordbatch.Marker) error {
	e := ps.m[p.ID]
	switch {
	case e == nil:
	case p.Epoch < e.epoch:
		return kerr.New(kerr.InvalidProducerEpoch, "marker for producer %d at epoch %d is older than the current epoch %d", p.ID, p.Epoch, e.epoch)
	case mk.CoordinatorEpoch < e.coordEpoch:
		return kerr.New(kerr.TransactionCoordinatorFenced, "marker for producer %d from coordinator epoch %d: a coordinator of epoch %d wrote its last marker here (this one is a zombie)",
			p.ID, mk.CoordinatorEpoch, e.coordEpoch)
	}
	return nil
}

// record takes in an appended batch (m, as Log.ScanBatches describes it;
// marker set for a control batch) and the log end after it. A
// transactional batch opens the producer's transaction here if none is
// open; a marker sets the producer's epoch (a newer one fences the older
// and forgets its sequences), closes the open transaction, and an abort
// adds it to the aborted index (from the transaction's first offset, or
// the marker's own when none was open, as Kafka's log does). FSM goroutine.
func (ps *producerState) record(m storage.BatchMeta, marker *recordbatch.Marker, end int64) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.end = end
	p := m.Producer
	if p.ID < 0 {
		return
	}
	e := ps.m[p.ID]
	if e == nil {
		e = &producerEntry{epoch: p.Epoch, txnFirst: -1, coordEpoch: -1}
		ps.m[p.ID] = e
	}
	e.last = m.BaseOffset
	if p.Epoch != e.epoch {
		e.epoch, e.batches = p.Epoch, nil
	}
	if marker != nil {
		first := m.BaseOffset
		if e.txnFirst >= 0 {
			first = e.txnFirst
		}
		if !marker.Commit {
			ps.aborted = append(ps.aborted, AbortedTxn{ProducerID: p.ID, FirstOffset: first, LastOffset: m.BaseOffset})
		}
		e.txnFirst, e.coordEpoch = -1, marker.CoordinatorEpoch
		delete(ps.ongoing, p.ID)
		return
	}
	if m.Attributes&attrTransactional != 0 && e.txnFirst < 0 {
		e.txnFirst = m.BaseOffset
		ps.ongoing[p.ID] = m.BaseOffset
	}
	e.batches = append(e.batches, seqBatch{firstSeq: p.BaseSequence, lastSeq: p.LastSequence(m.Count), baseOffset: m.BaseOffset})
	if len(e.batches) > maxProducerBatches {
		e.batches = e.batches[len(e.batches)-maxProducerBatches:]
	}
}

// attrTransactional is Kafka's attributes bit 4 (storage.BatchMeta).
const attrTransactional = 0x10

// cutByStart reports whether a new log start cuts through an open or an
// aborted transaction (its first offset below, its batches or marker
// above): the state then has to be rebuilt from the batches kept (prune
// cannot know where the transaction's first batch kept begins).
func (ps *producerState) cutByStart(logStart int64) bool {
	ps.mu.RLock()
	defer ps.mu.RUnlock()
	for _, first := range ps.ongoing {
		if first < logStart {
			return true
		}
	}
	for _, a := range ps.aborted {
		if a.FirstOffset < logStart && a.LastOffset >= logStart {
			return true
		}
	}
	return false
}

// prune forgets batches below the log start, producers with nothing left
// at or above it, and aborted transactions wholly below it. The caller has
// checked cutByStart first (else it rebuilds).
func (ps *producerState) prune(logStart int64) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for id, e := range ps.m {
		i := 0
		for i < len(e.batches) && e.batches[i].baseOffset < logStart {
			i++
		}
		e.batches = e.batches[i:]
		if e.last < logStart {
			delete(ps.m, id)
		}
	}
	i := 0
	for i < len(ps.aborted) && ps.aborted[i].LastOffset < logStart {
		i++
	}
	ps.aborted = slices.Clip(ps.aborted[i:])
}

// rebuild replaces the state with what the log's batch headers say,
// leaving out a batch that begins below the log start (prune would have).
// A control batch is read whole for its marker. The new state is built
// apart and swapped in at once, so a reader (the leader serving
// read_committed while retention rebuilds) never sees half of it; on an
// error the state is left as it was. FSM goroutine (or Open): nothing
// appends meanwhile.
func (ps *producerState) rebuild(l *storage.Log) error {
	start, end := l.StartOffset(), l.EndOffset()
	fresh := newProducerState()
	fresh.end = end
	var err error
	scanErr := l.ScanBatches(start, func(m storage.BatchMeta) bool {
		if m.BaseOffset < start {
			return true
		}
		var marker *recordbatch.Marker
		if m.Attributes&attrControl != 0 {
			if marker, err = readMarker(l, m); err != nil {
				return false
			}
		}
		fresh.record(m, marker, end)
		return true
	})
	if scanErr != nil {
		return scanErr
	}
	if err != nil {
		return err
	}
	ps.mu.Lock()
	ps.m, ps.ongoing, ps.aborted, ps.end = fresh.m, fresh.ongoing, fresh.aborted, fresh.end
	ps.mu.Unlock()
	return nil
}

// attrControl is Kafka's attributes bit 5 (storage.BatchMeta).
const attrControl = 0x20

// readMarker reads the control batch m describes and its marker.
func readMarker(l *storage.Log, m storage.BatchMeta) (*recordbatch.Marker, error) {
	bs, err := l.ReadBatches(m.BaseOffset, 0, m.BaseOffset+int64(m.Count), true)
	if err != nil {
		return nil, fmt.Errorf("read control batch at %d: %w", m.BaseOffset, err)
	}
	if len(bs) != 1 || bs[0].BaseOffset != m.BaseOffset {
		return nil, fmt.Errorf("%w: control batch at %d not found", storage.ErrCorruptBatch, m.BaseOffset)
	}
	return markerOf(bs[0].Batch)
}

// markerOf parses the marker of a control batch; failures wrap
// storage.ErrCorruptBatch (deterministic: every replica holds the bytes).
func markerOf(b storage.Batch) (*recordbatch.Marker, error) {
	kb, ok := b.Kafka()
	if !ok {
		return nil, fmt.Errorf("%w: a control batch that is not a Kafka batch", storage.ErrCorruptBatch)
	}
	mk, err := recordbatch.ParseMarker(kb)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", storage.ErrCorruptBatch, err)
	}
	return &mk, nil
}

// lso is the last stable offset: the first offset of the oldest open
// transaction, or the log end the state has taken in. Safe from any
// goroutine.
func (ps *producerState) lso() int64 {
	ps.mu.RLock()
	defer ps.mu.RUnlock()
	lso := ps.end
	for _, first := range ps.ongoing {
		lso = min(lso, first)
	}
	return lso
}

// abortedIn returns the aborted transactions overlapping [from, to): last
// offset (the marker) at or above from, first offset below to, as Kafka's
// transaction index answers a fetch. Safe from any goroutine.
func (ps *producerState) abortedIn(from, to int64) []AbortedTxn {
	ps.mu.RLock()
	defer ps.mu.RUnlock()
	i, _ := slices.BinarySearchFunc(ps.aborted, from, func(a AbortedTxn, from int64) int { return cmp.Compare(a.LastOffset, from) })
	var out []AbortedTxn
	for _, a := range ps.aborted[i:] {
		if a.FirstOffset < to {
			out = append(out, a)
		}
	}
	return out
}

// nextSequence follows Kafka: after MaxInt32 comes 0.
func nextSequence(last int32) int32 {
	if last == math.MaxInt32 {
		return 0
	}
	return last + 1
}
