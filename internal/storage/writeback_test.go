package storage

import "testing"

// TestWritebackStartsEveryChunk: a segment hands each writebackChunk bytes
// it stores to the kernel's writeback as it goes, never a byte it has not
// written, and the records read back intact.
func TestWritebackStartsEveryChunk(t *testing.T) {
	l := openLog(t, t.TempDir(), Config{SegmentBytes: 64 << 20, IndexIntervalBytes: 4096})
	f := &filler{t: t, l: l}
	for l.segs[len(l.segs)-1].size < writebackChunk*5/2 {
		f.batch(200)
	}
	s := l.segs[len(l.segs)-1]
	if s.writtenBack < 2*writebackChunk || s.writtenBack > s.size {
		t.Fatalf("segment of %d bytes: writeback started up to %d, want at least %d and at most the size", s.size, s.writtenBack, 2*writebackChunk)
	}
	if s.size-s.writtenBack >= writebackChunk {
		t.Fatalf("%d bytes written since the last writeback, chunk %d", s.size-s.writtenBack, writebackChunk)
	}
	checkRecords(t, readAll(t, l), 0, l.EndOffset())
}
