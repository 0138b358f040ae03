package group

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// What the coordinators of internal topics (this package's for
// __consumer_offsets, internal/txn's for __transaction_state) share to
// read their partition and to compact it. Each keeps its own fold (which
// records decide its state); the steps around it are CompactLog's:
//
//  1. read the partition from its log start to its high watermark, folding
//     every record in (writes go on);
//  2. hold off every write of the coordinator, read what was committed
//     since 1 into the same fold, and append the kept records at the end
//     of the partition (acks=all, in batches), the first at offset X (the
//     high watermark when nothing is kept);
//  3. DeleteRecords(X): every replica moves its log start to X and drops
//     the segments wholly below it; then writes resume.
//
// Reading the partition from X then rebuilds exactly the state reading it
// from the old log start did: everything below X was folded in 1 and 2,
// and no write of the coordinator can land between the read of 2 and X.

// ScanLog reads l from offset from (its log start, if later) up to the
// high watermark it had when the scan began and calls fn, in order, with
// every entry read. It returns how many entries it read and the offset
// after the last; an error names the offset (the caller, the partition).
func ScanLog(ctx context.Context, l Log, from int64, fn func(Record)) (n int, end int64, err error) {
	offset, hw := from, int64(-1)
	for hw < 0 || offset < hw {
		recs, next, h, err := l.Read(ctx, offset)
		if err != nil {
			return n, offset, fmt.Errorf("at %d: %w", offset, err)
		}
		if hw < 0 {
			hw = h
		}
		for _, r := range recs {
			n++
			fn(r)
		}
		if next <= offset && len(recs) == 0 {
			break // nothing more below the high watermark
		}
		offset = next
	}
	return n, offset, nil
}

// CompactBatchRecords and CompactBatchBytes bound one batch of records a
// compaction rewrites (well under max.message.bytes).
const (
	CompactBatchRecords = 1000
	CompactBatchBytes   = 256 << 10
)

// Batches splits recs into batches of at most CompactBatchRecords records
// and about CompactBatchBytes bytes.
func Batches(recs []Record) func(yield func([]Record) bool) {
	return func(yield func([]Record) bool) {
		for len(recs) > 0 {
			i, size := 0, 0
			for i < len(recs) && i < CompactBatchRecords && (i == 0 || size+len(recs[i].Key)+len(recs[i].Value) <= CompactBatchBytes) {
				size += len(recs[i].Key) + len(recs[i].Value)
				i++
			}
			if !yield(recs[:i]) {
				return
			}
			recs = recs[i:]
		}
	}
}

// CompactSchedule counts a partition's records from its log start and
// says when to compact it: once it holds `after` records (0: never) and,
// after a compaction, `after` more than it kept and twice as many as it
// kept. Safe for concurrent use.
type CompactSchedule struct {
	mu sync.Mutex
	// records: the partition's records from its log start; at: the count
	// at which compaction is next tried; running: one runs.
	records, at, after int64
	running            bool
}

// Loaded starts the count: the partition holds records from its log
// start, and is compacted from after records on (0: never).
func (c *CompactSchedule) Loaded(records, after int64) {
	c.mu.Lock()
	c.records, c.at, c.after = records, after, after
	c.mu.Unlock()
}

// Wrote counts n records appended (and committed).
func (c *CompactSchedule) Wrote(n int) {
	c.mu.Lock()
	c.records += int64(n)
	c.mu.Unlock()
}

// Due reports whether a compaction should start now and, if so, marks it
// running: the caller then runs CompactLog, which ends it.
func (c *CompactSchedule) Due() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	due := c.after > 0 && !c.running && c.records >= c.at
	if due {
		c.running = true
	}
	return due
}

// Compaction is one coordinator's part of a compaction (see above).
type Compaction struct {
	Log      Log
	Schedule *CompactSchedule
	// Scan reads the partition from offset from up to its high watermark
	// into the fold; it returns how many records it read and the offset
	// after the last.
	Scan func(ctx context.Context, from int64) (n int, end int64, err error)
	// Len is how many records the fold keeps; Kept returns them, in the
	// order they are rewritten.
	Len  func() int
	Kept func() []Record
	// Hold holds off every write of the coordinator to the partition
	// (Append's excepted) from the second scan until the log start moved.
	Hold sync.Locker
	// Append writes one batch with acks=all and returns its first offset.
	Append func(ctx context.Context, batch []Record) (int64, error)
	// BeforeDelete, when set, runs once the kept records are written (the
	// first at first; [end, first) is what landed after the held read),
	// before the log start moves to first.
	BeforeDelete func(ctx context.Context, end, first int64) error
}

// Compacted is what CompactLog did.
type Compacted struct {
	// Read is how many records were read; Kept how many were rewritten,
	// -1 when the partition was not compacted (fewer than half of its
	// records superseded, or an error).
	Read, Kept int
	// LogStart is the partition's new log start.
	LogStart int64
	// Held is how long the coordinator's writes were held off.
	Held time.Duration
}

// CompactLog runs one compaction of c's partition: when fewer than half
// of its records are superseded it only counts them. Either way it ends
// the schedule's run and sets when the next is tried.
func CompactLog(ctx context.Context, c Compaction) (res Compacted, err error) {
	res.Kept = -1
	sch := c.Schedule
	n, end, err := c.Scan(ctx, 0)
	keys := c.Len()
	count := int64(-1) // the partition's record count afterwards, -1: unknown
	defer func() {
		sch.mu.Lock()
		defer sch.mu.Unlock()
		sch.running = false
		sch.at = max(int64(n)+sch.after, 2*int64(keys))
		if res.Kept >= 0 {
			sch.at = max(int64(res.Kept)+sch.after, 2*int64(res.Kept))
		}
		if count >= 0 {
			sch.records = count
		}
	}()
	if err != nil {
		return res, fmt.Errorf("reading the partition: %w", err)
	}
	res.Read = n
	if n < 2*keys || n == 0 {
		count = int64(n)
		return res, nil // mostly live records: wait for more
	}

	c.Hold.Lock()
	defer c.Hold.Unlock()
	held := time.Now()
	defer func() { res.Held = time.Since(held) }()
	tail, end, err := c.Scan(ctx, end)
	if err != nil {
		return res, fmt.Errorf("reading the partition: %w", err)
	}
	n += tail
	res.Read, count = n, int64(n)
	kept := c.Kept()
	first, wrote := end, false
	for batch := range Batches(kept) {
		base, err := c.Append(ctx, batch)
		if err != nil {
			return res, fmt.Errorf("rewriting the latest records: %w", err)
		}
		count += int64(len(batch))
		if !wrote {
			first, wrote = base, true
		}
	}
	if c.BeforeDelete != nil {
		if err := c.BeforeDelete(ctx, end, first); err != nil {
			return res, err
		}
	}
	logStart, err := c.Log.DeleteRecords(ctx, first)
	if err != nil {
		return res, fmt.Errorf("moving the log start to %d: %w", first, err)
	}
	res.Kept, res.LogStart, count = len(kept), logStart, int64(len(kept))
	return res, nil
}

// LogCompaction logs what CompactLog did to partition p of topic, begun
// at start.
func LogCompaction(log *slog.Logger, topic string, p int32, start time.Time, res Compacted, err error) {
	switch {
	case err != nil:
		log.Warn("compaction failed", "topic", topic, "partition", p, "err", err)
	case res.Kept >= 0:
		log.Info("compacted", "topic", topic, "partition", p, "records", res.Read, "kept", res.Kept, "log_start", res.LogStart,
			"took", time.Since(start).Round(time.Millisecond), "writes_held", res.Held.Round(time.Millisecond))
	}
}
