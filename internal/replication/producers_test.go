package replication

import (
	"fmt"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/recordbatch"
	"github.com/tapes-dev/tapes/internal/storage"
)

func producerEntryLog(index uint64, p storage.ProducerInfo, n int) *raft.Log {
	return batchEntryOf(index, p, n, false)
}

// batchEntryOf is the Raft entry of a batch of n records from p: a Kafka
// record batch (storage format version 3) when kafka, else version 2.
func batchEntryOf(index uint64, p storage.ProducerInfo, n int, kafka bool) *raft.Log {
	recs := make([]storage.Record, n)
	for i := range recs {
		recs[i] = storage.Record{Timestamp: 1, Value: []byte(fmt.Sprintf("p%d-s%d", p.ID, int(p.BaseSequence)+i))}
	}
	b := storage.EncodeProducerBatch(p, recs)
	if kafka {
		var err error
		b, err = storage.WrapKafka(recordbatch.Encode(recordbatch.Producer{ID: p.ID, Epoch: int16(p.Epoch), BaseSequence: p.BaseSequence}, recs))
		if err != nil {
			panic(err)
		}
	}
	return &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: encodeBatchCmd(0, b)}
}

// TestIdempotentProducerState: duplicates are answered with the original
// offset and not appended; gaps and stale epochs are refused; the state
// rebuilt from the log after a restart decides exactly as the live one.
// The same for tapes' own batches, Kafka batches, and a producer whose
// batches alternate between the two (one replicated state for both front
// ends).
func TestIdempotentProducerState(t *testing.T) {
	for _, format := range []struct {
		name  string
		kafka func(index uint64) bool
	}{
		{"tapes batches", func(uint64) bool { return false }},
		{"Kafka batches", func(uint64) bool { return true }},
		{"alternating", func(i uint64) bool { return i%2 == 0 }},
	} {
		t.Run(format.name, func(t *testing.T) { testIdempotentProducerState(t, format.kafka) })
	}
}

func testIdempotentProducerState(t *testing.T, kafka func(index uint64) bool) {
	dir := t.TempDir()
	l, f := openFSM(t, dir, 1024)
	idx := uint64(0)
	apply := func(f *fsm, p storage.ProducerInfo, n int) applyResult {
		idx++
		return f.Apply(batchEntryOf(idx, p, n, kafka(idx))).(applyResult)
	}
	pid := int64(1000)
	seq := int32(0)
	for i := 0; i < 8; i++ {
		if r := apply(f, storage.ProducerInfo{ID: pid, Epoch: 0, BaseSequence: seq}, 3); r.err != nil || r.duplicate || r.baseOffset != int64(seq) {
			t.Fatalf("batch %d: %+v", i, r)
		}
		seq += 3
	}
	checks := func(f *fsm, label string) {
		t.Helper()
		end := f.log.EndOffset()
		// The last 5 batches are remembered: a retry of any is a duplicate.
		for _, s := range []int32{9, 12, 21} {
			r := apply(f, storage.ProducerInfo{ID: pid, Epoch: 0, BaseSequence: s}, 3)
			if r.err != nil || !r.duplicate || r.baseOffset != int64(s) {
				t.Errorf("%s: retry of sequence %d: %+v", label, s, r)
			}
		}
		// Older than the last 5, a gap, a partial overlap: refused.
		for _, s := range []int32{6, 25, 22} {
			if r := apply(f, storage.ProducerInfo{ID: pid, Epoch: 0, BaseSequence: s}, 3); !kerr.Is(r.err, kerr.OutOfOrderSequenceNumber) {
				t.Errorf("%s: sequence %d: %+v, want OUT_OF_ORDER_SEQUENCE_NUMBER", label, s, r)
			}
		}
		if f.log.EndOffset() != end {
			t.Errorf("%s: refused or duplicate batches changed the log end from %d to %d", label, end, f.log.EndOffset())
		}
	}
	checks(f, "live")
	l.Close()

	l, g := openFSM(t, dir, 1024)
	defer l.Close()
	checks(g, "rebuilt from the log")

	// A new epoch starts at 0; the old epoch is then fenced.
	if r := apply(g, storage.ProducerInfo{ID: pid, Epoch: 1, BaseSequence: 5}, 1); !kerr.Is(r.err, kerr.OutOfOrderSequenceNumber) {
		t.Errorf("new epoch not at 0: %+v", r)
	}
	if r := apply(g, storage.ProducerInfo{ID: pid, Epoch: 1, BaseSequence: 0}, 1); r.err != nil || r.duplicate {
		t.Errorf("new epoch at 0: %+v", r)
	}
	if r := apply(g, storage.ProducerInfo{ID: pid, Epoch: 0, BaseSequence: 24}, 1); !kerr.Is(r.err, kerr.InvalidProducerEpoch) {
		t.Errorf("stale epoch: %+v", r)
	}
	// Non-idempotent batches are never deduplicated.
	for i := 0; i < 2; i++ {
		idx++
		r := g.Apply(batchEntry(idx, "same")).(applyResult)
		if r.err != nil || r.duplicate {
			t.Fatalf("plain batch: %+v", r)
		}
	}
}

// TestProducerStatePrunedWithRetention: after retention deletes a
// producer's batches, the live state and the state rebuilt from the log
// agree (every replica must decide the same).
func TestProducerStatePrunedWithRetention(t *testing.T) {
	dir := t.TempDir()
	l, f := openFSM(t, dir, 1024)
	defer l.Close()
	idx := uint64(0)
	for i := int32(0); i < 40; i++ {
		idx++
		if r := f.Apply(producerEntryLog(idx, storage.ProducerInfo{ID: 7, BaseSequence: 2 * i}, 2)).(applyResult); r.err != nil {
			t.Fatal(r.err)
		}
	}
	segs := l.Segments()
	cut := segs[len(segs)-1].BaseOffset
	idx++
	f.Apply(&raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: encodeDeleteBeforeCmd(cut)})
	rebuilt := newProducerState()
	if err := rebuilt.rebuild(l); err != nil {
		t.Fatal(err)
	}
	live := f.producers.m[7]
	again := rebuilt.m[7]
	if live == nil || again == nil || fmt.Sprint(live.batches) != fmt.Sprint(again.batches) || live.epoch != again.epoch {
		t.Fatalf("live %+v, rebuilt %+v", live, again)
	}
	for _, b := range live.batches {
		if b.baseOffset < l.StartOffset() {
			t.Fatalf("batch at %d below log start %d kept", b.baseOffset, l.StartOffset())
		}
	}
}
