package storage

import (
	"fmt"
	"time"
)

// RetentionPoint computes where retention would move the log start: whole
// segments are deleted oldest first, never the active one, while either
//   - the segment's largest timestamp is older than now - retentionMs, or
//   - the log without the segment is still at least retentionBytes long
//     (as Kafka's retention.bytes: the log stays at or above the limit).
//
// A negative retentionMs or retentionBytes means no limit of that kind.
// newStart is the base offset of the first segment kept; ok is false when
// nothing would be deleted. The leader computes the point and replicates it
// through Raft as a DeleteBefore, so that every replica cuts the same place.
func (l *Log) RetentionPoint(now time.Time, retentionMs, retentionBytes int64) (newStart int64, ok bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return 0, false
	}
	var total int64
	for _, s := range l.segs {
		total += s.size
	}
	cutoff := now.UnixMilli() - retentionMs
	drop := 0
	for _, s := range l.segs[:len(l.segs)-1] {
		byTime := retentionMs >= 0 && s.maxTs < cutoff
		bySize := retentionBytes >= 0 && total-s.size >= retentionBytes
		if !byTime && !bySize {
			break
		}
		total -= s.size
		drop++
	}
	if drop == 0 {
		return 0, false
	}
	return l.segs[drop].base, true
}

// DeleteBefore moves the log start offset to max(StartOffset(), min(offset,
// EndOffset())) and deletes every segment whose records all lie below it;
// it returns how many. raftIndex is the index of the Raft entry carrying the
// command: at or below LastRaftIndex nothing changes and the error wraps
// ErrAlreadyApplied, so re-applying after a restart is a no-op.
//
// The new start is made durable first (after a Sync, so that no record below
// raftIndex can be lost by a crash), then files are deleted; Open finishes a
// deletion a crash interrupted. When every record is deleted an empty active
// segment at EndOffset remains, so that EndOffset survives a restart.
func (l *Log) DeleteBefore(offset int64, raftIndex uint64) (deleted int, err error) {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.closed {
		return 0, ErrClosed
	}
	if raftIndex <= l.lastRaftIndex {
		return 0, fmt.Errorf("delete before %d at Raft index %d, last applied %d: %w", offset, raftIndex, l.lastRaftIndex, ErrAlreadyApplied)
	}
	start := max(l.logStart, min(offset, l.endOffset()))
	if err := l.sync(); err != nil {
		return 0, fmt.Errorf("delete before %d: %w", offset, err)
	}
	if err := writeCheckpoint(l.dir, checkpoint{LogStartOffset: start, RaftIndex: raftIndex}); err != nil {
		return 0, fmt.Errorf("delete before %d: %w", offset, err)
	}
	l.mu.Lock()
	l.logStart, l.ckptRaftIndex, l.lastRaftIndex = start, raftIndex, raftIndex
	l.mu.Unlock()

	drop, roll := trimPlan(l.segs, start)
	if roll {
		if _, err := l.roll(start); err != nil {
			return 0, fmt.Errorf("delete before %d: %w", offset, err)
		}
	}
	if drop == 0 {
		return 0, nil
	}
	gone := l.segs[:drop]
	l.mu.Lock()
	l.segs = l.segs[drop:]
	l.mu.Unlock()
	l.dirDirty = true
	for _, s := range gone {
		// Reads in flight on s fail with os.ErrClosed and look again.
		if err := s.remove(); err != nil {
			// The checkpoint is written: Open deletes what is left.
			l.logger.Warn("storage: removing segment", "segment", s.logPath, "err", err)
		}
	}
	return drop, nil
}

// trimPlan says how segs must change for logStart: drop the first drop
// segments, after rolling a new empty segment at logStart when roll is set
// (the last segment has records and all of them are below logStart, or the
// log ends before logStart, which only a crash can cause).
func trimPlan(segs []*segment, logStart int64) (drop int, roll bool) {
	last := segs[len(segs)-1]
	if last.next < logStart || (last.next == logStart && last.next > last.base) {
		return len(segs), true
	}
	for drop < len(segs)-1 && segs[drop].next <= logStart {
		drop++
	}
	return drop, false
}
