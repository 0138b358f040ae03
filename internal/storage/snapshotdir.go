package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// SnapshotManifest is everything WriteTo needs besides the segment files:
// with hard links to those files (LinkInto) it lets a Snapshot be kept in a
// directory of its own and streamed later (OpenSnapshotDir), without copying
// any data. Segment files are append-only (a torn tail is cut at Open only
// past what was synced, and Log.Snapshot syncs first), so a link plus the
// number of bytes recorded here is a stable view of the segment.
type SnapshotManifest struct {
	LogStart      int64             `json:"log_start"`
	EndOffset     int64             `json:"end_offset"`
	LastRaftIndex uint64            `json:"last_raft_index"`
	Segments      []SnapshotSegment `json:"segments"` // oldest first
}

// SnapshotSegment is one segment file of a SnapshotManifest.
type SnapshotSegment struct {
	BaseOffset int64 `json:"base_offset"`
	Bytes      int64 `json:"bytes"` // of the file that belong to the snapshot
}

// Manifest describes s for OpenSnapshotDir.
func (s *Snapshot) Manifest() SnapshotManifest {
	m := SnapshotManifest{LogStart: s.logStart, EndOffset: s.endOffset, LastRaftIndex: s.lastRaftIndex}
	for _, seg := range s.segs {
		m.Segments = append(m.Segments, SnapshotSegment{BaseOffset: seg.base, Bytes: seg.size})
	}
	return m
}

// StreamSize is the exact length of the stream WriteTo writes for m.
func (m SnapshotManifest) StreamSize() int64 {
	n := int64(snapshotHeaderSize)
	for _, seg := range m.Segments {
		n += snapSegHeaderSize + seg.Bytes
	}
	return n
}

// StreamSize is the exact length of the stream WriteTo writes.
func (s *Snapshot) StreamSize() int64 { return s.Manifest().StreamSize() }

// LinkInto hard-links the snapshot's segment files into dir (which must be
// on the same file system as the log), named as in a log directory. It
// syncs neither the files (Log.Snapshot synced them) nor dir: the caller
// syncs dir once it has written what goes with them.
func (s *Snapshot) LinkInto(dir string) error {
	for _, seg := range s.segs {
		if err := os.Link(seg.f.Name(), filepath.Join(dir, segmentFile(seg.base))); err != nil {
			return fmt.Errorf("link snapshot segment %d: %w", seg.base, err)
		}
	}
	return nil
}

// OpenSnapshotDir rebuilds the Snapshot that m describes from the segment
// files LinkInto put in dir. It checks m and that every file holds at least
// the bytes m records. Release closes the files and leaves dir alone.
func OpenSnapshotDir(dir string, m SnapshotManifest) (*Snapshot, error) {
	if err := m.check(); err != nil {
		return nil, fmt.Errorf("open snapshot %s: %w", dir, err)
	}
	snap := &Snapshot{dir: dir, keepDir: true, logStart: m.LogStart, endOffset: m.EndOffset, lastRaftIndex: m.LastRaftIndex}
	for _, seg := range m.Segments {
		f, err := os.Open(filepath.Join(dir, segmentFile(seg.BaseOffset)))
		if err != nil {
			return nil, errors.Join(fmt.Errorf("open snapshot %s: %w", dir, err), snap.Release())
		}
		snap.segs = append(snap.segs, snapSegment{base: seg.BaseOffset, size: seg.Bytes, f: f})
		fi, err := f.Stat()
		if err == nil && fi.Size() < seg.Bytes {
			err = fmt.Errorf("%w: segment %d has %d bytes, the snapshot %d", ErrBadSnapshot, seg.BaseOffset, fi.Size(), seg.Bytes)
		}
		if err != nil {
			return nil, errors.Join(fmt.Errorf("open snapshot %s: %w", dir, err), snap.Release())
		}
	}
	return snap, nil
}

// check is the part of Restore's checks a manifest allows (the frames are
// checked by the Restore that reads the stream).
func (m SnapshotManifest) check() error {
	if len(m.Segments) == 0 {
		return fmt.Errorf("%w: no segments", ErrBadSnapshot)
	}
	for i, seg := range m.Segments {
		switch {
		case seg.BaseOffset < 0 || seg.Bytes < 0:
			return fmt.Errorf("%w: segment %d: base %d, %d bytes", ErrBadSnapshot, i, seg.BaseOffset, seg.Bytes)
		case i > 0 && seg.BaseOffset <= m.Segments[i-1].BaseOffset:
			return fmt.Errorf("%w: segment %d starts at %d, after %d", ErrBadSnapshot, i, seg.BaseOffset, m.Segments[i-1].BaseOffset)
		}
	}
	if m.LogStart < m.Segments[0].BaseOffset || m.LogStart > m.EndOffset {
		return fmt.Errorf("%w: log start %d outside [%d, %d]", ErrBadSnapshot, m.LogStart, m.Segments[0].BaseOffset, m.EndOffset)
	}
	return nil
}
