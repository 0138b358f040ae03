package storage

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
)

func TestOpenCreatesEmptyLog(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	l := openLog(t, dir, Config{})
	if l.StartOffset() != 0 || l.EndOffset() != 0 || l.LastRaftIndex() != 0 {
		t.Fatalf("new log: start %d end %d raft %d", l.StartOffset(), l.EndOffset(), l.LastRaftIndex())
	}
	if recs, err := l.Read(0, 100, 10); err != nil || len(recs) != 0 {
		t.Fatalf("Read on an empty log = %v, %v", recs, err)
	}
	segs := l.Segments()
	if len(segs) != 1 || segs[0].File != "00000000000000000000.log" || segs[0].MaxTimestamp != -1 {
		t.Fatalf("segments of a new log: %+v", segs)
	}
	if _, err := os.Stat(filepath.Join(dir, segs[0].File)); err != nil {
		t.Fatal(err)
	}
}

func TestAppendReadAcrossSegmentRolls(t *testing.T) {
	l := openLog(t, t.TempDir(), smallConfig)
	f := &filler{t: t, l: l}
	f.batches(400)
	end := l.EndOffset()

	segs := l.Segments()
	if len(segs) < 20 {
		t.Fatalf("only %d segments: the test needs many rolls", len(segs))
	}
	for i, s := range segs {
		if i > 0 && s.BaseOffset != segs[i-1].NextOffset {
			t.Fatalf("segment %d starts at %d, previous ends at %d", i, s.BaseOffset, segs[i-1].NextOffset)
		}
		if s.Bytes > smallConfig.SegmentBytes {
			t.Fatalf("segment %d has %d bytes, limit %d", i, s.Bytes, smallConfig.SegmentBytes)
		}
		if fi, err := os.Stat(filepath.Join(l.dir, s.File)); err != nil || fi.Size() != s.Bytes {
			t.Fatalf("segment file %s: %v, size vs %d", s.File, err, s.Bytes)
		}
		if s.MaxTimestamp != recordAt(s.NextOffset-1).Timestamp {
			t.Fatalf("segment %d max timestamp %d, want %d", i, s.MaxTimestamp, recordAt(s.NextOffset-1).Timestamp)
		}
	}
	if segs[len(segs)-1].NextOffset != end {
		t.Fatalf("last segment ends at %d, log at %d", segs[len(segs)-1].NextOffset, end)
	}
	checkRecords(t, readAll(t, l), 0, end)

	l = reopen(t, l)
	if l.EndOffset() != end || l.LastRaftIndex() != f.raft || len(l.Segments()) != len(segs) {
		t.Fatalf("after reopen: end %d raft %d segments %d; want %d %d %d",
			l.EndOffset(), l.LastRaftIndex(), len(l.Segments()), end, f.raft, len(segs))
	}
	f.l = l
	f.batches(50)
	checkRecords(t, readAll(t, l), 0, l.EndOffset())
}

func TestBatchLargerThanSegmentGoesInAlone(t *testing.T) {
	l := openLog(t, t.TempDir(), Config{SegmentBytes: 1000, IndexIntervalBytes: 100})
	f := &filler{t: t, l: l}
	f.batch(1)
	f.batch(60) // far over 1000 bytes
	f.batch(1)
	segs := l.Segments()
	if len(segs) != 3 || segs[1].BaseOffset != 1 || segs[1].NextOffset != 61 || segs[1].Bytes <= 1000 {
		t.Fatalf("segments: %+v", segs)
	}
	checkRecords(t, readAll(t, l), 0, 62)
}

func TestReadBounds(t *testing.T) {
	l, recs := uniformLog(t)
	var size int // encoded size of one record
	if err := EncodeBatch(recs[:1]).each(0, func(_ Record, n int) { size = n }); err != nil {
		t.Fatal(err)
	}
	end := l.EndOffset() // 300

	for _, tc := range []struct {
		offset   int64
		maxBytes int
		upTo     int64
		want     int
	}{
		{0, 1 << 20, end, 300},
		{0, 1 << 20, 17, 17},        // upTo inside a batch
		{13, 1 << 20, 17, 4},        // offset inside a batch
		{13, 5 * size, end, 5},      // exactly five fit
		{13, 5*size + 1, end, 5},    // a sixth does not
		{13, 5*size - 1, end, 4},    // the fifth does not
		{13, 0, end, 1},             // at least one record
		{13, -1, end, 1},            // at least one record
		{298, 1 << 20, end + 50, 2}, // upTo beyond the end is the end
		{20, 1 << 20, 20, 0},        // offset == upTo
		{25, 1 << 20, 20, 0},        // offset past upTo but within the log
		{end, 1 << 20, end, 0},      // offset == EndOffset
		{99, 45 * size, end, 45},    // across batches
	} {
		got, err := l.Read(tc.offset, tc.maxBytes, tc.upTo)
		if err != nil {
			t.Fatalf("Read(%d, %d, %d): %v", tc.offset, tc.maxBytes, tc.upTo, err)
		}
		if len(got) != tc.want {
			t.Fatalf("Read(%d, %d, %d) = %d records, want %d", tc.offset, tc.maxBytes, tc.upTo, len(got), tc.want)
		}
		for i, r := range got {
			if r.Offset != tc.offset+int64(i) {
				t.Fatalf("Read(%d, ...)[%d] has offset %d", tc.offset, i, r.Offset)
			}
		}
	}
	for _, off := range []int64{end + 1, -1} {
		if _, err := l.Read(off, 100, end); !errors.Is(err, ErrOffsetOutOfRange) {
			t.Fatalf("Read(%d) = %v, want ErrOffsetOutOfRange", off, err)
		}
	}
}

func TestIndexLookupMatchesLinearScan(t *testing.T) {
	l := openLog(t, t.TempDir(), Config{SegmentBytes: 16 << 10, IndexIntervalBytes: 700})
	f := &filler{t: t, l: l}
	f.batches(500)
	l = reopen(t, l) // sealed segments' indexes come from their files

	l.mu.RLock()
	segs := l.segs
	l.mu.RUnlock()
	indexed := 0
	var buf [framePreambleSize]byte
	for _, s := range segs {
		frames := framePositions(t, s.logPath)
		indexed += len(s.offIdx)
		// Every entry names a frame: its position and first offset.
		for _, e := range s.offIdx {
			found := false
			for _, fp := range frames {
				found = found || (fp.pos == int64(e.pos) && fp.base == s.base+int64(e.rel))
			}
			if !found {
				t.Fatalf("%s: index entry %d@%d names no frame", s.logPath, e.rel, e.pos)
			}
		}
		v := s.view()
		// Every offset of the segment, its first and last included.
		for o := s.base; o < s.next; o++ {
			var want framePos
			for _, fp := range frames {
				if fp.base <= o && o < fp.next {
					want = fp
				}
			}
			if floor := floorPosition(v.offIdx, uint32(o-s.base)); floor > want.pos || (len(v.offIdx) > 0 && o >= s.base+int64(v.offIdx[0].rel) && floor == 0) {
				t.Fatalf("offset %d: index floor %d, frame at %d", o, floor, want.pos)
			}
			pos, p, err := v.seek(o, &buf)
			if err != nil {
				t.Fatalf("seek %d in %s: %v", o, s.logPath, err)
			}
			if pos != want.pos || p.baseOffset != want.base {
				t.Fatalf("seek %d: frame at %d (offset %d), linear scan says %d (offset %d)", o, pos, p.baseOffset, want.pos, want.base)
			}
			if recs, err := l.Read(o, 0, l.EndOffset()); err != nil || len(recs) != 1 || recs[0].Offset != o {
				t.Fatalf("Read(%d) = %v, %v", o, recs, err)
			}
		}
	}
	if indexed < 3*len(segs) {
		t.Fatalf("only %d index entries in %d segments: the test needs a dense index", indexed, len(segs))
	}
}

func TestAlreadyAppliedAfterReopen(t *testing.T) {
	l := openLog(t, t.TempDir(), smallConfig)
	for i, raft := range []uint64{2, 3, 7, 11} {
		if _, err := l.Append(raft, batchAt(int64(i*2), 2)); err != nil {
			t.Fatal(err)
		}
	}
	l = reopen(t, l)
	if l.LastRaftIndex() != 11 || l.EndOffset() != 8 {
		t.Fatalf("after reopen: raft %d end %d", l.LastRaftIndex(), l.EndOffset())
	}
	for _, raft := range []uint64{0, 1, 7, 10, 11} {
		if _, err := l.Append(raft, batchAt(8, 2)); !errors.Is(err, ErrAlreadyApplied) {
			t.Fatalf("Append at Raft index %d = %v, want ErrAlreadyApplied", raft, err)
		}
	}
	if l.EndOffset() != 8 {
		t.Fatalf("refused appends moved the end to %d", l.EndOffset())
	}
	if base, err := l.Append(12, batchAt(8, 2)); err != nil || base != 8 {
		t.Fatalf("Append at 12 = %d, %v", base, err)
	}
	checkRecords(t, readAll(t, l), 0, 10)
}

func TestAppendRefusesCorruptBatch(t *testing.T) {
	l := openLog(t, t.TempDir(), smallConfig)
	b := batchAt(0, 3)
	b[len(b)-2] ^= 1
	if _, err := l.Append(1, b); !errors.Is(err, ErrCorruptBatch) {
		t.Fatalf("Append of a damaged batch = %v", err)
	}
	if _, err := l.Append(1, EncodeBatch(nil)); !errors.Is(err, ErrCorruptBatch) {
		t.Fatalf("Append of an empty batch = %v", err)
	}
	if l.EndOffset() != 0 || l.LastRaftIndex() != 0 || l.Segments()[0].Bytes != 0 {
		t.Fatalf("refused batches changed the log: %+v", l.Segments())
	}
	if _, err := l.Append(1, batchAt(0, 3)); err != nil {
		t.Fatalf("the Raft index of a refused batch must stay free: %v", err)
	}
}

func TestClosedLog(t *testing.T) {
	l := openLog(t, t.TempDir(), smallConfig)
	(&filler{t: t, l: l}).batches(3)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(9, batchAt(0, 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close = %v", err)
	}
	if _, err := l.Read(0, 10, 5); !errors.Is(err, ErrClosed) {
		t.Fatalf("Read after Close = %v", err)
	}
	if _, err := l.Snapshot(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Snapshot after Close = %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
}

// TestConcurrentReadsWhileWriting runs readers against a log that is being
// appended to, rolled, trimmed, snapshotted and restored; with -race it checks the locking, and
// every record read is checked against what was written at its offset.
func TestConcurrentReadsWhileWriting(t *testing.T) {
	l := openLog(t, t.TempDir(), Config{SegmentBytes: 2048, IndexIntervalBytes: 256})
	f := &filler{t: t, l: l}
	f.batches(20)

	var (
		stop  atomic.Bool
		wg    sync.WaitGroup
		reads atomic.Int64
	)
	errs := make(chan error, 4)
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 1))
			for !stop.Load() {
				start, end := l.StartOffset(), l.EndOffset()
				if end < start {
					continue // a restore or trim happened between the two reads
				}
				o := start + rng.Int64N(end-start+1)
				recs, err := l.Read(o, rng.IntN(4000), end)
				if errors.Is(err, ErrOffsetOutOfRange) && (o < l.StartOffset() || o > l.EndOffset()) {
					continue // trimmed, or restored to an earlier end, meanwhile
				}
				if err != nil {
					errs <- err
					return
				}
				for i, r := range recs {
					want := recordAt(o + int64(i))
					if r.Offset != want.Offset || string(r.Value) != string(want.Value) {
						errs <- errors.New("read a record that was not written there")
						return
					}
				}
				l.Segments()
				l.OffsetForTimestamp(recordAt(o).Timestamp)
				reads.Add(1)
			}
		}(uint64(r))
	}
	var snap *Snapshot
	for i := 0; i < 300; i++ {
		f.batches(1)
		if i%40 == 39 {
			f.raft++
			if _, err := l.DeleteBefore(l.EndOffset()-30, f.raft); err != nil {
				t.Fatal(err)
			}
		}
		var err error
		switch i {
		case 100:
			snap, err = l.Snapshot()
		case 200:
			// Back to the state at i == 100: the same record at each offset.
			var stream bytes.Buffer
			if _, err = snap.WriteTo(&stream); err == nil {
				err = l.Restore(&stream)
			}
			snap.Release()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if reads.Load() == 0 {
		t.Fatal("no read completed")
	}
}

func TestIndexFloors(t *testing.T) {
	offs := []offsetEntry{{rel: 10, pos: 500}, {rel: 25, pos: 1100}}
	for rel, want := range map[uint32]int64{0: 0, 9: 0, 10: 500, 24: 500, 25: 1100, 1000: 1100} {
		if got := floorPosition(offs, rel); got != want {
			t.Errorf("floorPosition(%d) = %d, want %d", rel, got, want)
		}
	}
	times := []timeEntry{{ts: 100, rel: 10}, {ts: 100, rel: 20}, {ts: 300, rel: 30}}
	for ts, want := range map[int64]uint32{50: 0, 100: 0, 101: 20, 300: 20, 301: 30} {
		if got := timeFloor(times, ts); got != want {
			t.Errorf("timeFloor(%d) = %d, want %d", ts, got, want)
		}
	}
}
