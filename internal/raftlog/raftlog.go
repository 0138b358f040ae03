// Package raftlog is a write-ahead log shared by all the Raft groups of one
// broker: every group's raft.LogStore is a view of it (Log.Group), and the
// appends of all groups waiting at one moment are written by one goroutine
// and made durable by one fsync (group commit).
//
// The log is a directory of append-only segment files (frame.go has the
// format). Each group keeps in memory where each of its live entries is
// (segment, offset, length), so GetLog is one pread. A new segment starts
// when the active one passes Options.SegmentBytes; the oldest segment is
// removed once no group has a live entry in it. A group that stays small
// and is never compacted (an idle partition's few entries) would pin the
// oldest segment forever, so when a segment starts, the groups pinning the
// oldest ones are carried forward: all their live entries are rewritten in
// one frame (an image) into the new segment, if together they are small
// or the old segments are mostly garbage (see carryForward).
//
// Recovery reads every segment in order and replays its frames (entries,
// deletes, images) with the same rules as the live log, so a DeleteRange
// (a compacted prefix, a conflicting suffix) is never resurrected; a torn
// tail of the last segment (a frame whose CRC or length fails) is cut.
package raftlog

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/tapes-dev/tapes/internal/storage"
)

// Errors of this package.
var (
	// ErrClosed: the log (or the group's view) was closed.
	ErrClosed = errors.New("raft log closed")
	// ErrGroupOpen: Log.Group was called for a group whose view is open.
	ErrGroupOpen = errors.New("raft log group already open")
	// ErrGap: StoreLogs was given entries that are not consecutive; raft
	// never does that.
	ErrGap = errors.New("raft log entries not consecutive")
	// ErrHole: DeleteRange of neither a prefix nor a suffix; raft never
	// does that.
	ErrHole = errors.New("raft log delete of a middle range")
	// ErrCorrupt: a frame whose CRC holds but whose content does not parse,
	// or a bad frame before the last segment's tail.
	ErrCorrupt = errors.New("raft log corrupt")
	// ErrFailed: a write or fsync failed; the log accepts nothing more
	// (what reached the disk is unknown) until it is reopened.
	ErrFailed = errors.New("raft log failed")
)

// DefaultSegmentBytes is the size past which a new segment starts.
const DefaultSegmentBytes = 64 << 20

// Options configure a Log. Zero values take the defaults.
type Options struct {
	SegmentBytes int64
	// Sync makes a segment's writes durable. Default: storage.SyncFile
	// (fsync, counted as raft_log). Tests inject it.
	Sync func(*os.File) error
	// SyncDir makes a created segment's directory entry durable. Default:
	// fsync of the directory, counted as dir.
	SyncDir func(dir string) error
	Logger  *slog.Logger
}

// Log is the shared write-ahead log. Its methods and those of its Stores
// are safe for concurrent use.
type Log struct {
	dir string
	opt Options

	mu sync.RWMutex
	// groups: every group with entries (or an open view), by name. Guarded
	// by mu.
	groups map[string]*group
	// segs: the segment files, oldest first; the last is the active one,
	// the only one written. Guarded by mu (the writer goroutine alone
	// changes it, under the write lock).
	segs []*segment
	// failed: set by the writer when a write or sync failed; every later
	// operation returns it. Guarded by mu.
	failed error

	// The queue of operations for the writer goroutine.
	qmu     sync.Mutex
	queue   []*op
	closing bool // guarded by qmu: no more operations are queued
	wake    chan struct{}
	stopped chan struct{} // closed when the writer goroutine has returned

	// wbuf is the writer's buffer (writer goroutine only).
	wbuf []byte
}

type segment struct {
	id   uint64
	path string
	f    *os.File
	// size is the bytes written (and synced) so far. Changed by the writer
	// under mu.
	size int64
}

// loc is where one entry's body is.
type loc struct {
	seg *segment
	off int64
	n   int32
}

// group is one Raft group's index. Every field is guarded by Log.mu.
type group struct {
	name string
	// base is the index of pos[0]; pos holds consecutive entries. Empty
	// when len(pos) == 0 (base is then meaningless).
	base uint64
	pos  []loc
	// live: bytes of the live entry bodies.
	live int64
	open bool
}

func (g *group) last() uint64 { return g.base + uint64(len(g.pos)) - 1 }

// op is one operation for the writer: its frame, already encoded by the
// caller, and how it changes the group once durable.
type op struct {
	g    *group
	kind byte
	buf  []byte
	// bodies: offsets of the entry bodies in buf (kindEntries, kindImage).
	bodies []int
	lo, hi uint64 // kindDelete
	done   chan error
}

// Open opens (or creates) the log in dir, recovering every group's index
// from the segments (a torn tail of the last one is cut), and starts the
// writer goroutine.
func Open(dir string, opt Options) (*Log, error) {
	if opt.SegmentBytes <= 0 {
		opt.SegmentBytes = DefaultSegmentBytes
	}
	if opt.Sync == nil {
		opt.Sync = func(f *os.File) error { return storage.SyncFile(f, storage.FsyncRaftLog) }
	}
	if opt.SyncDir == nil {
		opt.SyncDir = syncDir
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("raft log dir: %w", err)
	}
	// The directory's own entry must survive a crash with the segments.
	if err := opt.SyncDir(filepath.Dir(dir)); err != nil {
		return nil, fmt.Errorf("sync raft log's parent dir: %w", err)
	}
	l := &Log{dir: dir, opt: opt, groups: map[string]*group{}, wake: make(chan struct{}, 1), stopped: make(chan struct{})}
	if err := l.recover(); err != nil {
		l.closeFiles()
		return nil, err
	}
	if len(l.segs) == 0 {
		if err := l.newSegment(1); err != nil {
			return nil, err
		}
	}
	l.removeSegments()
	go l.run()
	return l, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return storage.SyncFile(d, storage.FsyncDir)
}

func segmentName(id uint64) string { return fmt.Sprintf("%020d.wal", id) }

// newSegment creates segment id, makes its directory entry durable and
// makes it the active one. Called by Open and by the writer.
func (l *Log) newSegment(id uint64) error {
	path := filepath.Join(l.dir, segmentName(id))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("create raft log segment: %w", err)
	}
	if err := l.opt.SyncDir(l.dir); err != nil {
		f.Close()
		return fmt.Errorf("sync raft log dir: %w", err)
	}
	l.mu.Lock()
	l.segs = append(l.segs, &segment{id: id, path: path, f: f})
	l.mu.Unlock()
	return nil
}

// recover lists the segments and replays them in order.
func (l *Log) recover() error {
	ents, err := os.ReadDir(l.dir)
	if err != nil {
		return fmt.Errorf("list raft log: %w", err)
	}
	var ids []uint64
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".wal")
		if !ok {
			continue
		}
		id, err := strconv.ParseUint(name, 10, 64)
		if err != nil {
			continue
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for i, id := range ids {
		path := filepath.Join(l.dir, segmentName(id))
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("open raft log segment: %w", err)
		}
		s := &segment{id: id, path: path, f: f}
		l.segs = append(l.segs, s)
		good, tornErr := l.replay(s)
		if tornErr == nil {
			s.size = good
			continue
		}
		if errors.Is(tornErr, ErrCorrupt) || i != len(ids)-1 {
			return fmt.Errorf("raft log segment %s at byte %d: %w", path, good, tornErr)
		}
		l.opt.Logger.Warn("raft log: cutting a torn tail", "segment", path, "at", good, "why", tornErr)
		if err := f.Truncate(good); err != nil {
			return fmt.Errorf("cut raft log tail: %w", err)
		}
		if err := l.opt.Sync(f); err != nil {
			return fmt.Errorf("sync raft log after cutting its tail: %w", err)
		}
		s.size = good
	}
	return nil
}

// errTorn marks a frame that is not whole (a torn write): recovery cuts the
// last segment there.
var errTorn = errors.New("torn frame")

// replay applies every whole frame of s and returns where the good frames
// end; err is nil at a clean end, wraps errTorn for a frame that is not
// whole, ErrCorrupt for one whose CRC holds but whose content is bad.
func (l *Log) replay(s *segment) (good int64, err error) {
	st, err := s.f.Stat()
	if err != nil {
		return 0, err
	}
	r := bufio.NewReaderSize(io.NewSectionReader(s.f, 0, st.Size()), 1<<20)
	var hdr [frameHeader]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if err == io.EOF {
				return good, nil
			}
			return good, fmt.Errorf("%w: header: %v", errTorn, err)
		}
		n := binary.LittleEndian.Uint32(hdr[:])
		if n < 3 || n > maxFrame || int64(n) > st.Size()-good-frameHeader {
			return good, fmt.Errorf("%w: length %d", errTorn, n)
		}
		frame := make([]byte, frameHeader+int(n))
		copy(frame, hdr[:])
		if _, err := io.ReadFull(r, frame[frameHeader:]); err != nil {
			return good, fmt.Errorf("%w: payload: %v", errTorn, err)
		}
		if crc32.Checksum(frame[frameHeader:], castagnoli) != binary.LittleEndian.Uint32(hdr[4:]) {
			return good, fmt.Errorf("%w: CRC", errTorn)
		}
		o, err := decodeOp(frame)
		if err != nil {
			return good, err
		}
		g := l.groups[o.name]
		if g == nil {
			g = &group{name: o.name}
			l.groups[o.name] = g
		}
		o.g = g
		l.apply(o.op, s, good)
		good += int64(len(frame))
	}
}

type decodedOp struct {
	*op
	name string
}

// decodeOp rebuilds the operation a whole frame records.
func decodeOp(frame []byte) (decodedOp, error) {
	pf, err := parseFrame(frame[frameHeader:])
	if err != nil {
		return decodedOp{}, err
	}
	o := &op{kind: pf.kind, buf: frame}
	switch pf.kind {
	case kindDelete:
		if len(pf.rest) != 16 {
			return decodedOp{}, fmt.Errorf("%w: delete frame of %d bytes", ErrCorrupt, len(pf.rest))
		}
		o.lo = binary.LittleEndian.Uint64(pf.rest)
		o.hi = binary.LittleEndian.Uint64(pf.rest[8:])
	case kindEntries, kindImage:
		if len(pf.rest) < 4 {
			return decodedOp{}, fmt.Errorf("%w: entries frame without a count", ErrCorrupt)
		}
		count := int(binary.LittleEndian.Uint32(pf.rest))
		p := pf.restOff + 4
		var e raft.Log
		for range count {
			o.bodies = append(o.bodies, p)
			n, err := decodeBody(frame[p:], &e)
			if err != nil {
				return decodedOp{}, err
			}
			p += n
		}
		if p != len(frame) {
			return decodedOp{}, fmt.Errorf("%w: %d bytes after the last entry", ErrCorrupt, len(frame)-p)
		}
	default:
		return decodedOp{}, fmt.Errorf("%w: frame kind %d", ErrCorrupt, pf.kind)
	}
	return decodedOp{op: o, name: pf.group}, nil
}

// apply changes o.g as the durable frame o.buf, written at offset at of s,
// records. The live log and recovery both change a group only through it,
// so a restart rebuilds exactly the index the log had. Caller holds mu (or
// is recovering, alone).
func (l *Log) apply(o *op, s *segment, at int64) {
	g := o.g
	switch o.kind {
	case kindDelete:
		g.delete(o.lo, o.hi)
		return
	case kindImage:
		g.delete(0, math.MaxUint64)
	}
	for i, b := range o.bodies {
		end := len(o.buf)
		if i+1 < len(o.bodies) {
			end = o.bodies[i+1]
		}
		g.put(binary.LittleEndian.Uint64(o.buf[b:]), loc{seg: s, off: at + int64(b), n: int32(end - b)})
	}
}

// put records entry index at where. An index at or below the last one
// replaces it and drops everything after it (raft deletes a conflicting
// suffix first; this keeps recovery exact even so); an index past the
// next one (a gap, which raft never makes) restarts the group there.
func (g *group) put(index uint64, where loc) {
	switch {
	case len(g.pos) > 0 && index >= g.base && index <= g.last()+1:
		g.truncate(int(index - g.base))
	default:
		g.delete(0, math.MaxUint64)
		g.base = index
	}
	g.pos = append(g.pos, where)
	g.live += int64(where.n)
}

// truncate keeps the first n entries.
func (g *group) truncate(n int) {
	for _, p := range g.pos[n:] {
		g.live -= int64(p.n)
	}
	g.pos = g.pos[:n]
}

// delete removes entries lo..hi (inclusive). A range inside the group's
// entries (neither prefix nor suffix; refused by DeleteRange) removes
// everything from lo.
func (g *group) delete(lo, hi uint64) {
	if len(g.pos) == 0 || hi < g.base || lo > g.last() || lo > hi {
		return
	}
	if lo > g.base {
		g.truncate(int(lo - g.base))
		return
	}
	if hi >= g.last() {
		g.truncate(0)
		g.pos = nil
		return
	}
	k := int(hi + 1 - g.base)
	for _, p := range g.pos[:k] {
		g.live -= int64(p.n)
	}
	g.pos = g.pos[k:]
	g.base = hi + 1
	if cap(g.pos) > 2*len(g.pos)+64 {
		g.pos = slices.Clone(g.pos)
	}
}

// submit queues o for the writer and waits until it is durable (or failed).
func (l *Log) submit(o *op) error {
	o.done = make(chan error, 1)
	l.qmu.Lock()
	if l.closing {
		l.qmu.Unlock()
		return ErrClosed
	}
	l.queue = append(l.queue, o)
	l.qmu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return <-o.done
}

// run is the writer goroutine: it takes every queued operation, writes
// their frames with one write, syncs once and then applies them to the
// groups and answers each caller. Operations queued while it writes and
// syncs wait for the next round.
func (l *Log) run() {
	defer close(l.stopped)
	for {
		<-l.wake
		l.qmu.Lock()
		ops, closing := l.queue, l.closing
		l.queue = nil
		l.qmu.Unlock()
		if len(ops) > 0 {
			err := l.commit(ops)
			for _, o := range ops {
				o.done <- err
			}
		}
		if closing {
			return
		}
	}
}

// commit writes and syncs one round (writer goroutine).
func (l *Log) commit(ops []*op) error {
	l.mu.RLock()
	err := l.failed
	act := l.segs[len(l.segs)-1]
	l.mu.RUnlock()
	if err != nil {
		return err
	}
	if act.size >= l.opt.SegmentBytes {
		if err := l.newSegment(act.id + 1); err != nil {
			return l.fail(err)
		}
		l.mu.RLock()
		act = l.segs[len(l.segs)-1]
		images, err := l.carryForward()
		l.mu.RUnlock()
		if err != nil {
			return l.fail(err)
		}
		ops = append(images, ops...)
	}
	buf := l.wbuf[:0]
	at := make([]int64, len(ops))
	for i, o := range ops {
		at[i] = act.size + int64(len(buf))
		buf = append(buf, o.buf...)
	}
	if _, err := act.f.WriteAt(buf, act.size); err != nil {
		return l.fail(fmt.Errorf("write raft log: %w", err))
	}
	if err := l.opt.Sync(act.f); err != nil {
		return l.fail(fmt.Errorf("sync raft log: %w", err))
	}
	if cap(buf) <= 4<<20 {
		l.wbuf = buf[:0]
	}
	l.mu.Lock()
	act.size += int64(len(buf))
	prune := false
	for i, o := range ops {
		l.apply(o, act, at[i])
		prune = prune || o.kind != kindEntries
	}
	l.mu.Unlock()
	if prune {
		l.removeSegments()
	}
	return nil
}

func (l *Log) fail(err error) error {
	err = fmt.Errorf("%w: %w", ErrFailed, err)
	l.mu.Lock()
	l.failed = err
	l.mu.Unlock()
	return err
}

// carryForward chooses the groups that pin the oldest segments and returns
// one image operation for each (their entries read back from disk), oldest
// segment first, while either rule holds: the groups chosen so far hold at
// most half a segment (small idle groups, carried at once), or the old
// segments hold more than twice the live entries of every group plus a
// segment (mostly garbage: copying the live entries costs less than it
// frees) and the copy stays within two segments per roll (so that one
// round never stalls every group for long). Writer goroutine, under mu's
// read lock.
func (l *Log) carryForward() ([]*op, error) {
	pinning := map[*segment][]*group{}
	var live int64
	for _, g := range l.groups {
		if len(g.pos) > 0 {
			pinning[g.pos[0].seg] = append(pinning[g.pos[0].seg], g)
			live += g.live
		}
	}
	var disk int64
	for _, s := range l.segs[:len(l.segs)-1] {
		disk += s.size
	}
	seg := l.opt.SegmentBytes
	var copied int64
	var ops []*op
	for _, s := range l.segs[:len(l.segs)-1] {
		gs := pinning[s]
		var need int64
		for _, g := range gs {
			need += g.live
		}
		small := copied+need <= seg/2
		garbage := disk > 2*live+seg && copied+need <= 2*seg
		if !small && !garbage {
			break
		}
		copied += need
		disk -= s.size
		sort.Slice(gs, func(i, j int) bool { return gs[i].name < gs[j].name })
		for _, g := range gs {
			o, err := l.image(g)
			if err != nil {
				return nil, err
			}
			ops = append(ops, o)
		}
	}
	return ops, nil
}

// image encodes every live entry of g as one image frame.
func (l *Log) image(g *group) (*op, error) {
	buf, start := appendHeader(make([]byte, 0, frameHeader+3+len(g.name)+4+int(g.live)), kindImage, g.name)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(g.pos)))
	o := &op{g: g, kind: kindImage}
	for _, p := range g.pos {
		o.bodies = append(o.bodies, len(buf))
		n := len(buf)
		buf = append(buf, make([]byte, p.n)...)
		if _, err := p.seg.f.ReadAt(buf[n:], p.off); err != nil {
			return nil, fmt.Errorf("read raft log %s at %d to carry it forward: %w", p.seg.path, p.off, err)
		}
	}
	o.buf = finishFrame(buf, start)
	return o, nil
}

// removeSegments removes the oldest segments (never the active one) in
// which no group has a live entry, in order: a delete recorded in a
// segment is removed only with every entry it deleted.
func (l *Log) removeSegments() {
	l.mu.Lock()
	defer l.mu.Unlock()
	pinned := map[*segment]bool{}
	for name, g := range l.groups {
		if len(g.pos) > 0 {
			pinned[g.pos[0].seg] = true
		} else if !g.open {
			delete(l.groups, name)
		}
	}
	for len(l.segs) > 1 && !pinned[l.segs[0]] {
		s := l.segs[0]
		s.f.Close()
		if err := os.Remove(s.path); err != nil {
			l.opt.Logger.Warn("raft log: removing a segment", "segment", s.path, "err", err)
		}
		l.segs = l.segs[1:]
	}
}

// Close waits for queued operations, stops the writer and closes the
// files. Stores still open return ErrClosed afterwards.
func (l *Log) Close() error {
	l.qmu.Lock()
	if l.closing {
		l.qmu.Unlock()
		return nil
	}
	l.closing = true
	l.qmu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	<-l.stopped
	return l.closeFiles()
}

func (l *Log) closeFiles() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var err error
	for _, s := range l.segs {
		if e := s.f.Close(); e != nil && err == nil {
			err = e
		}
	}
	return err
}

// Segments returns the names of the segment files, oldest first.
func (l *Log) Segments() []string {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var out []string
	for _, s := range l.segs {
		out = append(out, filepath.Base(s.path))
	}
	return out
}

// Groups returns the names of the groups that have live entries.
func (l *Log) Groups() []string {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var out []string
	for name, g := range l.groups {
		if len(g.pos) > 0 {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}
