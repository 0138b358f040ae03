package storage

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// observed is what a test sees of a log from outside.
type observed struct {
	start, end int64
	raft       uint64
	recs       []Record
}

func stateOf(t *testing.T, l *Log) observed {
	t.Helper()
	return observed{start: l.StartOffset(), end: l.EndOffset(), raft: l.LastRaftIndex(), recs: readAll(t, l)}
}

func checkState(t *testing.T, l *Log, want observed) {
	t.Helper()
	if l.StartOffset() != want.start || l.EndOffset() != want.end || l.LastRaftIndex() != want.raft {
		t.Fatalf("start %d end %d raft %d, want %d %d %d",
			l.StartOffset(), l.EndOffset(), l.LastRaftIndex(), want.start, want.end, want.raft)
	}
	checkRecords(t, readAll(t, l), want.start, want.end)
}

func TestSnapshotRestore(t *testing.T) {
	src, f := trimmedLog(t, 5)
	want := stateOf(t, src)

	snap, err := src.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if snap.EndOffset() != want.end || snap.StartOffset() != want.start || snap.LastRaftIndex() != want.raft {
		t.Fatalf("snapshot says %d %d %d", snap.StartOffset(), snap.EndOffset(), snap.LastRaftIndex())
	}
	// The source goes on after the snapshot, and while it is written out:
	// appends that fill the snapshotted active segment, and retention.
	f.batches(20)
	var stream bytes.Buffer
	done := make(chan error, 1)
	go func() {
		_, err := snap.WriteTo(&stream)
		done <- err
	}()
	f.batches(60)
	f.raft++
	if _, err := src.DeleteBefore(want.end-2, f.raft); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("WriteTo: %v", err)
	}
	if err := snap.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(snap.dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Release left %s: %v", snap.dir, err)
	}

	// Restore into a log that holds something else.
	dst := openLog(t, filepath.Join(t.TempDir(), "dst"), smallConfig)
	(&filler{t: t, l: dst}).batches(200)
	if err := dst.Restore(bytes.NewReader(stream.Bytes())); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	checkState(t, dst, want)
	for _, leftover := range []string{dst.dir + restoreSuffix, dst.dir + oldSuffix} {
		if _, err := os.Stat(leftover); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("Restore left %s: %v", leftover, err)
		}
	}
	dst = reopen(t, dst)
	checkState(t, dst, want)

	// The restored log carries on from the snapshot's Raft index.
	if _, err := dst.Append(want.raft, batchAt(want.end, 1)); !errors.Is(err, ErrAlreadyApplied) {
		t.Fatalf("append at the snapshot's Raft index = %v", err)
	}
	g := &filler{t: t, l: dst, raft: want.raft}
	g.batches(10)
	checkRecords(t, readAll(t, dst), want.start, dst.EndOffset())
}

func TestSnapshotOfEmptiedLog(t *testing.T) {
	src := openLog(t, t.TempDir(), smallConfig)
	f := &filler{t: t, l: src}
	f.batches(10)
	f.raft++
	if _, err := src.DeleteBefore(src.EndOffset(), f.raft); err != nil {
		t.Fatal(err)
	}
	want := stateOf(t, src)
	dst := restoredCopy(t, src)
	checkState(t, dst, want)
}

func TestRestoreRejectsBadSnapshot(t *testing.T) {
	src := openLog(t, t.TempDir(), smallConfig)
	(&filler{t: t, l: src}).batches(30)
	snap, err := src.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var stream bytes.Buffer
	n, err := snap.WriteTo(&stream)
	if err != nil || n != int64(stream.Len()) {
		t.Fatalf("WriteTo = %d, %v (wrote %d)", n, err, stream.Len())
	}
	snap.Release()
	good := stream.Bytes()

	dst := openLog(t, filepath.Join(t.TempDir(), "dst"), smallConfig)
	(&filler{t: t, l: dst}).batches(7)
	want := stateOf(t, dst)

	bad := map[string][]byte{
		"empty":          nil,
		"header only":    good[:snapshotHeaderSize],
		"cut in a frame": good[:len(good)/2],
		"last byte lost": good[:len(good)-1],
	}
	for _, at := range []int{3, 20, snapshotHeaderSize + 2, snapshotHeaderSize + snapSegHeaderSize + 5, len(good) / 3, len(good) - 2} {
		b := bytes.Clone(good)
		b[at] ^= 0x20
		bad[fmt.Sprintf("byte %d flipped", at)] = b
	}
	for name, b := range bad {
		err := dst.Restore(bytes.NewReader(b))
		if !errors.Is(err, ErrBadSnapshot) {
			t.Fatalf("%s: Restore = %v, want ErrBadSnapshot", name, err)
		}
		checkState(t, dst, want)
		if _, err := os.Stat(dst.dir + restoreSuffix); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s: a failed Restore left its directory: %v", name, err)
		}
	}
}

// A crash during Restore's swap: Open finishes it from what is on disk.
func TestOpenFinishesInterruptedRestore(t *testing.T) {
	src := openLog(t, t.TempDir(), smallConfig)
	(&filler{t: t, l: src}).batches(30)
	want := stateOf(t, src)
	stream := snapshotStream(t, src)

	// Crashed after renaming DIR away, before renaming DIR.restore in.
	dst := openLog(t, filepath.Join(t.TempDir(), "dst"), smallConfig)
	(&filler{t: t, l: dst}).batches(3)
	dst.Close()
	if err := os.Mkdir(dst.dir+restoreSuffix, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writeSnapshotDir(dst.dir+restoreSuffix, bytes.NewReader(stream.Bytes()), smallConfig); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dst.dir, dst.dir+oldSuffix); err != nil {
		t.Fatal(err)
	}
	l := openLog(t, dst.dir, smallConfig)
	checkState(t, l, want)
	for _, leftover := range []string{dst.dir + restoreSuffix, dst.dir + oldSuffix} {
		if _, err := os.Stat(leftover); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("Open left %s: %v", leftover, err)
		}
	}

	// Crashed while writing DIR.restore: the old log stays.
	l.Close()
	os.MkdirAll(filepath.Join(l.dir+restoreSuffix, "junk"), 0o755)
	l = openLog(t, l.dir, smallConfig)
	checkState(t, l, want)
	if _, err := os.Stat(l.dir + restoreSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open left a partial restore: %v", err)
	}
}
