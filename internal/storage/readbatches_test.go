package storage

import (
	"errors"
	"os"
	"testing"
)

// batchesRecords decodes what ReadBatches returned, checking that the
// batches follow one another.
func batchesRecords(t testing.TB, bs []StoredBatch) []Record {
	t.Helper()
	var out []Record
	for i, sb := range bs {
		if i > 0 && sb.BaseOffset != bs[i-1].NextOffset() {
			t.Fatalf("batch %d starts at %d, the one before ends at %d", i, sb.BaseOffset, bs[i-1].NextOffset())
		}
		if err := sb.Batch.Validate(); err != nil {
			t.Fatalf("batch %d at %d: %v", i, sb.BaseOffset, err)
		}
		recs, err := sb.Batch.Records(sb.BaseOffset)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, recs...)
	}
	return out
}

// uniformLog is a log of 30 batches of the same 10 records, all of one size
// (same timestamp, key and value lengths), over small segments.
func uniformLog(t *testing.T) (*Log, []Record) {
	t.Helper()
	l := openLog(t, t.TempDir(), smallConfig)
	recs := make([]Record, 10)
	for i := range recs {
		recs[i] = Record{Timestamp: 7, Key: []byte("k"), Value: make([]byte, 40)}
	}
	for raft := uint64(1); raft <= 30; raft++ {
		if _, err := l.Append(raft, EncodeBatch(recs)); err != nil {
			t.Fatal(err)
		}
	}
	return l, recs
}

func batchesSize(bs []StoredBatch) int {
	n := 0
	for _, sb := range bs {
		n += len(sb.Batch)
	}
	return n
}

// TestReadBatchesAgreesWithRead: over many small segments, from every
// offset, ReadBatches returns the batch holding the offset first, then whole
// batches that follow, ending at the bound, records equal to Read's.
func TestReadBatchesAgreesWithRead(t *testing.T) {
	l := openLog(t, t.TempDir(), smallConfig)
	f := &filler{t: t, l: l}
	f.batches(120)
	if n := len(l.Segments()); n < 4 {
		t.Fatalf("want several segments, got %d", n)
	}
	end := l.EndOffset()
	for off := int64(0); off < end; off++ {
		bs, err := l.ReadBatches(off, 1<<30, end, true)
		if err != nil {
			t.Fatalf("ReadBatches(%d): %v", off, err)
		}
		if len(bs) == 0 || bs[0].BaseOffset > off || bs[0].NextOffset() <= off {
			t.Fatalf("ReadBatches(%d): first batch %+v does not hold the offset", off, bs)
		}
		recs := batchesRecords(t, bs)
		checkRecords(t, recs, bs[0].BaseOffset, end)
	}
}

func TestReadBatchesBounds(t *testing.T) {
	l, recs := uniformLog(t)
	size := len(EncodeBatch(recs)) // every batch: 10 records, same size
	end := l.EndOffset()           // 300
	for _, tc := range []struct {
		offset   int64
		maxBytes int
		upTo     int64
		minOne   bool
		want     int // batches
		first    int64
	}{
		{0, 1 << 30, end, true, 30, 0},
		{13, 1 << 30, end, true, 29, 10},       // the batch holding 13 begins at 10
		{13, 3 * size, end, true, 3, 10},       // exactly three fit
		{13, 3*size - 1, end, true, 2, 10},     // the third does not
		{13, size - 1, end, true, 1, 10},       // KIP-74: the first however large
		{13, size - 1, end, false, 0, 0},       // unless told not to
		{13, 0, end, true, 1, 10},              // at least one batch
		{0, 1 << 30, 25, true, 2, 0},           // only batches that end at or below upTo
		{20, 1 << 30, 25, true, 0, 0},          // the batch holding 20 ends past upTo
		{295, 1 << 30, end + 50, true, 1, 290}, // upTo beyond the end is the end
		{20, 1 << 30, 20, true, 0, 0},          // offset == upTo
		{end, 1 << 30, end, true, 0, 0},        // offset == EndOffset
	} {
		bs, err := l.ReadBatches(tc.offset, tc.maxBytes, tc.upTo, tc.minOne)
		if err != nil {
			t.Fatalf("%+v: %v", tc, err)
		}
		if len(bs) != tc.want {
			t.Fatalf("%+v: %d batches (%d bytes), want %d", tc, len(bs), batchesSize(bs), tc.want)
		}
		if len(bs) > 0 && bs[0].BaseOffset != tc.first {
			t.Fatalf("%+v: first batch at %d, want %d", tc, bs[0].BaseOffset, tc.first)
		}
		batchesRecords(t, bs)
	}
	for _, off := range []int64{end + 1, -1} {
		if _, err := l.ReadBatches(off, 100, end, true); !errors.Is(err, ErrOffsetOutOfRange) {
			t.Fatalf("ReadBatches(%d) = %v, want ErrOffsetOutOfRange", off, err)
		}
	}
}

// TestReadBatchesAfterRetentionAndReopen: a log start inside a batch (after
// DeleteBefore) returns that whole batch; below the start is out of range;
// after a reopen (indexes loaded from files) and after a crash cut a torn
// tail (recovery), the same batches come back.
func TestReadBatchesAfterRetentionAndReopen(t *testing.T) {
	l, f := trimmedLog(t, 20)
	start, end := l.StartOffset(), l.EndOffset()
	if _, err := l.ReadBatches(start-1, 1<<30, end, true); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("below the log start: %v, want ErrOffsetOutOfRange", err)
	}
	bs, err := l.ReadBatches(start, 1<<30, end, true)
	if err != nil {
		t.Fatal(err)
	}
	if bs[0].BaseOffset >= start {
		t.Fatalf("log start %d set inside a batch, but the first batch begins at %d", start, bs[0].BaseOffset)
	}
	checkRecords(t, batchesRecords(t, bs), bs[0].BaseOffset, end)
	want := batchesSize(bs)

	l = reopen(t, l)
	bs, err = l.ReadBatches(start, 1<<30, end, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := batchesSize(bs); got != want {
		t.Fatalf("after reopen: %d bytes, want %d", got, want)
	}

	// A torn last frame: recovery cuts it, ReadBatches ends before it.
	last := bs[len(bs)-1]
	segs := l.Segments()
	path := l.dir + "/" + segs[len(segs)-1].File
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, fi.Size()-3); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, l.dir, l.cfg)
	f.l = l
	if got := l.EndOffset(); got != last.BaseOffset {
		t.Fatalf("after the cut the log ends at %d, want %d", got, last.BaseOffset)
	}
	bs, err = l.ReadBatches(start, 1<<30, end, true)
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, batchesRecords(t, bs), bs[0].BaseOffset, last.BaseOffset)
	f.raft = l.LastRaftIndex()
	f.batch(2)
	if bs, err = l.ReadBatches(last.BaseOffset, 1<<30, l.EndOffset(), true); err != nil || len(bs) != 1 || bs[0].Batch.Count() != 2 {
		t.Fatalf("after appending again: %+v, %v", bs, err)
	}
}

// TestReadBatchesRetentionDuringRead: segments deleted between reads leave
// the next read out of range, never with stale bytes.
func TestReadBatchesRetentionDuringRead(t *testing.T) {
	l := openLog(t, t.TempDir(), smallConfig)
	f := &filler{t: t, l: l}
	f.batches(60)
	segs := l.Segments()
	f.raft++
	if _, err := l.DeleteBefore(segs[2].BaseOffset, f.raft); err != nil {
		t.Fatal(err)
	}
	if _, err := l.ReadBatches(segs[1].BaseOffset, 1<<30, l.EndOffset(), true); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("read in a deleted segment: %v, want ErrOffsetOutOfRange", err)
	}
	bs, err := l.ReadBatches(segs[2].BaseOffset, 1<<30, l.EndOffset(), true)
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, batchesRecords(t, bs), segs[2].BaseOffset, l.EndOffset())
}
