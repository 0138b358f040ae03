package storage

// The snapshot stream, as WriteTo writes and Restore reads it (fixed-width
// integers are big-endian):
//
//	magic          [8]byte  "TAPESLOG"
//	version        uint32   snapshotVersion
//	logStart       int64    StartOffset at the snapshot
//	endOffset      int64    EndOffset at the snapshot
//	lastRaftIndex  uint64   LastRaftIndex at the snapshot
//	segmentCount   uint32   at least 1
//	crc            uint32   CRC32C of the 40 bytes before it
//	segmentCount times, oldest first:
//	    baseOffset  int64
//	    length      int64   bytes of frames that follow
//	    crc         uint32  CRC32C of the 16 bytes before it
//	    frames      the segment file's first length bytes, as stored (see frame.go)
//
// Every frame carries its own CRCs, so Restore checks all of the data.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
)

const (
	snapshotMagic      = "TAPESLOG"
	snapshotVersion    = 1
	snapshotHeaderSize = 44
	snapSegHeaderSize  = 20
	snapshotDirPrefix  = ".snap-"

	// Restore's siblings of the log directory.
	restoreSuffix = ".restore" // the snapshot being written out
	oldSuffix     = ".old"     // the log being replaced
)

// Snapshot is a point-in-time copy of a Log, taken by Log.Snapshot. It holds
// hard links to the segment files (in DIR/.snap-N) and the active segment's
// size at the time, so appends, retention and even a Restore of the Log may
// go on while it is written out. OpenSnapshotDir rebuilds one from links kept
// elsewhere (LinkInto) and its Manifest. WriteTo and Release must not be
// called concurrently with each other.
type Snapshot struct {
	dir           string // staging directory, or the directory OpenSnapshotDir read
	keepDir       bool   // dir is not ours to remove (OpenSnapshotDir)
	logStart      int64
	endOffset     int64
	lastRaftIndex uint64
	segs          []snapSegment
}

type snapSegment struct {
	base int64
	size int64 // bytes of the file that belong to the snapshot
	f    *os.File
}

// Snapshot fsyncs the log and captures it: it is quick (hard links, no data
// copied) and is meant to be called from Raft's FSM.Snapshot. The caller
// must Release the result.
func (l *Log) Snapshot() (*Snapshot, error) {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	if err := l.sync(); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	l.snapSeq++
	dir := filepath.Join(l.dir, fmt.Sprintf("%s%d", snapshotDirPrefix, l.snapSeq))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	snap := &Snapshot{dir: dir, logStart: l.logStart, endOffset: l.endOffset(), lastRaftIndex: l.lastRaftIndex}
	for _, s := range l.segs {
		link := filepath.Join(dir, filepath.Base(s.logPath))
		if err := os.Link(s.logPath, link); err != nil {
			return nil, errors.Join(fmt.Errorf("snapshot: %w", err), snap.Release())
		}
		f, err := os.Open(link)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("snapshot: %w", err), snap.Release())
		}
		snap.segs = append(snap.segs, snapSegment{base: s.base, size: s.size, f: f})
	}
	return snap, nil
}

// StartOffset is the Log's StartOffset at the snapshot.
func (s *Snapshot) StartOffset() int64 { return s.logStart }

// EndOffset is the Log's EndOffset at the snapshot.
func (s *Snapshot) EndOffset() int64 { return s.endOffset }

// LastRaftIndex is the Log's LastRaftIndex at the snapshot.
func (s *Snapshot) LastRaftIndex() uint64 { return s.lastRaftIndex }

// WriteTo writes the snapshot stream (see the top of snapshot.go) to w.
func (s *Snapshot) WriteTo(w io.Writer) (int64, error) {
	cw := &countingWriter{w: w}
	hdr := make([]byte, snapshotHeaderSize)
	copy(hdr, snapshotMagic)
	binary.BigEndian.PutUint32(hdr[8:], snapshotVersion)
	binary.BigEndian.PutUint64(hdr[12:], uint64(s.logStart))
	binary.BigEndian.PutUint64(hdr[20:], uint64(s.endOffset))
	binary.BigEndian.PutUint64(hdr[28:], s.lastRaftIndex)
	binary.BigEndian.PutUint32(hdr[36:], uint32(len(s.segs)))
	binary.BigEndian.PutUint32(hdr[40:], crc32.Checksum(hdr[:40], castagnoli))
	if _, err := cw.Write(hdr); err != nil {
		return cw.n, fmt.Errorf("write snapshot: %w", err)
	}
	for _, seg := range s.segs {
		var sh [snapSegHeaderSize]byte
		binary.BigEndian.PutUint64(sh[0:], uint64(seg.base))
		binary.BigEndian.PutUint64(sh[8:], uint64(seg.size))
		binary.BigEndian.PutUint32(sh[16:], crc32.Checksum(sh[:16], castagnoli))
		if _, err := cw.Write(sh[:]); err != nil {
			return cw.n, fmt.Errorf("write snapshot: %w", err)
		}
		n, err := io.Copy(cw, io.NewSectionReader(seg.f, 0, seg.size))
		if err == nil && n != seg.size {
			// The file is shorter than the snapshot recorded: the stream
			// would be short, so fail rather than end early.
			err = fmt.Errorf("%d of %d bytes: %w", n, seg.size, io.ErrUnexpectedEOF)
		}
		if err != nil {
			return cw.n, fmt.Errorf("write snapshot segment %d: %w", seg.base, err)
		}
	}
	return cw.n, nil
}

// Release closes the snapshot's files and removes its staging directory (a
// Snapshot from OpenSnapshotDir leaves its directory alone). It may be called
// more than once.
func (s *Snapshot) Release() error {
	var errs []error
	for _, seg := range s.segs {
		errs = append(errs, seg.f.Close())
	}
	s.segs = nil
	if !s.keepDir {
		errs = append(errs, os.RemoveAll(s.dir))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("release snapshot: %w", err)
	}
	return nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Restore replaces the whole log with the snapshot r holds. It writes the
// snapshot to DIR.restore, checking every frame and batch, fsyncs it, then
// swaps it for DIR by renames (Open finishes a swap a crash interrupted).
// Afterwards StartOffset, EndOffset, LastRaftIndex and every record are the
// snapshotted log's. A stream that is not a valid snapshot gives
// ErrBadSnapshot and leaves the log as it was; a failure during the swap
// leaves the Log closed (ErrClosed), to be reopened.
func (l *Log) Restore(r io.Reader) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.closed {
		return ErrClosed
	}
	tmp, old := l.dir+restoreSuffix, l.dir+oldSuffix
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if err := writeSnapshotDir(tmp, r, l.cfg); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("restore: %w", err)
	}
	if err := os.RemoveAll(old); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("restore: %w", err)
	}
	// Readers keep reading the old segments through their open files until
	// the new state replaces them below.
	if err := os.Rename(l.dir, old); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("restore: %w", err)
	}
	if err := os.Rename(tmp, l.dir); err != nil {
		if uerr := os.Rename(old, l.dir); uerr != nil {
			return l.fail(fmt.Errorf("restore: %w (and putting the old log back: %v)", err, uerr))
		}
		return fmt.Errorf("restore: %w", err)
	}
	if err := SyncDir(filepath.Dir(l.dir)); err != nil {
		return l.fail(fmt.Errorf("restore: %w", err))
	}
	st, err := load(l.dir, l.cfg, l.logger)
	if err != nil {
		return l.fail(fmt.Errorf("restore: reopen: %w", err))
	}
	l.mu.Lock()
	gone := l.segs
	l.logState = st
	l.mu.Unlock()
	l.dirDirty = true
	for _, s := range gone {
		s.close() // reads in flight fail with os.ErrClosed and look again
	}
	if err := os.RemoveAll(old); err != nil {
		l.logger.Warn("storage: removing the replaced log", "dir", old, "err", err)
	}
	return nil
}

// fail closes a Log whose directory can no longer be trusted. Callers hold wmu.
func (l *Log) fail(err error) error {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	for _, s := range l.segs {
		s.close()
	}
	return err
}

// writeSnapshotDir writes the snapshot stream r as a log directory in dir
// (which exists and is empty), checking everything, and fsyncs it.
func writeSnapshotDir(dir string, r io.Reader, cfg Config) (err error) {
	var hdr [snapshotHeaderSize]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return fmt.Errorf("%w: header: %v", ErrBadSnapshot, err)
	}
	if string(hdr[:8]) != snapshotMagic {
		return fmt.Errorf("%w: bad magic %q", ErrBadSnapshot, hdr[:8])
	}
	if got, want := crc32.Checksum(hdr[:40], castagnoli), binary.BigEndian.Uint32(hdr[40:]); got != want {
		return fmt.Errorf("%w: header crc %08x, stored %08x", ErrBadSnapshot, got, want)
	}
	if v := binary.BigEndian.Uint32(hdr[8:]); v != snapshotVersion {
		return fmt.Errorf("%w: version %d, want %d", ErrBadSnapshot, v, snapshotVersion)
	}
	logStart := int64(binary.BigEndian.Uint64(hdr[12:]))
	endOffset := int64(binary.BigEndian.Uint64(hdr[20:]))
	lastRaft := binary.BigEndian.Uint64(hdr[28:])
	count := int(binary.BigEndian.Uint32(hdr[36:]))
	if count < 1 {
		return fmt.Errorf("%w: no segments", ErrBadSnapshot)
	}

	var segs []*segment
	defer func() {
		for _, s := range segs {
			if cerr := s.close(); err == nil && cerr != nil {
				err = cerr
			}
		}
	}()
	var (
		prevRaft uint64
		buf      []byte
	)
	for i := 0; i < count; i++ {
		var sh [snapSegHeaderSize]byte
		if _, err := io.ReadFull(r, sh[:]); err != nil {
			return fmt.Errorf("%w: segment %d header: %v", ErrBadSnapshot, i, err)
		}
		if got, want := crc32.Checksum(sh[:16], castagnoli), binary.BigEndian.Uint32(sh[16:]); got != want {
			return fmt.Errorf("%w: segment %d header crc %08x, stored %08x", ErrBadSnapshot, i, got, want)
		}
		base, length := int64(binary.BigEndian.Uint64(sh[0:])), int64(binary.BigEndian.Uint64(sh[8:]))
		switch {
		case base < 0 || length < 0 || length > math.MaxUint32:
			return fmt.Errorf("%w: segment %d: base %d, %d bytes", ErrBadSnapshot, i, base, length)
		case i > 0 && base != segs[i-1].next:
			return fmt.Errorf("%w: segment %d starts at %d, the one before ends at %d", ErrBadSnapshot, i, base, segs[i-1].next)
		case i < count-1 && length == 0:
			return fmt.Errorf("%w: sealed segment %d is empty", ErrBadSnapshot, i)
		}
		if i > 0 {
			if err := segs[i-1].seal(); err != nil {
				return err
			}
		}
		s, err := createSegment(dir, base)
		if err != nil {
			return err
		}
		segs = append(segs, s)
		sc := newStreamScanner(io.LimitReader(r, length), 0, length)
		for {
			h, b, err := sc.next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return fmt.Errorf("%w: segment %d: %w", ErrBadSnapshot, base, err)
			}
			switch {
			case h.baseOffset != s.next:
				err = fmt.Errorf("frame has offset %d, want %d", h.baseOffset, s.next)
			case h.raftIndex <= prevRaft:
				err = fmt.Errorf("frame at offset %d has Raft index %d after %d", h.baseOffset, h.raftIndex, prevRaft)
			case s.next+int64(b.Count())-s.base > math.MaxUint32:
				err = fmt.Errorf("frame at offset %d overflows the segment", h.baseOffset)
			default:
				err = b.Validate()
			}
			if err != nil {
				return fmt.Errorf("%w: segment %d: %w", ErrBadSnapshot, base, err)
			}
			a, err := s.write(h, b, cfg.IndexIntervalBytes, &buf)
			if err != nil {
				return err
			}
			s.advance(h, b, a)
			prevRaft = h.raftIndex
		}
	}
	end := segs[len(segs)-1].next
	switch {
	case end != endOffset:
		return fmt.Errorf("%w: segments end at %d, header says %d", ErrBadSnapshot, end, endOffset)
	case logStart < segs[0].base || logStart > end:
		return fmt.Errorf("%w: log start %d outside [%d, %d]", ErrBadSnapshot, logStart, segs[0].base, end)
	case lastRaft < prevRaft:
		return fmt.Errorf("%w: last Raft index %d below a batch's %d", ErrBadSnapshot, lastRaft, prevRaft)
	}
	for _, s := range segs {
		if err := s.sync(); err != nil {
			return err
		}
	}
	if err := writeCheckpoint(dir, checkpoint{LogStartOffset: logStart, RaftIndex: lastRaft}); err != nil {
		return err
	}
	return SyncDir(dir)
}

// finishSwap completes or undoes a Restore that a crash interrupted. The
// snapshot in DIR.restore is complete and fsynced before DIR is renamed
// away, so when DIR is missing, DIR.restore (if present) goes in its place,
// else DIR.old goes back. Leftovers are then removed.
func finishSwap(dir string, logger *slog.Logger) error {
	tmp, old := dir+restoreSuffix, dir+oldSuffix
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		for _, from := range []string{tmp, old} {
			if _, err := os.Stat(from); err != nil {
				continue
			}
			logger.Warn("storage: finishing a restore interrupted by a crash", "from", from, "to", dir)
			if err := os.Rename(from, dir); err != nil {
				return fmt.Errorf("finish restore: %w", err)
			}
			break
		}
	}
	for _, p := range []string{tmp, old} {
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("remove restore leftovers: %w", err)
		}
	}
	return nil
}
