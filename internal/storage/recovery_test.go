package storage

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

const cutMsg = "storage: cutting the log at a torn or corrupt batch"

// closedLog fills a log with n batches, closes it, and returns its
// directory, the last Raft index used and the segments.
func closedLog(t *testing.T, cfg Config, n int) (string, uint64, []SegmentInfo) {
	t.Helper()
	l := openLog(t, t.TempDir(), cfg)
	f := &filler{t: t, l: l}
	f.batches(n)
	segs := l.Segments()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return l.dir, f.raft, segs
}

func openRecorded(t *testing.T, dir string, cfg Config) (*Log, *logRecorder) {
	t.Helper()
	rec := &logRecorder{}
	l, err := Open(dir, cfg, slog.New(rec))
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l, rec
}

func TestRecoverTornTail(t *testing.T) {
	src, lastRaft, segs := closedLog(t, smallConfig, 60)
	if len(segs) < 3 {
		t.Fatalf("want several segments, got %d", len(segs))
	}
	active := segs[len(segs)-1]
	frames := framePositions(t, filepath.Join(src, active.File))
	last := frames[len(frames)-1]
	size := active.Bytes

	for _, cut := range []int64{
		last.pos + 1,
		last.pos + frameHeaderSize - 1,
		last.pos + frameHeaderSize,
		last.pos + framePreambleSize,
		last.pos + framePreambleSize + 7,
		size - 1,
	} {
		dir := copyDir(t, src)
		path := filepath.Join(dir, active.File)
		if err := os.Truncate(path, cut); err != nil {
			t.Fatal(err)
		}
		l, rec := openRecorded(t, dir, smallConfig)
		if l.EndOffset() != last.base || l.LastRaftIndex() != lastRaft-1 {
			t.Fatalf("cut at %d: end %d raft %d, want %d %d", cut, l.EndOffset(), l.LastRaftIndex(), last.base, lastRaft-1)
		}
		if fi, _ := os.Stat(path); fi.Size() != last.pos {
			t.Fatalf("cut at %d: file is %d bytes, want %d", cut, fi.Size(), last.pos)
		}
		if v, ok := rec.attr(cutMsg, "bytes_cut"); !ok || v.Int64() != cut-last.pos {
			t.Fatalf("cut at %d: logged bytes_cut %v (%v), want %d", cut, v, ok, cut-last.pos)
		}
		if v, ok := rec.attr(cutMsg, "first_offset_cut"); !ok || v.Int64() != last.base {
			t.Fatalf("cut at %d: logged first_offset_cut %v, want %d", cut, v, last.base)
		}
		checkRecords(t, readAll(t, l), 0, last.base)

		// Raft replays the lost entry: it goes in where it was.
		if base, err := l.Append(lastRaft, batchAt(last.base, int(last.next-last.base))); err != nil || base != last.base {
			t.Fatalf("replayed append = %d, %v", base, err)
		}
		l = reopen(t, l)
		checkRecords(t, readAll(t, l), 0, last.next)
	}

	// A cut exactly between frames is not damage: nothing is logged.
	dir := copyDir(t, src)
	if err := os.Truncate(filepath.Join(dir, active.File), last.pos); err != nil {
		t.Fatal(err)
	}
	l, rec := openRecorded(t, dir, smallConfig)
	if _, ok := rec.attr(cutMsg, "bytes_cut"); ok || l.EndOffset() != last.base {
		t.Fatalf("clean cut: logged %v, end %d", ok, l.EndOffset())
	}
}

func TestRecoverCorruptBatchInActiveSegment(t *testing.T) {
	cfg := Config{SegmentBytes: 64 << 10, IndexIntervalBytes: 512}
	src, _, segs := closedLog(t, cfg, 30)
	active := segs[len(segs)-1]
	frames := framePositions(t, filepath.Join(src, active.File))
	if len(frames) < 5 {
		t.Fatalf("want at least 5 frames in the active segment, got %d", len(frames))
	}
	bad := frames[len(frames)/2]

	// Frames with valid CRCs that do not follow the one before.
	for name, change := range map[string]func(h *frameHeader){
		"raft index repeated": func(h *frameHeader) { h.raftIndex-- },
		"offset gap":          func(h *frameHeader) { h.baseOffset++ },
	} {
		dir := copyDir(t, src)
		rewriteFrameHeader(t, filepath.Join(dir, active.File), bad.pos, change)
		l, _ := openRecorded(t, dir, cfg)
		if l.EndOffset() != bad.base {
			t.Fatalf("%s: end %d, want %d", name, l.EndOffset(), bad.base)
		}
	}
	for name, at := range map[string]int64{
		"record byte":     bad.pos + framePreambleSize + 9,
		"base offset":     bad.pos + 7,
		"raft index":      bad.pos + 19,
		"batch crc":       bad.pos + frameHeaderSize,
		"length overflow": bad.pos + 8,
	} {
		dir := copyDir(t, src)
		path := filepath.Join(dir, active.File)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		data[at] ^= 0x80
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		l, rec := openRecorded(t, dir, cfg)
		if l.EndOffset() != bad.base {
			t.Fatalf("%s: end %d, want %d", name, l.EndOffset(), bad.base)
		}
		if fi, _ := os.Stat(path); fi.Size() != bad.pos {
			t.Fatalf("%s: file is %d bytes, want %d", name, fi.Size(), bad.pos)
		}
		if v, ok := rec.attr(cutMsg, "bytes_cut"); !ok || v.Int64() != active.Bytes-bad.pos {
			t.Fatalf("%s: logged bytes_cut %v, want %d", name, v, active.Bytes-bad.pos)
		}
		checkRecords(t, readAll(t, l), 0, bad.base)
		if _, err := l.Append(bad.raft, batchAt(bad.base, 2)); err != nil {
			t.Fatalf("%s: append after the cut: %v", name, err)
		}
	}
}

// A crash can lose the unsynced tail of a sealed segment while later
// segments survive: the log is cut at the end of what remains.
func TestRecoverTornSealedSegment(t *testing.T) {
	src, _, segs := closedLog(t, smallConfig, 80)
	if len(segs) < 5 {
		t.Fatalf("want at least 5 segments, got %d", len(segs))
	}
	victim := segs[2]
	frames := framePositions(t, filepath.Join(src, victim.File))
	last := frames[len(frames)-1]
	if err := os.Truncate(filepath.Join(src, victim.File), last.pos+5); err != nil {
		t.Fatal(err)
	}
	l, rec := openRecorded(t, src, smallConfig)
	if l.EndOffset() != last.base || len(l.Segments()) != 3 {
		t.Fatalf("end %d with %d segments, want %d with 3", l.EndOffset(), len(l.Segments()), last.base)
	}
	for _, s := range segs[3:] {
		if _, err := os.Stat(filepath.Join(src, s.File)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("segment %s after the cut still exists: %v", s.File, err)
		}
	}
	if _, ok := rec.attr("storage: removing segment after the cut", "bytes_cut"); !ok {
		t.Fatal("removed segments were not logged")
	}
	checkRecords(t, readAll(t, l), 0, last.base)
	(&filler{t: t, l: l, raft: last.raft}).batches(10) // appends go on from the cut
	checkRecords(t, readAll(t, reopen(t, l)), 0, l.EndOffset())
}

func TestRecoverRebuildsIndexes(t *testing.T) {
	src, _, segs := closedLog(t, smallConfig, 80)
	if len(segs) < 5 {
		t.Fatalf("want at least 5 segments, got %d", len(segs))
	}
	index := func(s SegmentInfo, ext string) string {
		return filepath.Join(src, s.File[:20]+ext)
	}
	orig := map[string][]byte{}
	for _, s := range segs[:4] {
		for _, ext := range []string{".index", ".timeindex"} {
			b, err := os.ReadFile(index(s, ext))
			if err != nil {
				t.Fatal(err)
			}
			orig[index(s, ext)] = b
		}
	}
	if len(orig[index(segs[1], ".index")]) == 0 {
		t.Fatal("segment 1 has an empty offset index: the test needs entries")
	}
	damage := []func(){
		func() { os.Remove(index(segs[0], ".index")); os.Remove(index(segs[0], ".timeindex")) },
		func() { // zeros at the end, as a crash can leave
			b := append(orig[index(segs[1], ".index")], make([]byte, offsetEntrySize)...)
			os.WriteFile(index(segs[1], ".index"), b, 0o644)
		},
		func() { // the sealing entry lost
			b := orig[index(segs[2], ".timeindex")]
			os.WriteFile(index(segs[2], ".timeindex"), b[:len(b)-timeEntrySize], 0o644)
		},
		func() { // an entry pointing past the end
			b := bytes.Clone(orig[index(segs[3], ".index")])
			b[len(b)-4] = 0x7f
			os.WriteFile(index(segs[3], ".index"), b, 0o644)
		},
	}
	for _, d := range damage {
		d()
	}
	l, rec := openRecorded(t, src, smallConfig)
	checkRecords(t, readAll(t, l), 0, l.EndOffset())
	if _, ok := rec.attr("storage: rebuilding segment indexes", "reason"); !ok {
		t.Fatal("rebuilding was not logged")
	}
	for path, want := range orig {
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s rebuilt as %x (%v), want %x", path, got, err, want)
		}
	}
}

// Open checks sealed segments only where their indexes end; damage earlier in
// one is found by Read, which checks every batch's CRC.
func TestReadDetectsDamage(t *testing.T) {
	src, _, segs := closedLog(t, smallConfig, 80)
	victim := segs[1]
	frames := framePositions(t, filepath.Join(src, victim.File))
	path := filepath.Join(src, victim.File)
	data, _ := os.ReadFile(path)
	data[frames[0].pos+framePreambleSize+3] ^= 1
	os.WriteFile(path, data, 0o644)

	// And a frame of another sealed segment that claims the wrong offset.
	other := filepath.Join(src, segs[3].File)
	otherFrames := framePositions(t, other)
	rewriteFrameHeader(t, other, otherFrames[1].pos, func(h *frameHeader) { h.baseOffset++ })

	l := openLog(t, src, smallConfig)
	if recs, err := l.Read(otherFrames[0].base, 1<<20, l.EndOffset()); err != nil || int64(len(recs)) != otherFrames[0].next-otherFrames[0].base {
		t.Fatalf("Read up to a misnumbered frame = %d records, %v", len(recs), err)
	}
	if _, err := l.Read(otherFrames[1].base, 100, l.EndOffset()); !errors.Is(err, ErrCorruptBatch) {
		t.Fatalf("Read of a misnumbered frame = %v, want ErrCorruptBatch", err)
	}
	if _, err := l.Read(frames[0].base, 100, l.EndOffset()); !errors.Is(err, ErrCorruptBatch) {
		t.Fatalf("Read of a damaged batch = %v, want ErrCorruptBatch", err)
	}
	recs, err := l.Read(frames[1].base, 1<<20, l.EndOffset())
	if err != nil {
		t.Fatalf("Read after the damaged batch: %v", err)
	}
	checkRecords(t, recs, frames[1].base, otherFrames[1].base)
	// A read that reaches the damage returns what came before it.
	recs, err = l.Read(0, 1<<20, l.EndOffset())
	if err != nil || int64(len(recs)) != frames[0].base {
		t.Fatalf("Read up to the damage = %d records, %v; want %d", len(recs), err, frames[0].base)
	}
}

func TestOpenRemovesLeftovers(t *testing.T) {
	src, _, segs := closedLog(t, smallConfig, 30)
	for _, p := range []string{".snap-3/x.log", "checkpoint.json.tmp", "00000000000000099999.index"} {
		path := filepath.Join(src, p)
		os.MkdirAll(filepath.Dir(path), 0o755)
		if err := os.WriteFile(path, []byte("junk"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l := openLog(t, src, smallConfig)
	for _, p := range []string{".snap-3", "checkpoint.json.tmp", "00000000000000099999.index"} {
		if _, err := os.Stat(filepath.Join(src, p)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s survived Open: %v", p, err)
		}
	}
	if len(l.Segments()) != len(segs) {
		t.Fatalf("segments changed: %d, want %d", len(l.Segments()), len(segs))
	}
}

// rewriteFrameHeader changes the header of the frame at pos, with a valid CRC.
func rewriteFrameHeader(t *testing.T, path string, pos int64, change func(h *frameHeader)) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h, err := parseFrameHeader(data[pos:])
	if err != nil {
		t.Fatal(err)
	}
	change(&h)
	putFrameHeader(data[pos:], h)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A missing segment file breaks the offsets: the log ends where the
// segments stop following each other.
func TestRecoverMissingSegment(t *testing.T) {
	src, _, segs := closedLog(t, smallConfig, 80)
	if len(segs) < 5 {
		t.Fatalf("want at least 5 segments, got %d", len(segs))
	}
	if err := os.Remove(filepath.Join(src, segs[2].File)); err != nil {
		t.Fatal(err)
	}
	l, rec := openRecorded(t, src, smallConfig)
	if l.EndOffset() != segs[1].NextOffset || len(l.Segments()) != 2 {
		t.Fatalf("end %d with %d segments, want %d with 2", l.EndOffset(), len(l.Segments()), segs[1].NextOffset)
	}
	if _, ok := rec.attr("storage: segment does not follow the one before; removing it and later segments", "segment"); !ok {
		t.Fatal("the gap was not logged")
	}
	checkRecords(t, readAll(t, l), 0, segs[1].NextOffset)
	f := &filler{t: t, l: l, raft: 1000}
	f.batches(20) // segment 1 is active again: appends fill it, then roll
	checkRecords(t, readAll(t, reopen(t, l)), 0, l.EndOffset())
}
