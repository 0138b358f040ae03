package storage

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestSnapshotDir: a snapshot linked into a directory of its own and opened
// again from there writes the same stream as the original, of StreamSize
// bytes, after the log has moved on (appends, retention, a Restore), and
// restores to the snapshotted log.
func TestSnapshotDir(t *testing.T) {
	src, f := trimmedLog(t, 3)
	want := stateOf(t, src)

	snap, err := src.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var ref bytes.Buffer
	if _, err := snap.WriteTo(&ref); err != nil {
		t.Fatal(err)
	}
	if snap.StreamSize() != int64(ref.Len()) {
		t.Fatalf("StreamSize %d, WriteTo wrote %d", snap.StreamSize(), ref.Len())
	}
	kept := t.TempDir()
	if err := snap.LinkInto(kept); err != nil {
		t.Fatal(err)
	}
	m := snap.Manifest()
	if err := snap.Release(); err != nil {
		t.Fatal(err)
	}

	f.batches(60)
	f.raft++
	if _, err := src.DeleteBefore(src.EndOffset()-2, f.raft); err != nil {
		t.Fatal(err)
	}

	again, err := OpenSnapshotDir(kept, m)
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if _, err := again.WriteTo(&got); err != nil {
		t.Fatal(err)
	}
	if err := again.Release(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), ref.Bytes()) {
		t.Fatalf("reopened snapshot wrote %d bytes, differing from the original's %d", got.Len(), ref.Len())
	}
	if _, err := os.Stat(kept); err != nil {
		t.Fatalf("Release of a reopened snapshot removed its directory: %v", err)
	}
	if err := src.Restore(bytes.NewReader(got.Bytes())); err != nil {
		t.Fatal(err)
	}
	checkState(t, src, want)

	// A segment file shorter than the manifest says is refused.
	last := m.Segments[len(m.Segments)-1]
	if err := os.Truncate(filepath.Join(kept, segmentFile(last.BaseOffset)), last.Bytes-1); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenSnapshotDir(kept, m); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("open with a short segment: %v, want ErrBadSnapshot", err)
	}
	if _, err := OpenSnapshotDir(kept, SnapshotManifest{}); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("open with no segments: %v, want ErrBadSnapshot", err)
	}
}
