package storage

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
)

// recordAt is the record the tests store at offset n of a log filled from
// offset 0: its content is derived from n, so any record read back can be
// checked on its own.
func recordAt(n int64) Record {
	r := Record{
		Offset:    n,
		Timestamp: 1_000_000 + n*10,
		Key:       []byte(fmt.Sprintf("key-%d", n)),
		Value:     bytes.Repeat([]byte{byte('a' + n%26)}, int(20+n%37)),
		Headers:   []Header{{Key: "event_id", Value: []byte(fmt.Sprintf("e%d", n))}},
	}
	if n%5 == 0 {
		r.Key = nil
	}
	return r
}

// batchAt encodes recordAt(first..first+count-1).
func batchAt(first int64, count int) Batch {
	recs := make([]Record, count)
	for i := range recs {
		recs[i] = recordAt(first + int64(i))
	}
	return EncodeBatch(recs)
}

// filler appends batches of recordAt records to a log, with Raft indexes
// 1, 2, 3, ... and batch sizes cycling through 1..7 records.
type filler struct {
	t    testing.TB
	l    *Log
	raft uint64
	n    int // batches appended
}

func (f *filler) batch(count int) int64 {
	f.t.Helper()
	f.raft++
	end := f.l.EndOffset()
	base, err := f.l.Append(f.raft, batchAt(end, count))
	if err != nil {
		f.t.Fatalf("append at Raft index %d: %v", f.raft, err)
	}
	if base != end {
		f.t.Fatalf("append got offset %d, want %d", base, end)
	}
	f.n++
	return base
}

func (f *filler) batches(n int) {
	f.t.Helper()
	for i := 0; i < n; i++ {
		f.batch(1 + f.n%7)
	}
}

// smallConfig makes many small segments and a dense index.
var smallConfig = Config{SegmentBytes: 4096, IndexIntervalBytes: 512}

func openLog(t testing.TB, dir string, cfg Config) *Log {
	t.Helper()
	l, err := Open(dir, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func reopen(t testing.TB, l *Log) *Log {
	t.Helper()
	if err := l.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	return openLog(t, l.dir, l.cfg)
}

// readAll reads [StartOffset, EndOffset) in pieces of about 3000 bytes.
func readAll(t testing.TB, l *Log) []Record {
	t.Helper()
	var out []Record
	for o, end := l.StartOffset(), l.EndOffset(); o < end; {
		recs, err := l.Read(o, 3000, end)
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

// checkRecords fails unless recs are exactly recordAt(from..to-1).
func checkRecords(t testing.TB, recs []Record, from, to int64) {
	t.Helper()
	if int64(len(recs)) != to-from {
		t.Fatalf("got %d records, want %d (offsets %d..%d)", len(recs), to-from, from, to-1)
	}
	for i, r := range recs {
		if want := recordAt(from + int64(i)); !reflect.DeepEqual(r, want) {
			t.Fatalf("record %d:\n got %+v\nwant %+v", i, r, want)
		}
	}
}

// copyDir copies the regular files of src into a new directory.
func copyDir(t testing.TB, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "copy")
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		in, err := os.Open(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(filepath.Join(dst, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, in); err != nil {
			t.Fatal(err)
		}
		in.Close()
		out.Close()
	}
	return dst
}

// logRecorder is a slog handler that keeps the records logged.
type logRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r)
	return nil
}
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecorder) WithGroup(string) slog.Handler      { return h }

// attr returns the value of key in the first record with message msg.
func (h *logRecorder) attr(msg, key string) (slog.Value, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.recs {
		if r.Message != msg {
			continue
		}
		var v slog.Value
		found := false
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == key {
				v, found = a.Value, true
				return false
			}
			return true
		})
		return v, found
	}
	return slog.Value{}, false
}

// framePositions lists where each frame of a segment file starts, by a
// linear scan, with the frame's offsets.
type framePos struct {
	pos, base, next int64
	raft            uint64
}

func framePositions(t testing.TB, path string) []framePos {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	var out []framePos
	sc := newFrameScanner(f, 0, fi.Size())
	for {
		pos := sc.pos
		h, b, err := sc.next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("scan %s: %v", path, err)
		}
		out = append(out, framePos{pos: pos, base: h.baseOffset, next: h.baseOffset + int64(b.Count()), raft: h.raftIndex})
	}
}

// trimmedLog is a log of 80 batches whose retention cut into its third
// segment, and tail batches after that: a log start inside a segment and
// several sealed segments, as snapshots meet them.
func trimmedLog(t testing.TB, tail int) (*Log, *filler) {
	t.Helper()
	l := openLog(t, t.TempDir(), smallConfig)
	f := &filler{t: t, l: l}
	f.batches(80)
	f.raft++
	if _, err := l.DeleteBefore(l.Segments()[2].BaseOffset+3, f.raft); err != nil {
		t.Fatal(err)
	}
	f.batches(tail)
	return l, f
}

// snapshotStream is the stream of a snapshot of l.
func snapshotStream(t testing.TB, l *Log) *bytes.Buffer {
	t.Helper()
	snap, err := l.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	var stream bytes.Buffer
	if _, err := snap.WriteTo(&stream); err != nil {
		t.Fatal(err)
	}
	return &stream
}

// restoredCopy streams a snapshot of l into a new log (smallConfig) and
// returns it.
func restoredCopy(t testing.TB, l *Log) *Log {
	t.Helper()
	stream := snapshotStream(t, l)
	dst := openLog(t, filepath.Join(t.TempDir(), "dst"), smallConfig)
	if err := dst.Restore(stream); err != nil {
		t.Fatal(err)
	}
	return dst
}
