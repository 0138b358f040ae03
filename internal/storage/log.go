package storage

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Defaults for a zero Config.
const (
	DefaultSegmentBytes       = 1 << 30
	DefaultIndexIntervalBytes = 4096
)

// Config tunes a Log. The zero value means the defaults.
type Config struct {
	// SegmentBytes: a new segment is rolled when appending a batch would
	// take the active one past this size. A batch larger than SegmentBytes
	// still goes in, alone in its segment. At most math.MaxInt32 (index
	// positions are uint32).
	SegmentBytes int64
	// IndexIntervalBytes is the number of bytes of batches between two
	// entries of a segment's sparse offset index.
	IndexIntervalBytes int
}

func (c Config) withDefaults() (Config, error) {
	if c.SegmentBytes == 0 {
		c.SegmentBytes = DefaultSegmentBytes
	}
	if c.IndexIntervalBytes == 0 {
		c.IndexIntervalBytes = DefaultIndexIntervalBytes
	}
	if c.SegmentBytes < 0 || c.SegmentBytes > math.MaxInt32 {
		return c, fmt.Errorf("segment bytes %d: want 1..%d", c.SegmentBytes, math.MaxInt32)
	}
	if c.IndexIntervalBytes < 0 {
		return c, fmt.Errorf("index interval bytes %d: want at least 1", c.IndexIntervalBytes)
	}
	return c, nil
}

// SegmentInfo describes one segment.
type SegmentInfo struct {
	BaseOffset   int64  // offset of its first record
	NextOffset   int64  // offset after its last record (== BaseOffset when empty)
	Bytes        int64  // size of its .log file
	MaxTimestamp int64  // largest record timestamp (ms), -1 when empty
	File         string // name of its .log file in the log directory
}

// Log is the on-disk log of one partition replica. See the package
// documentation for who may call what concurrently.
type Log struct {
	dir    string
	cfg    Config
	logger *slog.Logger

	// wmu serializes the writing methods; each holds it throughout.
	wmu      sync.Mutex
	frameBuf []byte // scratch for Append (wmu)
	snapSeq  int    // number of the last snapshot staging directory (wmu)
	dirDirty bool   // files created or removed since the directory was last fsynced (wmu)

	// mu guards logState and closed. Both are changed only with wmu held
	// as well, so the writing methods read them without mu.
	mu sync.RWMutex
	logState
	closed bool
}

// logState is what Open derives from a log directory.
type logState struct {
	// segs holds the segments oldest first; it is never empty and the last
	// one is active. Offsets are contiguous: segs[i+1].base == segs[i].next.
	// The slice is never modified in place, only re-sliced or appended to,
	// so a reader may keep a copy after releasing mu.
	segs []*segment
	// logStart is the first retained offset: segs[0].base <= logStart <=
	// EndOffset, and every segment but the last has next > logStart.
	logStart int64
	// lastRaftIndex is the highest Raft index applied:
	// max(ckptRaftIndex, the Raft index of the last stored batch).
	lastRaftIndex uint64
	// ckptRaftIndex is the Raft index recorded in checkpoint.json.
	ckptRaftIndex uint64
}

func (st *logState) active() *segment { return st.segs[len(st.segs)-1] }
func (st *logState) endOffset() int64 { return st.active().next }

// Open opens the log in dir, creating an empty one (EndOffset 0) when dir
// does not exist. It repairs what a crash left behind: a torn or corrupt
// batch cuts the log there (logged with slog), indexes that do not match
// their segment are rebuilt, and a Restore interrupted by a crash is finished
// or undone. logger may be nil.
func Open(dir string, cfg Config, logger *slog.Logger) (*Log, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("open log %s: %w", dir, err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	dir = filepath.Clean(dir) // Restore's siblings are DIR.restore and DIR.old
	if err := finishSwap(dir, logger); err != nil {
		return nil, fmt.Errorf("open log %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	st, err := load(dir, cfg, logger)
	if err != nil {
		return nil, fmt.Errorf("open log %s: %w", dir, err)
	}
	return &Log{dir: dir, cfg: cfg, logger: logger, logState: st, dirDirty: true}, nil
}

// load reads a log directory: the checkpoint, then every segment in order.
// Sealed segments are loaded from their indexes when those match; the last
// segment, and any whose indexes do not match, are scanned. A damaged frame
// cuts the log there: its segment is truncated and later ones removed.
func load(dir string, cfg Config, logger *slog.Logger) (st logState, err error) {
	ckpt, err := readCheckpoint(dir)
	if err != nil {
		return st, err
	}
	bases, err := listSegments(dir, logger)
	if err != nil {
		return st, err
	}
	defer func() {
		if err != nil {
			for _, s := range st.segs {
				s.close()
			}
		}
	}()
	var (
		prevRaft uint64
		rebuilt  []bool // per segment of st.segs: its indexes come from a scan
	)
	for i, base := range bases {
		if n := len(st.segs); n > 0 && base != st.segs[n-1].next {
			logger.Warn("storage: segment does not follow the one before; removing it and later segments",
				"dir", dir, "segment", segmentFile(base), "want_base", st.segs[n-1].next)
			removeSegmentFiles(dir, bases[i:], logger)
			break
		}
		s, size, err := openSegment(dir, base)
		if err != nil {
			return st, err
		}
		st.segs = append(st.segs, s)
		if i < len(bases)-1 {
			lerr := s.loadSealed(size, prevRaft)
			if lerr == nil {
				rebuilt = append(rebuilt, false)
				prevRaft = s.lastRaftIndex
				continue
			}
			logger.Info("storage: rebuilding segment indexes", "segment", s.logPath, "reason", lerr)
		}
		rebuilt = append(rebuilt, true)
		cut, err := scanAndCut(s, size, cfg.IndexIntervalBytes, prevRaft, logger)
		if err != nil {
			return st, err
		}
		prevRaft = max(prevRaft, s.lastRaftIndex)
		if cut {
			removeSegmentFiles(dir, bases[i+1:], logger)
			break
		}
	}
	if len(st.segs) == 0 {
		s, err := createSegment(dir, max(ckpt.LogStartOffset, 0))
		if err != nil {
			return st, err
		}
		st.segs, rebuilt = append(st.segs, s), append(rebuilt, true)
	}
	// The last segment is the active one: it must come from a scan (it may
	// have been sealed when later segments were removed above).
	last := len(st.segs) - 1
	if !rebuilt[last] {
		s, prevRaft := st.segs[last], uint64(0)
		if last > 0 {
			prevRaft = st.segs[last-1].lastRaftIndex
		}
		if _, err := scanAndCut(s, s.size, cfg.IndexIntervalBytes, prevRaft, logger); err != nil {
			return st, err
		}
		rebuilt[last] = true
	}
	for i, s := range st.segs {
		switch {
		case i == last:
			err = s.writeIndexes(true)
		case rebuilt[i]:
			if err = s.seal(); err == nil {
				err = s.writeIndexes(false)
			}
		}
		if err != nil {
			return st, err
		}
	}
	st.ckptRaftIndex = ckpt.RaftIndex
	st.lastRaftIndex = max(ckpt.RaftIndex, prevRaft)
	st.logStart = max(ckpt.LogStartOffset, st.segs[0].base)
	if end := st.endOffset(); st.logStart > end {
		logger.Warn("storage: log ends before its checkpointed start offset; records were lost",
			"dir", dir, "log_start_offset", st.logStart, "log_end_offset", end)
	}
	drop, roll := trimPlan(st.segs, st.logStart)
	if roll {
		s, err := createSegment(dir, st.logStart)
		if err != nil {
			return st, err
		}
		st.segs = append(st.segs, s)
	}
	for _, s := range st.segs[:drop] {
		logger.Info("storage: removing segment below the log start offset", "segment", s.logPath, "log_start_offset", st.logStart)
		if err := s.remove(); err != nil {
			return st, fmt.Errorf("remove %s: %w", s.logPath, err)
		}
	}
	st.segs = st.segs[drop:]
	return st, nil
}

// scanAndCut rebuilds s from a scan of its size bytes. When the scan stops
// at a torn or corrupt frame, it truncates the file there, logs what was cut,
// and reports cut.
func scanAndCut(s *segment, size int64, interval int, prevRaft uint64, logger *slog.Logger) (cut bool, err error) {
	stop := s.rebuild(size, interval, prevRaft)
	if stop == nil {
		return false, nil
	}
	logger.Warn("storage: cutting the log at a torn or corrupt batch",
		"segment", s.logPath, "position", s.size, "bytes_cut", size-s.size,
		"first_offset_cut", s.next, "reason", stop)
	if err := s.f.Truncate(s.size); err != nil {
		return true, fmt.Errorf("truncate %s: %w", s.logPath, err)
	}
	return true, nil
}

// listSegments returns the base offsets of the segment files in dir, in
// order. It removes what only a crash leaves: snapshot staging directories,
// a temporary checkpoint, index files without a segment.
func listSegments(dir string, logger *slog.Logger) ([]int64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list segments: %w", err)
	}
	var (
		bases   []int64
		hasLog  = map[int64]bool{}
		indexes = map[string]int64{}
	)
	for _, e := range entries {
		name := e.Name()
		switch {
		case e.IsDir() && strings.HasPrefix(name, snapshotDirPrefix):
			if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
				return nil, fmt.Errorf("remove stale snapshot: %w", err)
			}
		case name == checkpointName+".tmp":
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				return nil, fmt.Errorf("remove stale checkpoint: %w", err)
			}
		case strings.HasSuffix(name, ".log"):
			base, ok := parseBase(name, ".log")
			if !ok {
				return nil, fmt.Errorf("unexpected file %s in log directory", filepath.Join(dir, name))
			}
			bases = append(bases, base)
			hasLog[base] = true
		case strings.HasSuffix(name, ".index"), strings.HasSuffix(name, ".timeindex"):
			if base, ok := parseBase(name, filepath.Ext(name)); ok {
				indexes[name] = base
			}
		}
	}
	for name, base := range indexes {
		if !hasLog[base] {
			logger.Info("storage: removing index without segment", "file", filepath.Join(dir, name))
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				return nil, fmt.Errorf("remove orphan index: %w", err)
			}
		}
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })
	return bases, nil
}

// parseBase parses "%020d"+ext.
func parseBase(name, ext string) (int64, bool) {
	digits := strings.TrimSuffix(name, ext)
	if len(digits) != 20 {
		return 0, false
	}
	base, err := strconv.ParseInt(digits, 10, 64)
	return base, err == nil && base >= 0
}

// removeSegmentFiles deletes the segments at bases (not opened), logging
// what each held.
func removeSegmentFiles(dir string, bases []int64, logger *slog.Logger) {
	for _, base := range bases {
		s := newSegment(dir, base, nil)
		s.released = true
		var size int64
		if fi, err := os.Stat(s.logPath); err == nil {
			size = fi.Size()
		}
		logger.Warn("storage: removing segment after the cut", "segment", s.logPath, "base_offset", base, "bytes_cut", size)
		if err := s.remove(); err != nil {
			logger.Error("storage: remove segment", "segment", s.logPath, "err", err)
		}
	}
}

// Append stores b as the next batch, at offset EndOffset(), and returns that
// offset. raftIndex is the index of the Raft entry carrying b (Raft indexes
// start at 1); it must be above LastRaftIndex, else nothing is stored and the
// error wraps ErrAlreadyApplied. A batch that fails Validate is refused (ErrCorruptBatch).
// Append does not fsync.
func (l *Log) Append(raftIndex uint64, b Batch) (int64, error) {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.closed {
		return 0, ErrClosed
	}
	if raftIndex <= l.lastRaftIndex {
		return 0, fmt.Errorf("append at Raft index %d, last applied %d: %w", raftIndex, l.lastRaftIndex, ErrAlreadyApplied)
	}
	if len(b) > maxBatchSize {
		return 0, fmt.Errorf("append %d bytes: %w", len(b), ErrBatchTooLarge)
	}
	if err := b.Validate(); err != nil {
		return 0, fmt.Errorf("append: %w", err)
	}
	s := l.active()
	frameLen := int64(frameHeaderSize + len(b))
	if s.size > 0 && (s.size+frameLen > l.cfg.SegmentBytes || s.next-s.base+int64(b.Count()) > math.MaxUint32) {
		var err error
		if s, err = l.roll(s.next); err != nil {
			return 0, fmt.Errorf("append: %w", err)
		}
	}
	h := frameHeader{baseOffset: s.next, length: int32(frameLen - 12), raftIndex: raftIndex}
	a, err := s.write(h, b, l.cfg.IndexIntervalBytes, &l.frameBuf)
	if err != nil {
		return 0, fmt.Errorf("append: %w", err)
	}
	l.mu.Lock()
	s.advance(h, b, a)
	l.lastRaftIndex = raftIndex
	l.mu.Unlock()
	return h.baseOffset, nil
}

// roll seals the active segment and starts a new, empty one at base.
// Callers hold wmu.
func (l *Log) roll(base int64) (*segment, error) {
	s, err := createSegment(l.dir, base)
	if err != nil {
		return nil, err
	}
	l.dirDirty = true
	old := l.active()
	l.mu.Lock()
	serr := old.seal()
	l.segs = append(l.segs, s)
	l.mu.Unlock()
	if serr != nil {
		// The in-memory index is complete; Open rebuilds the file.
		l.logger.Warn("storage: sealing segment", "segment", old.logPath, "err", serr)
	}
	return s, nil
}

// Read returns the records with offsets in [offset, upTo), in order. upTo is
// the caller's bound (the high watermark); it is lowered to EndOffset. Read
// adds records while their encoded size in total stays within maxBytes, but
// always returns at least one record when offset < upTo. offset == upTo gives
// no records and no error; an offset below StartOffset or above EndOffset
// gives ErrOffsetOutOfRange (wrapped).
func (l *Log) Read(offset int64, maxBytes int, upTo int64) ([]Record, error) {
	for attempt := 0; ; attempt++ {
		recs, err := l.read(offset, maxBytes, upTo)
		if errors.Is(err, os.ErrClosed) && attempt < 3 {
			continue // a segment was deleted or swapped during the read: look again
		}
		return recs, err
	}
}

func (l *Log) read(offset int64, maxBytes int, upTo int64) ([]Record, error) {
	var (
		out   []Record
		total int
		full  bool
	)
	err := l.walk(offset, upTo, func(v segView, pos int64, p preamble) (bool, error) {
		b, err := readBatch(v.seg.f, pos, p)
		if err != nil {
			return false, fmt.Errorf("%s: %w", v.seg.logPath, err)
		}
		err = b.each(p.baseOffset, func(r Record, size int) {
			switch {
			case full || r.Offset < offset:
			case r.Offset >= upTo || (len(out) > 0 && total+size > maxBytes):
				full = true
			default:
				out = append(out, r)
				total += size
			}
		})
		if err != nil {
			return false, fmt.Errorf("%s: batch at %d: %w", v.seg.logPath, pos, err)
		}
		return !full, nil
	})
	if err != nil && len(out) > 0 {
		return out, nil // what was read before the error: the next Read reports it
	}
	return out, err
}

// walk calls visit with the frames from the one holding offset, in offset
// order, each with its segment and position, until visit returns false or
// an error, the frame visited ends at or past upTo, or the frames run out.
// upTo is lowered to EndOffset; offset >= upTo visits nothing; an offset
// below StartOffset or above EndOffset is ErrOffsetOutOfRange (wrapped).
// It holds the read lock only to copy segment positions (Read's and
// ReadBatches' concurrency), checks each frame's headers (readPreamble) and
// that offsets follow from frame to frame, and returns visit's error or the
// first damage found.
func (l *Log) walk(offset, upTo int64, visit func(v segView, pos int64, p preamble) (bool, error)) error {
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		return ErrClosed
	}
	start, end := l.logStart, l.endOffset()
	if offset < start || offset > end {
		l.mu.RUnlock()
		return fmt.Errorf("read at offset %d, log holds [%d, %d): %w", offset, start, end, ErrOffsetOutOfRange)
	}
	upTo = min(upTo, end)
	if offset >= upTo {
		l.mu.RUnlock()
		return nil
	}
	segs := l.segs
	i := segmentIndex(segs, offset)
	v := segs[i].view()
	l.mu.RUnlock()

	var buf [framePreambleSize]byte
	pos, p, err := v.seek(offset, &buf)
	if err != nil {
		return err
	}
	for {
		more, err := visit(v, pos, p)
		if err != nil || !more {
			return err
		}
		next := p.nextOffset()
		if next >= upTo {
			return nil
		}
		if pos += p.size(); pos >= v.size {
			if i++; i >= len(segs) {
				return nil
			}
			l.mu.RLock()
			v = segs[i].view()
			l.mu.RUnlock()
			pos = 0
		}
		if p, err = readPreamble(v.seg.f, pos, v.size, &buf); err != nil {
			return fmt.Errorf("%s: %w", v.seg.logPath, err)
		}
		if p.baseOffset != next {
			return fmt.Errorf("%w: %s: frame at %d has offset %d, want %d", ErrCorruptBatch, v.seg.logPath, pos, p.baseOffset, next)
		}
	}
}

// segmentIndex is the index of the segment holding offset, which is at or
// above segs[0].base.
func segmentIndex(segs []*segment, offset int64) int {
	return sort.Search(len(segs), func(i int) bool { return segs[i].base > offset }) - 1
}

// StartOffset is the log start offset: the first retained offset.
func (l *Log) StartOffset() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.logStart
}

// EndOffset is the log end offset: the offset the next record will get.
func (l *Log) EndOffset() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.endOffset()
}

// LastRaftIndex is the highest Raft index applied to this log: by the last
// stored batch, or by the entry that last moved the log start (or the
// snapshot restored), whichever is higher.
func (l *Log) LastRaftIndex() uint64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.lastRaftIndex
}

// OffsetForTimestamp finds the first retained record (in offset order) with
// a timestamp at or after ts. ok is false when there is none. An I/O error is
// logged and reported as none.
func (l *Log) OffsetForTimestamp(ts int64) (offset, timestamp int64, ok bool) {
	for attempt := 0; ; attempt++ {
		offset, timestamp, ok, err := l.offsetForTimestamp(ts)
		switch {
		case err == nil:
			return offset, timestamp, ok
		case errors.Is(err, os.ErrClosed) && attempt < 3:
			continue
		case !errors.Is(err, ErrClosed):
			l.logger.Error("storage: offset for timestamp", "dir", l.dir, "timestamp", ts, "err", err)
		}
		return 0, 0, false
	}
}

func (l *Log) offsetForTimestamp(ts int64) (int64, int64, bool, error) {
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		return 0, 0, false, ErrClosed
	}
	start := l.logStart
	var views []segView
	for _, s := range l.segs {
		if s.next > max(s.base, start) && s.maxTs >= ts {
			views = append(views, s.view())
		}
	}
	l.mu.RUnlock()

	var buf [framePreambleSize]byte
	for _, v := range views {
		from := max(v.seg.base+int64(timeFloor(v.timeIdx, ts)), start)
		if from >= v.next {
			continue
		}
		pos, p, err := v.seek(from, &buf)
		if err != nil {
			return 0, 0, false, err
		}
		for {
			if p.batch.MaxTimestamp() >= ts {
				b, err := readBatch(v.seg.f, pos, p)
				if err != nil {
					return 0, 0, false, fmt.Errorf("%s: %w", v.seg.logPath, err)
				}
				var found *Record
				err = b.each(p.baseOffset, func(r Record, _ int) {
					if found == nil && r.Offset >= from && r.Timestamp >= ts {
						found = &r
					}
				})
				if err != nil {
					return 0, 0, false, fmt.Errorf("%s: batch at %d: %w", v.seg.logPath, pos, err)
				}
				if found != nil {
					return found.Offset, found.Timestamp, true, nil
				}
			}
			if pos += p.size(); pos >= v.size {
				break
			}
			if p, err = readPreamble(v.seg.f, pos, v.size, &buf); err != nil {
				return 0, 0, false, fmt.Errorf("%s: %w", v.seg.logPath, err)
			}
		}
	}
	return 0, 0, false, nil
}

// Segments describes the segments, oldest first.
func (l *Log) Segments() []SegmentInfo {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]SegmentInfo, len(l.segs))
	for i, s := range l.segs {
		ts := s.maxTs
		if s.next == s.base {
			ts = -1
		}
		out[i] = SegmentInfo{BaseOffset: s.base, NextOffset: s.next, Bytes: s.size, MaxTimestamp: ts, File: filepath.Base(s.logPath)}
	}
	return out
}

// Sync makes everything appended so far durable: it fsyncs the segments
// written since the last Sync, and the directory when files were created or
// removed.
func (l *Log) Sync() error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.closed {
		return ErrClosed
	}
	return l.sync()
}

func (l *Log) sync() error {
	for _, s := range l.segs {
		if err := s.sync(); err != nil {
			return err
		}
	}
	if l.dirDirty {
		if err := SyncDir(l.dir); err != nil {
			return err
		}
		l.dirDirty = false
	}
	return nil
}

// Close syncs and closes the log. Reads in flight and every later call fail
// with ErrClosed; Close itself may be called again (it does nothing).
// Snapshots taken before Close stay readable until released.
func (l *Log) Close() error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.closed {
		return nil
	}
	err := l.sync()
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	errs := []error{err}
	for _, s := range l.segs {
		errs = append(errs, s.close())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close log %s: %w", l.dir, err)
	}
	return nil
}
