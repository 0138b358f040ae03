package storage

import "testing"

// TestFsyncsCounted: the segment, checkpoint and directory fsyncs of a log
// are counted by kind (tapes_fsyncs_total), and a Sync with nothing
// written issues none.
func TestFsyncsCounted(t *testing.T) {
	l := openLog(t, t.TempDir(), smallConfig)
	f := &filler{t: t, l: l}
	f.batches(3)
	before := map[FsyncKind]uint64{}
	for _, k := range FsyncKinds() {
		before[k] = Fsyncs(k)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if n := Fsyncs(FsyncSegment) - before[FsyncSegment]; n != 1 {
		t.Errorf("Sync after appends to one segment counted %d segment fsyncs, want 1", n)
	}
	seg := Fsyncs(FsyncSegment)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if n := Fsyncs(FsyncSegment) - seg; n != 0 {
		t.Errorf("Sync with nothing written counted %d segment fsyncs", n)
	}
	cp, dir := Fsyncs(FsyncCheckpoint), Fsyncs(FsyncDir)
	if _, err := l.DeleteBefore(l.EndOffset()-1, l.LastRaftIndex()+1); err != nil {
		t.Fatal(err)
	}
	if Fsyncs(FsyncCheckpoint) == cp || Fsyncs(FsyncDir) == dir {
		t.Errorf("DeleteBefore wrote the checkpoint: checkpoint fsyncs %d -> %d, dir %d -> %d", cp, Fsyncs(FsyncCheckpoint), dir, Fsyncs(FsyncDir))
	}
}
