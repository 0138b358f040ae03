package storage

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
)

// segment is one .log file with its two indexes. The last segment of a Log
// is the active one, appended to; the others are sealed.
type segment struct {
	base    int64    // offset of the first record stored (or to be stored) here
	dir     string   // the log directory
	logPath string   // DIR/%020d.log
	f       *os.File // the .log file, open read-write until close

	// Published state. Guarded by Log.mu; changed only while Log.wmu is
	// held as well, so a writer reads it without Log.mu. The index slices
	// are only ever appended to, so a reader may keep a copy of the slice
	// header and use it after releasing the lock. (A segment that load or
	// Restore is still building is not shared, and needs no lock.)
	next          int64         // offset after the last record; base <= next, next-base <= MaxUint32
	size          int64         // bytes of whole frames; nothing past it is ever read
	maxTs         int64         // largest record timestamp; math.MinInt64 while empty
	lastRaftIndex uint64        // Raft index of the last frame; 0 while empty
	offIdx        []offsetEntry // see index.go
	timeIdx       []timeEntry

	// Writer state (Log.wmu).
	idxFile, timeIdxFile *os.File // open while the segment is active, nil once sealed
	sinceIndex           int64    // bytes of frames stored since the last offset index entry
	dirty                bool     // written since the last fsync
	// writtenBack: bytes of the file before it were handed to the kernel's
	// writeback (see startWriteback). Invariant: writtenBack <= size plus
	// the frame being written.
	writtenBack int64
	released    bool // files closed (by close)
}

func segmentFile(base int64) string { return fmt.Sprintf("%020d.log", base) }

func (s *segment) indexPath() string     { return s.pathWithExt(".index") }
func (s *segment) timeIndexPath() string { return s.pathWithExt(".timeindex") }
func (s *segment) pathWithExt(ext string) string {
	return filepath.Join(s.dir, fmt.Sprintf("%020d%s", s.base, ext))
}

func newSegment(dir string, base int64, f *os.File) *segment {
	return &segment{base: base, dir: dir, logPath: filepath.Join(dir, segmentFile(base)), f: f, next: base, maxTs: math.MinInt64}
}

// createSegment creates an empty active segment at base.
func createSegment(dir string, base int64) (*segment, error) {
	f, err := os.OpenFile(filepath.Join(dir, segmentFile(base)), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("create segment: %w", err)
	}
	s := newSegment(dir, base, f)
	if s.idxFile, s.timeIdxFile, err = writeIndexFiles(s.indexPath(), s.timeIndexPath(), nil, nil); err != nil {
		f.Close()
		os.Remove(s.logPath)
		return nil, fmt.Errorf("create segment indexes: %w", err)
	}
	return s, nil
}

// openSegment opens an existing segment file; its state is loaded by
// loadSealed or rebuild.
func openSegment(dir string, base int64) (*segment, int64, error) {
	f, err := os.OpenFile(filepath.Join(dir, segmentFile(base)), os.O_RDWR, 0)
	if err != nil {
		return nil, 0, fmt.Errorf("open segment: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("stat segment: %w", err)
	}
	return newSegment(dir, base, f), fi.Size(), nil
}

// loadSealed loads a sealed segment from its index files, checking them
// against the segment: the entries are ordered and in bounds, and the frames
// from the last offset entry on are valid, end exactly at the end of the file,
// and end at the offset the time index's last (sealing) entry names. prevRaft
// is the previous segment's last Raft index.
func (s *segment) loadSealed(fileSize int64, prevRaft uint64) error {
	offs, err := readOffsetIndex(s.indexPath(), fileSize)
	if err != nil {
		return err
	}
	times, err := readTimeIndex(s.timeIndexPath())
	if err != nil {
		return err
	}
	if len(times) == 0 {
		return errors.New("time index has no sealing entry")
	}
	seal := times[len(times)-1]
	pos, next := int64(0), s.base
	if len(offs) > 0 {
		last := offs[len(offs)-1]
		pos, next = int64(last.pos), s.base+int64(last.rel)
	}
	lastRaft := prevRaft
	sc := newFrameScanner(s.f, pos, fileSize)
	for {
		h, b, err := sc.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if h.baseOffset != next || h.raftIndex <= lastRaft {
			return fmt.Errorf("frame at offset %d, Raft index %d does not follow offset %d, Raft index %d", h.baseOffset, h.raftIndex, next, lastRaft)
		}
		if err := b.Validate(); err != nil {
			return err
		}
		next += int64(b.Count())
		lastRaft = h.raftIndex
	}
	if next == s.base || next != s.base+int64(seal.rel) {
		return fmt.Errorf("frames end at offset %d, time index says %d", next, s.base+int64(seal.rel))
	}
	s.next, s.size, s.maxTs, s.lastRaftIndex = next, fileSize, seal.ts, lastRaft
	s.offIdx, s.timeIdx = offs, times
	return nil
}

// rebuild scans the whole segment, checking every frame, and rebuilds its
// state and in-memory indexes from what it finds. It stops at the first frame
// that is torn (the file ends inside it) or corrupt (bad CRC or structure, an
// offset that does not follow, a Raft index that does not increase past
// prevRaft and the frame before) and returns why; s.size is then the length
// of the good prefix. It returns nil when the whole file is good.
func (s *segment) rebuild(fileSize int64, interval int, prevRaft uint64) error {
	s.next, s.size, s.maxTs, s.lastRaftIndex = s.base, 0, math.MinInt64, 0
	s.offIdx, s.timeIdx, s.sinceIndex = nil, nil, 0
	sc := newFrameScanner(s.f, 0, fileSize)
	for {
		h, b, err := sc.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if h.baseOffset != s.next {
			return fmt.Errorf("%w: frame at %d has offset %d, want %d", ErrCorruptBatch, s.size, h.baseOffset, s.next)
		}
		if h.raftIndex <= max(prevRaft, s.lastRaftIndex) {
			return fmt.Errorf("%w: frame at %d has Raft index %d after %d", ErrCorruptBatch, s.size, h.raftIndex, max(prevRaft, s.lastRaftIndex))
		}
		if err := b.Validate(); err != nil {
			return fmt.Errorf("frame at %d: %w", s.size, err)
		}
		if s.next+int64(b.Count())-s.base > math.MaxUint32 {
			return fmt.Errorf("%w: frame at %d overflows the segment's relative offsets", ErrCorruptBatch, s.size)
		}
		s.advance(h, b, s.indexPoint(h.baseOffset, interval))
	}
}

// indexAdd is what storing one frame adds to the indexes.
type indexAdd struct {
	offset        offsetEntry
	time          timeEntry
	hasOffset     bool
	hasTimeOffset bool
}

// indexPoint decides the index entries for a frame about to be stored at
// s.size with first offset offset.
func (s *segment) indexPoint(offset int64, interval int) indexAdd {
	var a indexAdd
	if s.sinceIndex < int64(interval) {
		return a
	}
	rel := uint32(offset - s.base)
	a.offset, a.hasOffset = offsetEntry{rel: rel, pos: uint32(s.size)}, true
	if s.next > s.base && (len(s.timeIdx) == 0 || s.maxTs > s.timeIdx[len(s.timeIdx)-1].ts) {
		a.time, a.hasTimeOffset = timeEntry{ts: s.maxTs, rel: rel}, true
	}
	return a
}

// advance publishes one stored frame. Callers hold Log.mu when s is shared.
func (s *segment) advance(h frameHeader, b Batch, a indexAdd) {
	if a.hasOffset {
		s.offIdx = append(s.offIdx, a.offset)
		s.sinceIndex = 0
	}
	if a.hasTimeOffset {
		s.timeIdx = append(s.timeIdx, a.time)
	}
	s.sinceIndex += h.size()
	s.size += h.size()
	s.next += int64(b.Count())
	s.maxTs = max(s.maxTs, b.MaxTimestamp())
	s.lastRaftIndex = h.raftIndex
}

// write stores a frame for b past s.size and its index entries, without
// publishing them: the caller then calls advance (under Log.mu) with the
// result. buf is scratch space the caller keeps between calls.
func (s *segment) write(h frameHeader, b Batch, interval int, buf *[]byte) (indexAdd, error) {
	frame := append((*buf)[:0], make([]byte, frameHeaderSize)...)
	frame = append(frame, b...)
	*buf = frame
	putFrameHeader(frame, h)
	Batch(frame[frameHeaderSize:]).setBaseOffset(h.baseOffset)
	s.dirty = true
	if _, err := s.f.WriteAt(frame, s.size); err != nil {
		return indexAdd{}, fmt.Errorf("write %s: %w", s.logPath, err)
	}
	if end := s.size + int64(len(frame)); end-s.writtenBack >= writebackChunk {
		startWriteback(s.f, s.writtenBack, end-s.writtenBack)
		s.writtenBack = end
	}
	a := s.indexPoint(h.baseOffset, interval)
	if a.hasOffset {
		if _, err := s.idxFile.WriteAt(a.offset.encode(), int64(len(s.offIdx))*offsetEntrySize); err != nil {
			return indexAdd{}, fmt.Errorf("write offset index: %w", err)
		}
	}
	if a.hasTimeOffset {
		if _, err := s.timeIdxFile.WriteAt(a.time.encode(), int64(len(s.timeIdx))*timeEntrySize); err != nil {
			return indexAdd{}, fmt.Errorf("write time index: %w", err)
		}
	}
	return a, nil
}

// seal ends the segment's time index with the entry for the whole segment
// and closes the index files. Callers hold Log.mu when s is shared.
func (s *segment) seal() error {
	var err error
	if s.next > s.base {
		e := timeEntry{ts: s.maxTs, rel: uint32(s.next - s.base)}
		if s.timeIdxFile != nil {
			if _, werr := s.timeIdxFile.WriteAt(e.encode(), int64(len(s.timeIdx))*timeEntrySize); werr != nil {
				err = fmt.Errorf("seal time index: %w", werr)
			}
		}
		s.timeIdx = append(s.timeIdx, e)
	}
	return errors.Join(err, s.closeIndexFiles())
}

// writeIndexes replaces the index files with the in-memory indexes, leaving
// them open for appends when keepOpen.
func (s *segment) writeIndexes(keepOpen bool) error {
	if err := s.closeIndexFiles(); err != nil {
		return err
	}
	var err error
	s.idxFile, s.timeIdxFile, err = writeIndexFiles(s.indexPath(), s.timeIndexPath(), s.offIdx, s.timeIdx)
	if err != nil {
		return fmt.Errorf("rewrite indexes of %s: %w", s.logPath, err)
	}
	if !keepOpen {
		return s.closeIndexFiles()
	}
	return nil
}

func (s *segment) closeIndexFiles() error {
	var errs []error
	for _, f := range []**os.File{&s.idxFile, &s.timeIdxFile} {
		if *f != nil {
			errs = append(errs, (*f).Close())
			*f = nil
		}
	}
	return errors.Join(errs...)
}

// sync fsyncs the segment file if it was written since the last sync. Index
// files are not synced (see index.go).
func (s *segment) sync() error {
	if !s.dirty {
		return nil
	}
	if err := SyncFile(s.f, FsyncSegment); err != nil {
		return fmt.Errorf("sync %s: %w", s.logPath, err)
	}
	s.dirty = false
	return nil
}

// close closes the segment's files. Reads of s that are in flight fail with
// os.ErrClosed.
func (s *segment) close() error {
	if s.released {
		return nil
	}
	s.released = true
	return errors.Join(s.closeIndexFiles(), s.f.Close())
}

// remove closes the segment and deletes its three files.
func (s *segment) remove() error {
	errs := []error{s.close()}
	for _, p := range []string{s.logPath, s.indexPath(), s.timeIndexPath()} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// segView is a copy, taken under Log.mu, of what a reader needs from a
// segment; with it the reader works without the lock.
type segView struct {
	seg     *segment
	size    int64
	next    int64
	offIdx  []offsetEntry
	timeIdx []timeEntry
}

// view copies s's published state. Callers hold Log.mu (read or write).
func (s *segment) view() segView {
	return segView{seg: s, size: s.size, next: s.next, offIdx: s.offIdx, timeIdx: s.timeIdx}
}

// seek finds the frame holding offset (base <= offset < v.next): it starts at
// the offset index's floor entry and steps over frames by their headers.
func (v segView) seek(offset int64, buf *[framePreambleSize]byte) (int64, preamble, error) {
	pos := floorPosition(v.offIdx, uint32(offset-v.seg.base))
	for pos < v.size {
		p, err := readPreamble(v.seg.f, pos, v.size, buf)
		if err != nil {
			return 0, preamble{}, fmt.Errorf("%s: %w", v.seg.logPath, err)
		}
		if p.baseOffset > offset {
			return 0, preamble{}, fmt.Errorf("%w: %s: frame at %d starts at offset %d, past %d", ErrCorruptBatch, v.seg.logPath, pos, p.baseOffset, offset)
		}
		if p.nextOffset() > offset {
			return pos, p, nil
		}
		pos += p.size()
	}
	return 0, preamble{}, fmt.Errorf("%w: %s: offset %d not found before byte %d", ErrCorruptBatch, v.seg.logPath, offset, v.size)
}
