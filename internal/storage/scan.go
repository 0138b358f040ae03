package storage

import (
	"errors"
	"fmt"
	"os"
)

// BatchMeta is what the headers of a stored batch tell, without its records.
type BatchMeta struct {
	BaseOffset   int64  // offset of the batch's first record
	Count        int    // number of records; the last is at BaseOffset+Count-1
	RaftIndex    uint64 // index of the Raft entry that carried the batch
	MaxTimestamp int64  // largest record timestamp
	Producer     ProducerInfo
	// Attributes are a Kafka batch's (storage version 3): transactional
	// (bit 4), control (bit 5); 0 for versions 1 and 2.
	Attributes int16
}

// LastOffset is the offset of the batch's last record.
func (m BatchMeta) LastOffset() int64 { return m.BaseOffset + int64(m.Count) - 1 }

// ScanBatches calls fn with the headers of every stored batch whose last
// offset is at or above from, in offset order, until fn returns false or the
// batches run out. A from below StartOffset scans from StartOffset, so the
// first batch may begin below it (when the log start lies inside that batch);
// a from at or above EndOffset calls fn never. The scan ends at the
// EndOffset of when it was called: batches appended meanwhile are not
// visited.
//
// Cost: no record is read or decoded. Per batch, ScanBatches makes one pread
// of at most 90 bytes (the frame header and the batch's fixed header) and
// skips the payload; finding the first batch costs an offset index lookup and
// a few more such preads. It checks the frame header's CRC, the batch
// header's CRC (format version 2: version 1 has no producer fields and no
// header CRC), that offsets follow from batch to batch and that the Raft
// indexes increase; it does not check the records nor the CRC of whole
// batches (Read does). Damage gives an error that wraps ErrCorruptBatch,
// after fn has seen the batches before it.
//
// Like Read, it may run concurrently with every other method and holds the
// log's read lock only to copy positions, never while calling fn, so fn may
// call the Log's methods (even Append) and appends are not held up. Each
// batch fn sees begins where the one before ended, with one exception: when
// retention deletes the segment being scanned, the scan goes on from the new
// StartOffset, skipping the batches deleted (and ends if the new start is
// past where it would have ended). When a Restore replaces the log, the scan
// goes on in the restored log after the last batch fn has seen. (The Raft FSM,
// which makes those changes itself, sees neither.)
func (l *Log) ScanBatches(from int64, fn func(BatchMeta) bool) error {
	sc := batchScan{from: from, end: -1, fn: fn}
	for attempt := 0; ; attempt++ {
		before := sc.from
		err := l.scanBatches(&sc)
		if err == nil || sc.stopped || !errors.Is(err, os.ErrClosed) {
			return err
		}
		// A segment was deleted or swapped under the scan: look again from
		// where it was, as long as it makes progress.
		if sc.from > before {
			attempt = 0
		}
		if attempt >= 3 {
			return err
		}
	}
}

// batchScan is the progress of a ScanBatches.
type batchScan struct {
	from    int64 // the next batch fn sees ends at or above from
	end     int64 // EndOffset when the scan began; -1 until then
	fn      func(BatchMeta) bool
	stopped bool // fn returned false
	buf     [framePreambleSize]byte
}

func (l *Log) scanBatches(sc *batchScan) error {
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		return ErrClosed
	}
	if sc.end < 0 {
		sc.end = l.endOffset()
	}
	from, end := max(sc.from, l.logStart), min(sc.end, l.endOffset())
	if from >= end {
		l.mu.RUnlock()
		return nil
	}
	segs := l.segs
	i := segmentIndex(segs, from)
	v := segs[i].view()
	l.mu.RUnlock()

	pos, p, err := v.seek(from, &sc.buf)
	if err != nil {
		return err
	}
	for {
		next := p.nextOffset()
		sc.from = next
		if !sc.fn(p.meta()) {
			sc.stopped = true
			return nil
		}
		if next >= end {
			return nil
		}
		raft := p.raftIndex
		pos += p.size()
		for pos >= v.size {
			if next != v.next {
				return fmt.Errorf("%w: %s: frames end at offset %d, the segment at %d", ErrCorruptBatch, v.seg.logPath, next, v.next)
			}
			if i++; i >= len(segs) {
				return nil
			}
			l.mu.RLock()
			v = segs[i].view()
			l.mu.RUnlock()
			pos = 0
		}
		if p, err = readPreamble(v.seg.f, pos, v.size, &sc.buf); err != nil {
			return fmt.Errorf("%s: %w", v.seg.logPath, err)
		}
		if p.baseOffset != next || p.raftIndex <= raft {
			return fmt.Errorf("%w: %s: frame at %d has offset %d, Raft index %d after offset %d, Raft index %d",
				ErrCorruptBatch, v.seg.logPath, pos, p.baseOffset, p.raftIndex, next, raft)
		}
	}
}

// meta is what p tells of its batch.
func (p preamble) meta() BatchMeta {
	return BatchMeta{
		BaseOffset:   p.baseOffset,
		Count:        p.batch.Count(),
		RaftIndex:    p.raftIndex,
		MaxTimestamp: p.batch.MaxTimestamp(),
		Producer:     p.batch.Producer(),
		Attributes:   p.batch.Attributes(),
	}
}
