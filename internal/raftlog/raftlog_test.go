package raftlog

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tapes-dev/tapes/internal/eventually"
	"github.com/tapes-dev/tapes/internal/storage"
)

func open(t *testing.T, dir string, opt Options) *Log {
	t.Helper()
	l, err := Open(dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func view(t *testing.T, l *Log, name string) *Store {
	t.Helper()
	s, err := l.Group(name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func entries(lo, hi, term uint64) []*raft.Log {
	var out []*raft.Log
	for i := lo; i <= hi; i++ {
		l := &raft.Log{Index: i, Term: term, Type: raft.LogCommand, Data: fmt.Appendf(nil, "entry %d term %d", i, term)}
		if i%3 == 0 {
			l.Extensions = []byte("ext")
			l.AppendedAt = time.Unix(1700000000, int64(i))
		}
		if i%5 == 0 {
			l.Type = raft.LogNoop
			l.Data = nil
		}
		out = append(out, l)
	}
	return out
}

// same checks that got holds exactly what want (raft's InmemStore, the
// reference) holds.
func same(t *testing.T, step string, want *raft.InmemStore, got raft.LogStore) {
	t.Helper()
	wf, _ := want.FirstIndex()
	wl, _ := want.LastIndex()
	gf, err := got.FirstIndex()
	if err != nil {
		t.Fatalf("%s: FirstIndex: %v", step, err)
	}
	gl, err := got.LastIndex()
	if err != nil {
		t.Fatalf("%s: LastIndex: %v", step, err)
	}
	if gf != wf || gl != wl {
		t.Fatalf("%s: holds %d..%d, want %d..%d", step, gf, gl, wf, wl)
	}
	for i := wf; wf != 0 && i <= wl; i++ {
		var w, g raft.Log
		if err := want.GetLog(i, &w); err != nil {
			t.Fatalf("%s: reference GetLog(%d): %v", step, i, err)
		}
		if err := got.GetLog(i, &g); err != nil {
			t.Fatalf("%s: GetLog(%d): %v", step, i, err)
		}
		if g.Index != w.Index || g.Term != w.Term || g.Type != w.Type || !bytes.Equal(g.Data, w.Data) ||
			!bytes.Equal(g.Extensions, w.Extensions) || !g.AppendedAt.Equal(w.AppendedAt) {
			t.Fatalf("%s: GetLog(%d) = %+v, want %+v", step, i, g, w)
		}
	}
	for _, i := range []uint64{0, wf - 1, wl + 1} {
		if wf != 0 && i >= wf && i <= wl {
			continue
		}
		var g raft.Log
		if err := got.GetLog(i, &g); !errors.Is(err, raft.ErrLogNotFound) {
			t.Fatalf("%s: GetLog(%d) outside %d..%d: %v, want ErrLogNotFound", step, i, wf, wl, err)
		}
	}
}

// TestLogStoreContract runs the operations raft makes (appends, a
// compacted prefix, a conflicting suffix, everything deleted after a
// snapshot install, appends after that) against the store and raft's
// InmemStore side by side, and after every step reopens the log: the
// recovered index is the same as the live one.
func TestLogStoreContract(t *testing.T) {
	type step struct {
		name   string
		store  []*raft.Log
		lo, hi uint64 // DeleteRange when store is nil
	}
	steps := []step{
		{name: "first append", store: entries(1, 10, 1)},
		{name: "append one", store: entries(11, 11, 1)},
		{name: "append batch", store: entries(12, 40, 2)},
		{name: "compact prefix", lo: 1, hi: 15},
		{name: "conflicting suffix", lo: 30, hi: 40},
		{name: "append after conflict", store: entries(30, 45, 3)},
		{name: "overwrite without delete", store: entries(44, 50, 4)},
		{name: "compact again", lo: 16, hi: 35},
		{name: "delete everything (snapshot install)", lo: 36, hi: 50},
		{name: "start after snapshot", store: entries(100, 120, 5)},
		{name: "delete suffix past the end", lo: 118, hi: 1000},
	}
	dir := t.TempDir()
	l := open(t, dir, Options{})
	s := view(t, l, "g")
	other := view(t, l, "other") // interleaved, so frames of two groups share segments
	ref := raft.NewInmemStore()
	for i, st := range steps {
		if st.store != nil {
			if err := s.StoreLogs(st.store); err != nil {
				t.Fatalf("%s: %v", st.name, err)
			}
			if err := ref.StoreLogs(st.store); err != nil {
				t.Fatal(err)
			}
			// InmemStore keeps what follows an overwritten index; raft
			// never leaves it there (it deletes the suffix first), this
			// store drops it.
			last := st.store[len(st.store)-1].Index
			if wl, _ := ref.LastIndex(); wl > last {
				ref.DeleteRange(last+1, wl)
			}
		} else {
			if err := s.DeleteRange(st.lo, st.hi); err != nil {
				t.Fatalf("%s: %v", st.name, err)
			}
			ref.DeleteRange(st.lo, st.hi)
		}
		if err := other.StoreLogs(entries(uint64(i+1), uint64(i+1), 1)); err != nil {
			t.Fatal(err)
		}
		same(t, st.name, ref, s)
		l.Close()
		l = open(t, dir, Options{})
		s = view(t, l, "g")
		other = view(t, l, "other")
		same(t, st.name+" (reopened)", ref, s)
	}
	l.Close()
}

// TestStoreRefuses: what raft never asks is refused, clearly, and changes
// nothing.
func TestStoreRefuses(t *testing.T) {
	l := open(t, t.TempDir(), Options{})
	defer l.Close()
	s := view(t, l, "g")
	if err := s.StoreLogs(entries(1, 10, 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLogs([]*raft.Log{{Index: 11}, {Index: 13}}); !errors.Is(err, ErrGap) {
		t.Errorf("entries not consecutive: %v, want ErrGap", err)
	}
	if err := s.DeleteRange(3, 5); !errors.Is(err, ErrHole) {
		t.Errorf("middle delete: %v, want ErrHole", err)
	}
	if last, _ := s.LastIndex(); last != 10 {
		t.Errorf("last index %d after refusals, want 10", last)
	}
	if _, err := l.Group("g"); !errors.Is(err, ErrGroupOpen) {
		t.Errorf("second view of a group: %v, want ErrGroupOpen", err)
	}
	if _, err := l.Group(""); err == nil {
		t.Error("empty group name accepted")
	}
	s.Close()
	if err := s.StoreLogs(entries(11, 11, 1)); !errors.Is(err, ErrClosed) {
		t.Errorf("closed view: %v, want ErrClosed", err)
	}
}

// TestAppendPastGapRestartsGroup: a follower that installed the leader's
// snapshot at 64 while holding 4..7 (raft keeps TrailingLogs of them
// unless the store is monotonic, and a crash before their removal keeps
// them all) is sent entries from 65: they are taken, the group holds
// exactly them, and so it does after a reopen. Before this the append was
// refused and the follower never caught up (TestFollowerRebuiltBySnapshot
// failed that way).
func TestAppendPastGapRestartsGroup(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, Options{})
	s := view(t, l, "g")
	if err := s.StoreLogs(entries(1, 7, 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(1, 3); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLogs(entries(65, 70, 2)); err != nil {
		t.Fatalf("append past a gap: %v", err)
	}
	want := raft.NewInmemStore()
	if err := want.StoreLogs(entries(65, 70, 2)); err != nil {
		t.Fatal(err)
	}
	same(t, "after the gap", want, s)
	var e raft.Log
	if err := s.GetLog(5, &e); !errors.Is(err, raft.ErrLogNotFound) {
		t.Errorf("entry 5 from before the gap: %v, want ErrLogNotFound", err)
	}
	if err := s.StoreLogs(entries(71, 72, 2)); err != nil {
		t.Fatal(err)
	}
	want.StoreLogs(entries(71, 72, 2))
	s.Close()
	l.Close()
	l = open(t, dir, Options{})
	defer l.Close()
	same(t, "reopened", want, view(t, l, "g"))
}

// TestTornTailEveryByte writes frames of three groups, then for every byte
// of the last frames cuts the segment there and reopens: the log holds
// exactly what the whole frames before the cut hold, nothing of a torn
// one, and takes appends again.
func TestTornTailEveryByte(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, Options{})
	gs := []*Store{view(t, l, "a"), view(t, l, "b"), view(t, l, "c")}
	refs := []*raft.InmemStore{raft.NewInmemStore(), raft.NewInmemStore(), raft.NewInmemStore()}
	type mark struct {
		size int64
		last [3]uint64
		firs [3]uint64
	}
	seg := filepath.Join(dir, l.Segments()[0])
	snapshot := func() mark {
		var m mark
		st, _ := os.Stat(seg)
		m.size = st.Size()
		for i, r := range refs {
			m.firs[i], _ = r.FirstIndex()
			m.last[i], _ = r.LastIndex()
		}
		return m
	}
	marks := []mark{snapshot()}
	next := [3]uint64{1, 1, 1}
	for round := range 6 {
		for i := range gs {
			batch := entries(next[i], next[i]+uint64(round%3), 1)
			next[i] += uint64(len(batch))
			if err := gs[i].StoreLogs(batch); err != nil {
				t.Fatal(err)
			}
			refs[i].StoreLogs(batch)
			marks = append(marks, snapshot())
		}
		if round == 3 {
			if err := gs[1].DeleteRange(1, 2); err != nil {
				t.Fatal(err)
			}
			refs[1].DeleteRange(1, 2)
			marks = append(marks, snapshot())
		}
	}
	l.Close()
	whole, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	from := marks[len(marks)-6].size
	for cut := from; cut <= int64(len(whole)); cut++ {
		m := marks[0]
		for _, mk := range marks {
			if mk.size <= cut {
				m = mk
			}
		}
		d := t.TempDir()
		if err := os.WriteFile(filepath.Join(d, filepath.Base(seg)), whole[:cut], 0o644); err != nil {
			t.Fatal(err)
		}
		l := open(t, d, Options{})
		for i, name := range []string{"a", "b", "c"} {
			s := view(t, l, name)
			f, _ := s.FirstIndex()
			last, _ := s.LastIndex()
			if f != m.firs[i] || last != m.last[i] {
				t.Fatalf("cut at %d: group %s holds %d..%d, want %d..%d", cut, name, f, last, m.firs[i], m.last[i])
			}
			for idx := f; f != 0 && idx <= last; idx++ {
				var g, w raft.Log
				if err := s.GetLog(idx, &g); err != nil {
					t.Fatalf("cut at %d: group %s GetLog(%d): %v", cut, name, idx, err)
				}
				refs[i].GetLog(idx, &w)
				if !bytes.Equal(g.Data, w.Data) || g.Term != w.Term {
					t.Fatalf("cut at %d: group %s entry %d = %q, want %q", cut, name, idx, g.Data, w.Data)
				}
			}
			if err := s.StoreLogs(entries(last+1, last+1, 9)); err != nil {
				t.Fatalf("cut at %d: append after recovery: %v", cut, err)
			}
		}
		if st, _ := os.Stat(filepath.Join(d, filepath.Base(seg))); st.Size() <= m.size {
			t.Fatalf("cut at %d: append did not land after the cut tail (size %d)", cut, st.Size())
		}
		l.Close()
	}
}

// TestCorruptBeforeTailRefused: a bad frame in a segment that is not the
// last is not a torn write; Open refuses rather than losing what follows.
func TestCorruptBeforeTailRefused(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, Options{SegmentBytes: 200})
	s := view(t, l, "g")
	for i := uint64(1); i <= 20; i++ {
		if err := s.StoreLogs(entries(i, i, 1)); err != nil {
			t.Fatal(err)
		}
	}
	segs := l.Segments()
	l.Close()
	if len(segs) < 3 {
		t.Fatalf("only %d segments", len(segs))
	}
	path := filepath.Join(dir, segs[0])
	b, _ := os.ReadFile(path)
	b[frameHeader+5] ^= 0xff
	os.WriteFile(path, b, 0o644)
	if _, err := Open(dir, Options{SegmentBytes: 200}); !errors.Is(err, errTorn) || err == nil {
		t.Fatalf("Open with a corrupt early segment: %v", err)
	}
}

// blockingSync is a Sync that records each call and waits for release.
type blockingSync struct {
	entered chan int64 // the file's size when each sync began
	release chan struct{}
}

func newBlockingSync() *blockingSync {
	return &blockingSync{entered: make(chan int64, 100), release: make(chan struct{}, 100)}
}

func (b *blockingSync) sync(f *os.File) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	b.entered <- st.Size()
	<-b.release
	return nil
}

func (l *Log) queued() int {
	l.qmu.Lock()
	defer l.qmu.Unlock()
	return len(l.queue)
}

// TestGroupCommit: while one fsync runs, appends of many groups queue;
// the next round writes them all and makes them durable with ONE fsync,
// and no caller returns before the fsync that covers its entries has
// returned.
func TestGroupCommit(t *testing.T) {
	bs := newBlockingSync()
	l := open(t, t.TempDir(), Options{Sync: bs.sync})
	defer l.Close()
	const n = 12
	stores := make([]*Store, n)
	for i := range stores {
		stores[i] = view(t, l, fmt.Sprint("g", i))
	}
	results := make(chan int, n)
	store := func(i int) {
		if err := stores[i].StoreLogs(entries(1, 3, 1)); err != nil {
			t.Error(err)
		}
		results <- i
	}
	go store(0)
	size0 := <-bs.entered // round 1: g0 alone, its bytes written before the sync
	if size0 == 0 {
		t.Fatal("sync entered before the entries were written")
	}
	for i := 1; i < n; i++ {
		go store(i)
	}
	eventually.True(t, 30*time.Second, "the other appends queued behind the running fsync", func() bool { return l.queued() == n-1 })
	select {
	case i := <-results:
		t.Fatalf("StoreLogs of g%d returned before its fsync returned", i)
	default:
	}
	bs.release <- struct{}{}
	if i := <-results; i != 0 {
		t.Fatalf("g%d returned first; only g0's fsync has returned", i)
	}
	size1 := <-bs.entered // round 2: every other group, one sync
	select {
	case i := <-results:
		t.Fatalf("StoreLogs of g%d returned before its fsync returned", i)
	default:
	}
	if size1 <= size0 {
		t.Fatalf("second sync began at size %d, not past the first round's %d", size1, size0)
	}
	bs.release <- struct{}{}
	for range n - 1 {
		<-results
	}
	select {
	case sz := <-bs.entered:
		t.Fatalf("a third fsync (at size %d): %d appends took more than two", sz, n)
	default:
	}
	for i, s := range stores {
		if last, _ := s.LastIndex(); last != 3 {
			t.Errorf("g%d last index %d, want 3", i, last)
		}
	}
}

// TestConcurrentStoreLogs: many groups append and compact at once (run
// with -race); every entry is where it should be, live and after reopen,
// and the appends shared fsyncs.
func TestConcurrentStoreLogs(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	syncs := 0
	opt := Options{SegmentBytes: 64 << 10, Sync: func(f *os.File) error {
		mu.Lock()
		syncs++
		mu.Unlock()
		return f.Sync()
	}}
	l := open(t, dir, opt)
	const groups, rounds, per = 16, 60, 4
	var wg sync.WaitGroup
	var views []*Store
	for gi := range groups {
		s := view(t, l, fmt.Sprint("g", gi))
		views = append(views, s)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				lo := uint64(r*per + 1)
				if err := s.StoreLogs(entries(lo, lo+per-1, 1)); err != nil {
					t.Error(err)
					return
				}
				var e raft.Log
				if err := s.GetLog(lo, &e); err != nil || e.Index != lo {
					t.Errorf("GetLog(%d) = %d, %v", lo, e.Index, err)
					return
				}
				if r%10 == 9 && gi%2 == 0 { // half the groups compact
					first, _ := s.FirstIndex()
					if err := s.DeleteRange(first, lo-per); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	for _, s := range views {
		s.Close()
	}
	if syncs >= groups*rounds {
		t.Logf("no fsync was shared: %d for %d appends (a very loaded machine can do that)", syncs, groups*rounds)
	}
	check := func(l *Log, when string) {
		for gi := range groups {
			s := view(t, l, fmt.Sprint("g", gi))
			first, _ := s.FirstIndex()
			last, _ := s.LastIndex()
			if last != rounds*per {
				t.Fatalf("%s: g%d last %d, want %d", when, gi, last, rounds*per)
			}
			if gi%2 == 1 && first != 1 {
				t.Fatalf("%s: g%d first %d, want 1", when, gi, first)
			}
			for i := first; i <= last; i++ {
				var e raft.Log
				if err := s.GetLog(i, &e); err != nil || string(e.Data) != string(entries(i, i, 1)[0].Data) {
					t.Fatalf("%s: g%d entry %d = %q, %v", when, gi, i, e.Data, err)
				}
			}
			s.Close()
		}
	}
	check(l, "live")
	l.Close()
	l = open(t, dir, opt)
	defer l.Close()
	check(l, "reopened")
}

// TestSegmentsRemovedAndIdleGroupsCarried: a busy group that compacts and
// an idle group that never does; old segments are removed (the idle
// group's few entries are carried forward), the number of segments stays
// bounded, and the idle group's entries survive it, reopened too.
func TestSegmentsRemovedAndIdleGroupsCarried(t *testing.T) {
	dir := t.TempDir()
	opt := Options{SegmentBytes: 4 << 10}
	l := open(t, dir, opt)
	idle := view(t, l, "idle")
	if err := idle.StoreLogs(entries(1, 3, 1)); err != nil {
		t.Fatal(err)
	}
	busy := view(t, l, "busy")
	compactingAppends(t, l, busy, 400, 6)
	ref := raft.NewInmemStore()
	ref.StoreLogs(entries(1, 3, 1))
	same(t, "idle group", ref, idle)
	l.Close()
	l = open(t, dir, opt)
	defer l.Close()
	same(t, "idle group reopened", ref, view(t, l, "idle"))
	busy = view(t, l, "busy")
	if f, _ := busy.FirstIndex(); f != 396 {
		t.Errorf("busy group first index %d after reopen, want 396", f)
	}
}

// TestDropGroup: a dropped group is gone, also after reopen.
func TestDropGroup(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, Options{})
	s := view(t, l, "gone")
	s.StoreLogs(entries(1, 5, 1))
	if err := s.Drop(); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l = open(t, dir, Options{})
	defer l.Close()
	if g := l.Groups(); len(g) != 0 {
		t.Fatalf("groups after drop and reopen: %v", g)
	}
}

// TestSyncFailureSticks: after a failed fsync nothing more is accepted.
func TestSyncFailureSticks(t *testing.T) {
	boom := errors.New("disk gone")
	fail := false
	l := open(t, t.TempDir(), Options{Sync: func(f *os.File) error {
		if fail {
			return boom
		}
		return nil
	}})
	defer l.Close()
	s := view(t, l, "g")
	if err := s.StoreLogs(entries(1, 1, 1)); err != nil {
		t.Fatal(err)
	}
	fail = true
	if err := s.StoreLogs(entries(2, 2, 1)); !errors.Is(err, ErrFailed) || !errors.Is(err, boom) {
		t.Fatalf("StoreLogs with a failing fsync: %v", err)
	}
	fail = false
	if err := s.StoreLogs(entries(2, 2, 1)); !errors.Is(err, ErrFailed) {
		t.Fatalf("StoreLogs after a failed fsync: %v, want ErrFailed", err)
	}
	if _, err := s.LastIndex(); !errors.Is(err, ErrFailed) {
		t.Fatalf("LastIndex after a failed fsync: %v", err)
	}
}

// TestCountsFsyncs: with the default sync, each round counts one raft_log
// fsync in tapes_fsyncs_total, a new segment one dir fsync, reads none.
func TestCountsFsyncs(t *testing.T) {
	l := open(t, t.TempDir(), Options{SegmentBytes: 100})
	defer l.Close()
	s := view(t, l, "g")
	count := func(what string, kind storage.FsyncKind, want uint64, op func() error) {
		t.Helper()
		before := storage.Fsyncs(kind)
		if err := op(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if n := storage.Fsyncs(kind) - before; n != want {
			t.Errorf("%s counted %d %s fsyncs, want %d", what, n, kind, want)
		}
	}
	count("StoreLogs", storage.FsyncRaftLog, 1, func() error { return s.StoreLogs(entries(1, 10, 1)) })
	count("StoreLogs in a new segment", storage.FsyncDir, 1, func() error { return s.StoreLogs(entries(11, 11, 1)) })
	count("DeleteRange", storage.FsyncRaftLog, 1, func() error { return s.DeleteRange(1, 5) })
	count("GetLog", storage.FsyncRaftLog, 0, func() error { var e raft.Log; return s.GetLog(7, &e) })
}

// TestLargeIdleGroupCarriedWhenGarbage: a group too large to carry at once
// (more than half a segment) that never compacts is carried forward once
// the old segments are mostly other groups' compacted entries, so the log
// does not grow without bound behind it.
func TestLargeIdleGroupCarriedWhenGarbage(t *testing.T) {
	opt := Options{SegmentBytes: 4 << 10}
	l := open(t, t.TempDir(), opt)
	defer l.Close()
	idle := view(t, l, "idle")
	big := bytes.Repeat([]byte("i"), 600)
	for i := uint64(1); i <= 5; i++ { // 3 KB: over half a segment
		if err := idle.StoreLog(&raft.Log{Index: i, Term: 1, Data: big}); err != nil {
			t.Fatal(err)
		}
	}
	compactingAppends(t, l, view(t, l, "busy"), 600, 12)
	var e raft.Log
	for i := uint64(1); i <= 5; i++ {
		if err := idle.GetLog(i, &e); err != nil || !bytes.Equal(e.Data, big) {
			t.Fatalf("idle entry %d after being carried: %v", i, err)
		}
	}
}

// compactingAppends appends n 500-byte entries to busy, compacting all but
// the last few every 20 (as raft does after its snapshots), and checks that
// l never had more than most segments and that its first one was removed.
func compactingAppends(t *testing.T, l *Log, busy *Store, n uint64, most int) {
	t.Helper()
	data := bytes.Repeat([]byte("x"), 500)
	seen := 0
	for i := uint64(1); i <= n; i++ {
		if err := busy.StoreLog(&raft.Log{Index: i, Term: 1, Data: data}); err != nil {
			t.Fatal(err)
		}
		if i%20 == 0 {
			first, _ := busy.FirstIndex()
			if err := busy.DeleteRange(first, i-5); err != nil {
				t.Fatal(err)
			}
		}
		seen = max(seen, len(l.Segments()))
	}
	if seen > most {
		t.Errorf("%d segments at most (of 4 KB), want at most %d", seen, most)
	}
	if segs := l.Segments(); segs[0] == segmentName(1) {
		t.Errorf("the first segment was never removed: %v", segs)
	}
}
