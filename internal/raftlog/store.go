package raftlog

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// Store is one group's raft.LogStore on the shared log. Raft calls it from
// its main goroutine (StoreLogs, a conflicting suffix's DeleteRange), its
// snapshot goroutine (a compacted prefix's DeleteRange) and its
// replication goroutines (GetLog); every write returns only once the fsync
// that covers it has returned.
type Store struct {
	l      *Log
	g      *group
	closed atomic.Bool
}

var (
	_ raft.LogStore          = (*Store)(nil)
	_ raft.MonotonicLogStore = (*Store)(nil)
)

// IsMonotonic tells raft that a group holds only consecutive entries, so
// that after installing or restoring a snapshot it removes every older
// entry instead of keeping TrailingLogs of them below a gap.
func (s *Store) IsMonotonic() bool { return true }

// Group opens the view of group name (created empty if the log has none).
// One view per group may be open at a time.
func (l *Log) Group(name string) (*Store, error) {
	if name == "" || len(name) > math.MaxUint16 {
		return nil, fmt.Errorf("raft log group name %q: must be 1 to %d bytes", name, math.MaxUint16)
	}
	l.qmu.Lock()
	closing := l.closing
	l.qmu.Unlock()
	if closing {
		return nil, ErrClosed
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.groups[name]
	if g == nil {
		g = &group{name: name}
		l.groups[name] = g
	}
	if g.open {
		return nil, fmt.Errorf("%w: %s", ErrGroupOpen, name)
	}
	g.open = true
	return &Store{l: l, g: g}, nil
}

// Close releases the view; the group's entries stay.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.l.mu.Lock()
	s.g.open = false
	s.l.mu.Unlock()
	return nil
}

// Drop deletes every entry of the group durably (its partition was
// deleted) and closes the view.
func (s *Store) Drop() error {
	if s.closed.Load() {
		return ErrClosed
	}
	err := s.DeleteRange(0, math.MaxUint64)
	s.Close()
	return err
}

// state returns the group's first and last index (0, 0 when empty) and
// the log's failure. Caller holds mu.
func (s *Store) state() (first, last uint64, err error) {
	if s.closed.Load() {
		return 0, 0, ErrClosed
	}
	if s.l.failed != nil {
		return 0, 0, s.l.failed
	}
	if len(s.g.pos) == 0 {
		return 0, 0, nil
	}
	return s.g.base, s.g.last(), nil
}

func (s *Store) FirstIndex() (uint64, error) {
	s.l.mu.RLock()
	defer s.l.mu.RUnlock()
	first, _, err := s.state()
	return first, err
}

func (s *Store) LastIndex() (uint64, error) {
	s.l.mu.RLock()
	defer s.l.mu.RUnlock()
	_, last, err := s.state()
	return last, err
}

// GetLog reads entry index (raft.ErrLogNotFound if the group does not hold
// it). The read is one pread of a page-cache-warm file, under the read
// lock so that its segment cannot be removed meanwhile.
func (s *Store) GetLog(index uint64, out *raft.Log) error {
	s.l.mu.RLock()
	first, last, err := s.state()
	if err != nil || first == 0 || index < first || index > last {
		s.l.mu.RUnlock()
		if err != nil {
			return err
		}
		return raft.ErrLogNotFound
	}
	p := s.g.pos[index-first]
	buf := make([]byte, p.n)
	_, err = p.seg.f.ReadAt(buf, p.off)
	s.l.mu.RUnlock()
	if err != nil {
		return fmt.Errorf("read raft log %s at %d: %w", p.seg.path, p.off, err)
	}
	if _, err := decodeBody(buf, out); err != nil {
		return err
	}
	if out.Index != index {
		return fmt.Errorf("%w: group %s: entry %d found where %d should be", ErrCorrupt, s.g.name, out.Index, index)
	}
	return nil
}

func (s *Store) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs appends consecutive entries; the first may replace the
// group's entries from its index on (raft deletes a conflicting suffix
// first). A first entry past the group's last one plus one restarts the
// group there: raft appends past a gap only after a snapshot that covers
// everything before it (a follower that installed the leader's snapshot,
// or crashed before removing its older entries), and the group keeps
// only consecutive entries. It returns once they are on disk.
func (s *Store) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	size := frameHeader + 3 + len(s.g.name) + 4
	for i, l := range logs {
		if i > 0 && l.Index != logs[i-1].Index+1 {
			return fmt.Errorf("%w: group %s: entry %d after %d", ErrGap, s.g.name, l.Index, logs[i-1].Index)
		}
		size += bodySize(l)
	}
	s.l.mu.RLock()
	_, _, err := s.state()
	s.l.mu.RUnlock()
	if err != nil {
		return err
	}
	buf, start := appendHeader(make([]byte, 0, size), kindEntries, s.g.name)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(logs)))
	o := &op{g: s.g, kind: kindEntries, bodies: make([]int, len(logs))}
	for i, l := range logs {
		o.bodies[i] = len(buf)
		buf = appendBody(buf, l)
	}
	o.buf = finishFrame(buf, start)
	return s.l.submit(o)
}

// DeleteRange deletes entries min..max (inclusive): a prefix (compaction
// after a snapshot) or a suffix (a conflict); a range strictly inside the
// group's entries is refused (ErrHole). The delete is recorded in the log
// and synced before it returns, so recovery does not bring the entries
// back.
func (s *Store) DeleteRange(lo, hi uint64) error {
	s.l.mu.RLock()
	first, last, err := s.state()
	s.l.mu.RUnlock()
	if err != nil {
		return err
	}
	if lo > hi || first == 0 || hi < first || lo > last {
		return nil
	}
	if lo > first && hi < last {
		return fmt.Errorf("%w: group %s holds %d..%d, asked to delete %d..%d", ErrHole, s.g.name, first, last, lo, hi)
	}
	buf, start := appendHeader(make([]byte, 0, frameHeader+3+len(s.g.name)+16), kindDelete, s.g.name)
	buf = binary.LittleEndian.AppendUint64(buf, lo)
	buf = binary.LittleEndian.AppendUint64(buf, hi)
	return s.l.submit(&op{g: s.g, kind: kindDelete, buf: finishFrame(buf, start), lo: lo, hi: hi})
}
