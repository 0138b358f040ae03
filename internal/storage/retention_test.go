package storage

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// checkTrimmed checks a log whose start moved to start: the segments before
// it are gone (files included), reads below it are out of range, and the
// records from it on are intact.
func checkTrimmed(t *testing.T, l *Log, start int64, gone []SegmentInfo) {
	t.Helper()
	if l.StartOffset() != start {
		t.Fatalf("start %d, want %d", l.StartOffset(), start)
	}
	for _, s := range gone {
		for _, ext := range []string{".log", ".index", ".timeindex"} {
			if _, err := os.Stat(filepath.Join(l.dir, s.File[:20]+ext)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("%s%s of a deleted segment: %v", s.File[:20], ext, err)
			}
		}
	}
	if segs := l.Segments(); segs[0].NextOffset <= start && len(segs) > 1 {
		t.Fatalf("first segment %+v lies below the start %d", segs[0], start)
	}
	if start > 0 {
		if _, err := l.Read(start-1, 100, l.EndOffset()); !errors.Is(err, ErrOffsetOutOfRange) {
			t.Fatalf("Read below the start = %v", err)
		}
	}
	checkRecords(t, readAll(t, l), start, l.EndOffset())
}

func TestRetentionByTime(t *testing.T) {
	l := openLog(t, t.TempDir(), smallConfig)
	f := &filler{t: t, l: l}
	f.batches(100)
	segs := l.Segments()
	if len(segs) < 6 {
		t.Fatalf("want at least 6 segments, got %d", len(segs))
	}
	// Keep 2 hours; make "now" such that segments 0..3 are older than that.
	retention := int64(2 * time.Hour / time.Millisecond)
	now := time.UnixMilli(segs[3].MaxTimestamp + retention + 1)
	start, ok := l.RetentionPoint(now, retention, -1)
	if !ok || start != segs[4].BaseOffset {
		t.Fatalf("RetentionPoint = %d, %v; want %d", start, ok, segs[4].BaseOffset)
	}
	// Exactly at the limit is kept.
	if start, _ := l.RetentionPoint(time.UnixMilli(segs[3].MaxTimestamp+retention), retention, -1); start != segs[3].BaseOffset {
		t.Fatalf("a segment exactly at the limit must be kept; point %d", start)
	}
	f.raft++
	deleted, err := l.DeleteBefore(start, f.raft)
	if err != nil || deleted != 4 {
		t.Fatalf("DeleteBefore = %d, %v; want 4", deleted, err)
	}
	checkTrimmed(t, l, start, segs[:4])
	if l.LastRaftIndex() != f.raft {
		t.Fatalf("LastRaftIndex %d, want %d (the delete's)", l.LastRaftIndex(), f.raft)
	}

	// Survives a restart, and re-applying (Raft replay) is a no-op.
	l = reopen(t, l)
	checkTrimmed(t, l, start, segs[:4])
	if l.LastRaftIndex() != f.raft {
		t.Fatalf("after reopen LastRaftIndex %d, want %d", l.LastRaftIndex(), f.raft)
	}
	if n, err := l.DeleteBefore(start, f.raft); !errors.Is(err, ErrAlreadyApplied) || n != 0 {
		t.Fatalf("re-applied DeleteBefore = %d, %v", n, err)
	}
	checkTrimmed(t, l, start, segs[:4])

	// The active segment is never deleted, however old.
	all := l.Segments()
	if start, ok := l.RetentionPoint(time.UnixMilli(1<<50), 0, -1); !ok || start != all[len(all)-1].BaseOffset {
		t.Fatalf("RetentionPoint with everything expired = %d, %v", start, ok)
	}
	if _, ok := l.RetentionPoint(now, -1, -1); ok {
		t.Fatal("unlimited retention deletes something")
	}
}

func TestRetentionBySize(t *testing.T) {
	l := openLog(t, t.TempDir(), smallConfig)
	f := &filler{t: t, l: l}
	f.batches(100)
	segs := l.Segments()
	var total int64
	for _, s := range segs {
		total += s.Bytes
	}
	limit := total / 3
	start, ok := l.RetentionPoint(time.Now(), -1, limit)
	if !ok {
		t.Fatal("nothing to delete")
	}
	var kept, firstKept int64
	for _, s := range segs {
		if s.BaseOffset >= start {
			kept += s.Bytes
			if firstKept == 0 {
				firstKept = s.Bytes
			}
		}
	}
	if kept < limit || kept-firstKept >= limit {
		t.Fatalf("kept %d bytes (first kept segment %d) for a limit of %d", kept, firstKept, limit)
	}
	// Both limits: the one that deletes more wins, segment by segment.
	if s2, _ := l.RetentionPoint(time.UnixMilli(segs[0].MaxTimestamp+11), 10, limit); s2 != start {
		t.Fatalf("size limit with a lax time limit moved the point to %d, want %d", s2, start)
	}
	f.raft++
	if _, err := l.DeleteBefore(start, f.raft); err != nil {
		t.Fatal(err)
	}
	var gone []SegmentInfo
	for _, s := range segs {
		if s.BaseOffset < start {
			gone = append(gone, s)
		}
	}
	checkTrimmed(t, l, start, gone)
	if _, ok := l.RetentionPoint(time.Now(), -1, limit); ok {
		t.Fatal("a second retention pass at the same limit deletes more")
	}
}

func TestDeleteBeforeInsideSegment(t *testing.T) {
	l := openLog(t, t.TempDir(), smallConfig)
	f := &filler{t: t, l: l}
	f.batches(60)
	segs := l.Segments()
	mid := (segs[2].BaseOffset + segs[2].NextOffset) / 2
	f.raft++
	if n, err := l.DeleteBefore(mid, f.raft); err != nil || n != 2 {
		t.Fatalf("DeleteBefore(%d) = %d, %v; want 2", mid, n, err)
	}
	checkTrimmed(t, l, mid, segs[:2])
	// Lower offsets never move the start back.
	f.raft++
	if n, err := l.DeleteBefore(3, f.raft); err != nil || n != 0 || l.StartOffset() != mid {
		t.Fatalf("DeleteBefore below the start = %d, %v, start %d", n, err, l.StartOffset())
	}
	l = reopen(t, l)
	checkTrimmed(t, l, mid, segs[:2])
	// OffsetForTimestamp does not return records below the start.
	if o, _, ok := l.OffsetForTimestamp(0); !ok || o != mid {
		t.Fatalf("OffsetForTimestamp(0) = %d, %v; want %d", o, ok, mid)
	}
}

func TestDeleteEverything(t *testing.T) {
	l := openLog(t, t.TempDir(), smallConfig)
	f := &filler{t: t, l: l}
	f.batches(40)
	segs := l.Segments()
	end := l.EndOffset()
	f.raft++
	if n, err := l.DeleteBefore(end+1000, f.raft); err != nil || n != len(segs) {
		t.Fatalf("DeleteBefore past the end = %d, %v; want %d", n, err, len(segs))
	}
	check := func() {
		t.Helper()
		if l.StartOffset() != end || l.EndOffset() != end {
			t.Fatalf("start %d end %d, want both %d", l.StartOffset(), l.EndOffset(), end)
		}
		if s := l.Segments(); len(s) != 1 || s[0].BaseOffset != end || s[0].Bytes != 0 {
			t.Fatalf("segments %+v, want one empty at %d", s, end)
		}
		if recs, err := l.Read(end, 100, end); err != nil || len(recs) != 0 {
			t.Fatalf("Read at the end = %v, %v", recs, err)
		}
		if _, err := l.Read(end-1, 100, end); !errors.Is(err, ErrOffsetOutOfRange) {
			t.Fatalf("Read below = %v", err)
		}
	}
	check()
	checkTrimmed(t, l, end, segs)
	l = reopen(t, l)
	check()
	f.l = l
	f.batches(5)
	checkRecords(t, readAll(t, l), end, l.EndOffset())
}

// A crash between writing the checkpoint and deleting the files: Open
// finishes the deletion.
func TestDeleteInterruptedByCrash(t *testing.T) {
	src, lastRaft, segs := closedLog(t, smallConfig, 60)
	start := segs[3].BaseOffset + 1
	if err := writeCheckpoint(src, checkpoint{LogStartOffset: start, RaftIndex: lastRaft + 1}); err != nil {
		t.Fatal(err)
	}
	l := openLog(t, src, smallConfig)
	checkTrimmed(t, l, start, segs[:3])
	if l.LastRaftIndex() != lastRaft+1 {
		t.Fatalf("LastRaftIndex %d, want %d", l.LastRaftIndex(), lastRaft+1)
	}
}

// The checkpoint can be ahead of the data only if unsynced appends were lost:
// the log then restarts, empty, at the checkpointed start.
func TestCheckpointBeyondEnd(t *testing.T) {
	src, lastRaft, _ := closedLog(t, smallConfig, 10)
	if err := writeCheckpoint(src, checkpoint{LogStartOffset: 500, RaftIndex: lastRaft + 5}); err != nil {
		t.Fatal(err)
	}
	l := openLog(t, src, smallConfig)
	if l.StartOffset() != 500 || l.EndOffset() != 500 || len(l.Segments()) != 1 {
		t.Fatalf("start %d end %d segments %+v", l.StartOffset(), l.EndOffset(), l.Segments())
	}
	if base, err := l.Append(lastRaft+6, batchAt(500, 2)); err != nil || base != 500 {
		t.Fatalf("append = %d, %v", base, err)
	}
}
