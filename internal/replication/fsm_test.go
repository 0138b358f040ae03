package replication

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/tapes-dev/tapes/internal/storage"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func batchEntry(index uint64, values ...string) *raft.Log {
	recs := make([]storage.Record, len(values))
	for i, v := range values {
		recs[i] = storage.Record{Timestamp: 1, Value: []byte(v)}
	}
	return &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: encodeBatchCmd(0, storage.EncodeBatch(recs))}
}

// openFSM opens the partition log in dir (segments of segmentBytes) and
// a state machine over it; the caller closes the log.
func openFSM(t *testing.T, dir string, segmentBytes int64) (*storage.Log, *fsm) {
	t.Helper()
	l, err := storage.Open(dir, storage.Config{SegmentBytes: segmentBytes}, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	f, err := newFSM(l, quietLogger())
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	return l, f
}

// TestFSMReplayIsIdempotent: Raft re-applies every entry after its last
// snapshot when a broker restarts. Re-applying entries the log already holds
// must change nothing; entries past it must append at the right offsets.
func TestFSMReplayIsIdempotent(t *testing.T) {
	dir := t.TempDir()
	open := func() (*storage.Log, *fsm) { return openFSM(t, dir, 1024) }
	var entries []*raft.Log
	for i := uint64(1); i <= 30; i++ {
		entries = append(entries, batchEntry(i, fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i)))
	}
	entries = append(entries, &raft.Log{Index: 31, Term: 1, Type: raft.LogCommand, Data: encodeDeleteBeforeCmd(10)})

	l, f := open()
	for _, e := range entries[:20] {
		if res := f.Apply(e).(applyResult); res.err != nil {
			t.Fatalf("apply %d: %v", e.Index, res.err)
		}
	}
	l.Close()

	// Restart: Raft replays from its last snapshot (say index 5) to the end.
	l, f = open()
	defer l.Close()
	for _, e := range entries[5:] {
		res := f.Apply(e).(applyResult)
		switch {
		case e.Index <= 20 && !errors.Is(res.err, storage.ErrAlreadyApplied):
			t.Fatalf("replayed entry %d was applied again: %+v", e.Index, res)
		case e.Index > 20 && res.err != nil:
			t.Fatalf("new entry %d: %v", e.Index, res.err)
		case e.Index > 20 && e.Index <= 30 && res.baseOffset != int64(2*(e.Index-1)):
			t.Fatalf("entry %d at offset %d, want %d", e.Index, res.baseOffset, 2*(e.Index-1))
		}
	}
	// A second full replay after the retention delete changes nothing either.
	for _, e := range entries {
		if res := f.Apply(e).(applyResult); !errors.Is(res.err, storage.ErrAlreadyApplied) {
			t.Fatalf("second replay of %d: %+v", e.Index, res)
		}
	}
	if l.EndOffset() != 60 || l.LastRaftIndex() != 31 {
		t.Fatalf("log end %d, last raft index %d; want 60 and 31", l.EndOffset(), l.LastRaftIndex())
	}
	if l.StartOffset() > 10 {
		t.Fatalf("log start %d moved past the retention point 10", l.StartOffset())
	}
	recs, err := l.Read(l.StartOffset(), 1<<20, l.EndOffset())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		i := r.Offset/2 + 1
		want := fmt.Sprintf("a%d", i)
		if r.Offset%2 == 1 {
			want = fmt.Sprintf("b%d", i)
		}
		if string(r.Value) != want {
			t.Fatalf("offset %d holds %q, want %q", r.Offset, r.Value, want)
		}
	}
}

// TestCommandRoundTrip checks the entry encoding the log store peeks at.
func TestCommandRoundTrip(t *testing.T) {
	b := storage.EncodeBatch([]storage.Record{{Value: []byte("x")}, {Value: []byte("y")}})
	data := encodeBatchCmd(42, b)
	id, n, plain, ok := peekBatchCmd(data)
	if !ok || id != 42 || n != 2 || !plain {
		t.Fatalf("peek = %d, %d, %v, %v", id, n, plain, ok)
	}
	if _, _, plain, _ := peekBatchCmd(encodeBatchCmd(0, storage.EncodeProducerBatch(storage.ProducerInfo{ID: 3}, []storage.Record{{Value: []byte("x")}}))); plain {
		t.Fatal("an idempotent batch peeked as plain")
	}
	c, err := decodeCmd(encodeDeleteBeforeCmd(77))
	if err != nil || c.kind != cmdDeleteBefore || c.offset != 77 {
		t.Fatalf("decode delete = %+v, %v", c, err)
	}
	if _, _, _, ok := peekBatchCmd(encodeDeleteBeforeCmd(1)); ok {
		t.Fatal("a delete entry peeked as a batch")
	}
	if _, err := decodeCmd([]byte{9, 0, 0}); err == nil {
		t.Fatal("garbage decoded")
	}
	if BrokerOf(ServerID(12)) != 12 || BrokerOf("x") != -1 || BrokerOf("") != -1 {
		t.Fatal("BrokerOf does not invert ServerID")
	}
}
