package replication

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/tapes-dev/tapes/internal/storage"
)

// snapTestLog is a log of small segments holding batches at Raft indexes
// 1..n, with its start moved past the first segments by a retention delete.
func snapTestLog(t *testing.T, n int) *storage.Log {
	t.Helper()
	l, err := storage.Open(filepath.Join(t.TempDir(), "log"), storage.Config{SegmentBytes: 1024}, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	appendBatches(t, l, n)
	if _, err := l.DeleteBefore(l.EndOffset()/3, l.LastRaftIndex()+1); err != nil {
		t.Fatal(err)
	}
	if len(l.Segments()) < 3 {
		t.Fatalf("log has %d segments, want several", len(l.Segments()))
	}
	return l
}

// appendBatches appends n batches of 1..5 records at the Raft indexes after
// the log's last one.
func appendBatches(t *testing.T, l *storage.Log, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		idx := l.LastRaftIndex() + 1
		recs := make([]storage.Record, 1+i%5)
		for j := range recs {
			recs[j] = storage.Record{Timestamp: int64(idx), Key: []byte(fmt.Sprintf("k%d", idx)), Value: []byte(fmt.Sprintf("value %d/%d", idx, j))}
		}
		if _, err := l.Append(idx, storage.EncodeBatch(recs)); err != nil {
			t.Fatalf("append at %d: %v", idx, err)
		}
	}
}

func readLog(t *testing.T, l *storage.Log) []storage.Record {
	t.Helper()
	var out []storage.Record
	for o, end := l.StartOffset(), l.EndOffset(); o < end; {
		recs, err := l.Read(o, 4096, end)
		if err != nil {
			t.Fatalf("read at %d: %v", o, err)
		}
		if len(recs) == 0 {
			t.Fatalf("read at %d (end %d) returned nothing", o, end)
		}
		out = append(out, recs...)
		o = recs[len(recs)-1].Offset + 1
	}
	return out
}

type logState struct {
	start, end int64
	raft       uint64
	recs       []storage.Record
}

func stateOf(t *testing.T, l *storage.Log) logState {
	return logState{l.StartOffset(), l.EndOffset(), l.LastRaftIndex(), readLog(t, l)}
}

// restoreInto feeds r to a fresh log's Restore and returns its state.
func restoreInto(t *testing.T, r io.Reader) logState {
	t.Helper()
	l, err := storage.Open(filepath.Join(t.TempDir(), "log"), storage.Config{SegmentBytes: 1024}, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Restore(r); err != nil {
		t.Fatalf("restore: %v", err)
	}
	return stateOf(t, l)
}

func newTestSnapStore(t *testing.T) *snapStore {
	t.Helper()
	s, err := newSnapStore(filepath.Join(t.TempDir(), "snapshots"), 2, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func createSink(t *testing.T, s *snapStore, index uint64) raft.SnapshotSink {
	t.Helper()
	sink, err := s.Create(1, index, 3, raft.Configuration{Servers: []raft.Server{{ID: "a", Address: "a"}}}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	return sink
}

// openAll opens snapshot id and reads it whole.
func openAll(t *testing.T, s *snapStore, id string) (*raft.SnapshotMeta, []byte) {
	t.Helper()
	meta, rc, err := s.Open(id)
	if err != nil {
		t.Fatalf("open %s: %v", id, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %s: %v", id, err)
	}
	return meta, b
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// TestSnapStoreLinked: a snapshot taken through the FSM is kept as links;
// Open streams exactly what storage.Snapshot.WriteTo wrote when it was
// taken, whatever the log did since, and meta.Size is its length.
func TestSnapStoreLinked(t *testing.T) {
	l := snapTestLog(t, 200)
	want := stateOf(t, l)
	f, err := newFSM(l, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	fs, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var ref bytes.Buffer
	if _, err := fs.(*fsmSnapshot).snap.WriteTo(&ref); err != nil {
		t.Fatal(err)
	}

	s := newTestSnapStore(t)
	sink := createSink(t, s, want.raft)
	if err := fs.Persist(sink); err != nil {
		t.Fatalf("persist: %v", err)
	}
	if err := sink.Close(); err != nil { // raft closes again after Persist
		t.Fatalf("second close: %v", err)
	}
	fs.Release()
	// No data was copied: each segment file of the snapshot is the log's
	// own file under a second name.
	segs := l.Segments()
	for _, seg := range segs {
		fi, err := os.Stat(filepath.Join(s.dir, sink.ID(), seg.File))
		if err != nil {
			t.Fatalf("snapshot holds no %s: %v", seg.File, err)
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink != 2 {
			t.Fatalf("%s has %d names, want 2 (the log's and the snapshot's)", seg.File, st.Nlink)
		}
	}

	// The log moves on: appends into the linked active segment, new
	// segments, retention removing linked ones.
	appendBatches(t, l, 100)
	if _, err := l.DeleteBefore(l.EndOffset()-5, l.LastRaftIndex()+1); err != nil {
		t.Fatal(err)
	}

	dir := filepath.Join(s.dir, sink.ID())
	if _, err := os.Stat(filepath.Join(dir, snapDataFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("linked snapshot has a data file (stat: %v)", err)
	}
	if _, err := os.Stat(filepath.Join(dir, snapManifestFile)); err != nil {
		t.Fatal(err)
	}
	list, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != sink.ID() || list[0].Index != want.raft || list[0].Term != 3 || list[0].Size != int64(ref.Len()) {
		t.Fatalf("List = %+v, want one snapshot %s at index %d of %d bytes", list, sink.ID(), want.raft, ref.Len())
	}

	meta, got := openAll(t, s, sink.ID())
	if meta.Size != int64(len(got)) {
		t.Fatalf("meta.Size %d, stream %d bytes", meta.Size, len(got))
	}
	if !bytes.Equal(got, ref.Bytes()) {
		t.Fatalf("stream differs from WriteTo's (%d and %d bytes)", len(got), ref.Len())
	}
	if !reflect.DeepEqual(meta.Configuration, list[0].Configuration) || meta.ConfigurationIndex != 1 {
		t.Fatalf("meta %+v", meta)
	}

	_, rc, err := s.Open(sink.ID())
	if err != nil {
		t.Fatal(err)
	}
	if got := restoreInto(t, rc); !reflect.DeepEqual(got, want) {
		t.Fatalf("restored log: start %d end %d raft %d, %d records; want %d %d %d, %d records",
			got.start, got.end, got.raft, len(got.recs), want.start, want.end, want.raft, len(want.recs))
	}
	if err := rc.Close(); err != nil {
		t.Fatal(err)
	}

	// A reader closed half-way stops the writer and frees the files.
	_, rc, err = s.Open(sink.ID())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(rc, make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	if err := rc.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSnapStoreData: a snapshot received by InstallSnapshot is written to
// the sink and read back as it was.
func TestSnapStoreData(t *testing.T) {
	l := snapTestLog(t, 100)
	want := stateOf(t, l)
	ref := snapshotStream(t, l)

	s := newTestSnapStore(t)
	sink := createSink(t, s, want.raft)
	for b := ref.Bytes(); len(b) > 0; {
		n := min(len(b), 777)
		if _, err := sink.Write(b[:n]); err != nil {
			t.Fatal(err)
		}
		b = b[n:]
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(s.dir, sink.ID(), snapDataFile)); err != nil {
		t.Fatal(err)
	}
	meta, got := openAll(t, s, sink.ID())
	if !bytes.Equal(got, ref.Bytes()) || meta.Size != int64(ref.Len()) {
		t.Fatalf("read back %d bytes, meta.Size %d; wrote %d", len(got), meta.Size, ref.Len())
	}
	if got := restoreInto(t, bytes.NewReader(got)); !reflect.DeepEqual(got, want) {
		t.Fatalf("restored log differs")
	}
	if _, err := sink.Write([]byte("x")); err == nil {
		t.Fatal("write after close succeeded")
	}
}

// TestSnapStoreRetention: List is newest first, and a successful Close
// leaves only the two newest.
func TestSnapStoreRetention(t *testing.T) {
	s := newTestSnapStore(t)
	var ids []string
	for i := uint64(1); i <= 4; i++ {
		sink := createSink(t, s, 10*i)
		if _, err := sink.Write([]byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
		if err := sink.Close(); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sink.ID())
	}
	list, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != ids[3] || list[1].ID != ids[2] || list[0].Index != 40 || list[1].Index != 30 {
		t.Fatalf("List = %v, want %s then %s", metaIDs(list), ids[3], ids[2])
	}
	if names := dirNames(t, s.dir); len(names) != 2 {
		t.Fatalf("store holds %v", names)
	}
	if _, _, err := s.Open(ids[0]); err == nil {
		t.Fatal("opened a reaped snapshot")
	}
	// A later term comes first whatever the index.
	sink, err := s.Create(1, 5, 4, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	list, _ = s.List()
	if len(list) != 2 || list[0].ID != sink.ID() || list[1].ID != ids[3] {
		t.Fatalf("List = %v", metaIDs(list))
	}
	if meta, got := openAll(t, s, sink.ID()); meta.Size != 0 || len(got) != 0 {
		t.Fatalf("empty snapshot reads %d bytes, size %d", len(got), meta.Size)
	}
}

func metaIDs(list []*raft.SnapshotMeta) []string {
	var ids []string
	for _, m := range list {
		ids = append(ids, m.ID)
	}
	return ids
}

// TestSnapStoreCancel: a cancelled sink, written either way, leaves nothing.
func TestSnapStoreCancel(t *testing.T) {
	l := snapTestLog(t, 50)
	before := stateOf(t, l)
	s := newTestSnapStore(t)

	sink := createSink(t, s, 1)
	if _, err := sink.Write([]byte("partial")); err != nil {
		t.Fatal(err)
	}
	if err := sink.Cancel(); err != nil {
		t.Fatal(err)
	}

	snap, err := l.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink = createSink(t, s, 2)
	if err := sink.(*snapSink).adopt(snap); err != nil {
		t.Fatal(err)
	}
	if err := sink.Cancel(); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil { // after Cancel: nothing
		t.Fatal(err)
	}
	snap.Release()

	if names := dirNames(t, s.dir); len(names) != 0 {
		t.Fatalf("store holds %v after Cancel", names)
	}
	if list, err := s.List(); err != nil || len(list) != 0 {
		t.Fatalf("List = %v, %v", list, err)
	}
	if got := stateOf(t, l); !reflect.DeepEqual(got, before) {
		t.Fatal("cancelling changed the log")
	}
}

// TestSnapStoreShortSegment: Open refuses a linked snapshot whose segment
// file lost bytes it recorded, rather than stream a short snapshot.
func TestSnapStoreShortSegment(t *testing.T) {
	l := snapTestLog(t, 50)
	snap, err := l.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	m := snap.Manifest()
	s := newTestSnapStore(t)
	sink := createSink(t, s, l.LastRaftIndex())
	if err := sink.(*snapSink).adopt(snap); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	l.Close()
	seg := m.Segments[0]
	if err := os.Truncate(filepath.Join(s.dir, sink.ID(), fmt.Sprintf("%020d.log", seg.BaseOffset)), seg.Bytes-1); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Open(sink.ID()); !errors.Is(err, storage.ErrBadSnapshot) {
		t.Fatalf("open: %v, want ErrBadSnapshot", err)
	}
}

// TestSnapStoreLegacy: a snapshot raft's FileSnapshotStore left in the
// directory is listed and opened; an unfinished one is removed.
func TestSnapStoreLegacy(t *testing.T) {
	l := snapTestLog(t, 60)
	want := stateOf(t, l)
	ref := snapshotStream(t, l)

	root := t.TempDir()
	fileStore, err := raft.NewFileSnapshotStoreWithLogger(root, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	old, err := fileStore.Create(1, want.raft, 2, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Write(ref.Bytes()); err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	unfinished, err := fileStore.Create(1, want.raft+1, 2, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unfinished.Write([]byte("torn")); err != nil {
		t.Fatal(err)
	}

	s, err := newSnapStore(filepath.Join(root, "snapshots"), 2, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	if names := dirNames(t, s.dir); len(names) != 1 || names[0] != old.ID() {
		t.Fatalf("store holds %v, want only %s", names, old.ID())
	}
	list, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != old.ID() || list[0].Size != int64(ref.Len()) {
		b, _ := json.Marshal(list)
		t.Fatalf("List = %s", b)
	}
	meta, got := openAll(t, s, old.ID())
	if meta.Index != want.raft || !bytes.Equal(got, ref.Bytes()) {
		t.Fatalf("legacy snapshot: index %d, %d bytes; want %d, %d", meta.Index, len(got), want.raft, ref.Len())
	}

	// Two new snapshots retire it.
	for i := uint64(1); i <= 2; i++ {
		sink := createSink(t, s, want.raft+i)
		if err := sink.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if list, _ := s.List(); len(list) != 2 || list[1].ID == old.ID() {
		t.Fatalf("List = %v", metaIDs(list))
	}
	if _, err := os.Stat(filepath.Join(s.dir, old.ID())); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("legacy snapshot not reaped (stat: %v)", err)
	}
}

// snapshotStream is the stream a snapshot of l, taken now, writes.
func snapshotStream(t *testing.T, l *storage.Log) *bytes.Buffer {
	t.Helper()
	snap, err := l.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	var ref bytes.Buffer
	if _, err := snap.WriteTo(&ref); err != nil {
		t.Fatal(err)
	}
	return &ref
}
