package storage

import (
	"errors"
	"fmt"
	"os"
)

// StoredBatch is one batch as the log holds it, with the offset of its first
// record (a Batch carries none).
type StoredBatch struct {
	BaseOffset int64
	Batch      Batch
}

// NextOffset is the offset after the batch's last record.
func (s StoredBatch) NextOffset() int64 { return s.BaseOffset + int64(s.Batch.Count()) }

// ReadBatches returns whole stored batches, in offset order, as Kafka's Fetch
// returns them: the first is the batch holding offset (it may begin below
// offset, even below StartOffset when the log start lies inside it), then
// the batches after it. Only batches that end at or below upTo are returned:
// upTo is the caller's bound (the high watermark), lowered to EndOffset.
// Batches are added while their sizes (len(Batch)) in total stay within
// maxBytes; when minOne is set the first batch is returned even if it alone
// is larger (KIP-74: a consumer must be able to make progress), when not, a
// first batch larger than maxBytes gives none.
//
// offset == upTo gives no batches and no error; an offset below StartOffset
// or above EndOffset gives ErrOffsetOutOfRange (wrapped).
//
// Cost: no record is decoded. Per batch, one pread of its frame and batch
// headers (readPreamble) and, for a batch returned, one pread of the batch
// and a CRC32C over it; a batch that does not fit is not read. Finding the
// first batch costs an offset index lookup and a few header preads.
//
// Like Read it may run concurrently with every other method: it holds the
// read lock only to copy segment positions. A damaged batch gives an error
// wrapping ErrCorruptBatch unless batches before it were read, which are then
// returned (the next call reports the damage).
func (l *Log) ReadBatches(offset int64, maxBytes int, upTo int64, minOne bool) ([]StoredBatch, error) {
	for attempt := 0; ; attempt++ {
		out, err := l.readBatches(offset, maxBytes, upTo, minOne)
		if errors.Is(err, os.ErrClosed) && attempt < 3 {
			continue // a segment was deleted or swapped during the read: look again
		}
		return out, err
	}
}

func (l *Log) readBatches(offset int64, maxBytes int, upTo int64, minOne bool) ([]StoredBatch, error) {
	var (
		out   []StoredBatch
		total int
	)
	err := l.walk(offset, upTo, func(v segView, pos int64, p preamble) (bool, error) {
		size := p.batchLen()
		if p.nextOffset() > upTo || total+size > maxBytes && (len(out) > 0 || !minOne) {
			return false, nil
		}
		b, err := readBatch(v.seg.f, pos, p)
		if err != nil {
			return false, fmt.Errorf("%s: %w", v.seg.logPath, err)
		}
		out = append(out, StoredBatch{BaseOffset: p.baseOffset, Batch: b})
		total += size
		return true, nil
	})
	if err != nil && len(out) > 0 {
		return out, nil // what was read before the error: the next call reports it
	}
	return out, err
}
