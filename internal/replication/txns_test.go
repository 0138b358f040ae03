package replication

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/recordbatch"
	"github.com/tapes-dev/tapes/internal/storage"
)

// txnEntry is the Raft entry of a transactional Kafka batch of n records
// from p.
func txnEntry(index uint64, p storage.ProducerInfo, n int) *raft.Log {
	return &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: encodeBatchCmd(0, txnBatch(p, n))}
}

func txnBatch(p storage.ProducerInfo, n int) storage.Batch {
	recs := make([]storage.Record, n)
	for i := range recs {
		recs[i] = storage.Record{Timestamp: 1, Value: []byte(fmt.Sprintf("p%d-s%d", p.ID, int(p.BaseSequence)+i))}
	}
	b, err := storage.WrapKafka(recordbatch.EncodeTransactional(recordbatch.Producer{ID: p.ID, Epoch: int16(p.Epoch), BaseSequence: p.BaseSequence}, recs))
	if err != nil {
		panic(err)
	}
	return b
}

// markerEntry is the Raft entry of a marker, as WriteMarker proposes it.
func markerEntry(index uint64, id int64, epoch int16, commit bool) *raft.Log {
	b, err := storage.WrapKafka(recordbatch.EncodeMarker(recordbatch.Marker{ProducerID: id, ProducerEpoch: epoch, Commit: commit, CoordinatorEpoch: 3}, 1))
	if err != nil {
		panic(err)
	}
	return &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: encodeBatchCmd(0, b)}
}

// stateOfProducers renders everything the producer state holds, producers
// in id order, for comparing a live state with a rebuilt one.
func stateOfProducers(ps *producerState) string {
	ps.mu.RLock()
	defer ps.mu.RUnlock()
	ids := make([]int64, 0, len(ps.m))
	for id := range ps.m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var b bytes.Buffer
	for _, id := range ids {
		e := ps.m[id]
		fmt.Fprintf(&b, "p%d epoch %d batches %v last %d txn %d coordinator %d; ", id, e.epoch, e.batches, e.last, e.txnFirst, e.coordEpoch)
	}
	fmt.Fprintf(&b, "ongoing %v aborted %v end %d", ps.ongoing, ps.aborted, ps.end)
	return b.String()
}

// TestTransactionsInTheFSM: transactional batches open a transaction at
// their first offset, markers close it, the last stable offset is the
// oldest open transaction's first offset, aborts are indexed; a marker of
// an older epoch is refused and one of a newer epoch fences the older; a
// marker without an open transaction is written. The state rebuilt after a
// reopen, after a snapshot restore, and after retention cuts through
// transactions, equals the live one.
func TestTransactionsInTheFSM(t *testing.T) {
	dir := t.TempDir()
	open := func(dir string) (*storage.Log, *fsm) { return openFSM(t, dir, 300) }
	l, f := open(dir)
	idx := uint64(0)
	apply := func(e *raft.Log) applyResult {
		t.Helper()
		return f.Apply(e).(applyResult)
	}
	next := func() uint64 { idx++; return idx }
	lso := func() int64 { return min(f.producers.lso(), f.log.EndOffset()) }
	mustAt := func(r applyResult, at int64) {
		t.Helper()
		if r.err != nil || r.baseOffset != at {
			t.Fatalf("applied %+v, want offset %d", r, at)
		}
	}
	p1 := storage.ProducerInfo{ID: 10, Epoch: 0, BaseSequence: 0}
	p2 := storage.ProducerInfo{ID: 20, Epoch: 0, BaseSequence: 0}
	mustAt(apply(txnEntry(next(), p1, 2)), 0)     // p1's transaction at 0
	mustAt(apply(batchEntry(next(), "plain")), 2) // not transactional
	mustAt(apply(txnEntry(next(), p2, 1)), 3)     // p2's at 3
	p1.BaseSequence = 2
	mustAt(apply(txnEntry(next(), p1, 2)), 4) // p1 goes on
	if got := lso(); got != 0 {
		t.Fatalf("LSO %d with p1 open at 0, want 0", got)
	}
	mustAt(apply(markerEntry(next(), 10, 0, false)), 6) // p1 aborts
	if got := lso(); got != 3 {
		t.Fatalf("LSO %d after p1's abort, want p2's 3", got)
	}
	mustAt(apply(markerEntry(next(), 20, 0, true)), 7) // p2 commits
	if got := lso(); got != 8 {
		t.Fatalf("LSO %d with nothing open, want the log end 8", got)
	}
	want := []AbortedTxn{{ProducerID: 10, FirstOffset: 0, LastOffset: 6}}
	for _, c := range []struct {
		from, to int64
		want     []AbortedTxn
	}{{0, 8, want}, {6, 7, want}, {7, 8, nil}, {0, 1, want}} {
		if got := f.producers.abortedIn(c.from, c.to); !slices.Equal(got, c.want) {
			t.Errorf("aborted in [%d, %d) = %v, want %v", c.from, c.to, got, c.want)
		}
	}

	// p1 again, then a marker of a newer epoch (the coordinator fenced
	// p1 at epoch 0): p1's epoch 0 is refused from then on, batches and
	// markers alike.
	p1.BaseSequence = 4
	mustAt(apply(txnEntry(next(), p1, 1)), 8)
	mustAt(apply(markerEntry(next(), 10, 1, false)), 9)
	if r := apply(markerEntry(next(), 10, 0, true)); !kerr.Is(r.err, kerr.InvalidProducerEpoch) {
		t.Fatalf("marker of epoch 0 after epoch 1: %+v", r)
	}
	p1.BaseSequence = 5
	if r := apply(txnEntry(next(), p1, 1)); !kerr.Is(r.err, kerr.InvalidProducerEpoch) {
		t.Fatalf("batch of epoch 0 after epoch 1's marker: %+v", r)
	}
	// Epoch 1 may start at any sequence after the marker (it knows no
	// sequence of epoch 1 yet); a marker for a producer with nothing open
	// here is written, and lists an abort of just itself, as Kafka's.
	mustAt(apply(txnEntry(next(), storage.ProducerInfo{ID: 10, Epoch: 1, BaseSequence: 0}, 2)), 10)
	mustAt(apply(markerEntry(next(), 30, 0, false)), 12)
	if got := lso(); got != 10 {
		t.Fatalf("LSO %d with p1 epoch 1 open at 10", got)
	}
	want = append(want, AbortedTxn{10, 8, 9}, AbortedTxn{30, 12, 12})
	if got := f.producers.abortedIn(0, 100); !slices.Equal(got, want) {
		t.Fatalf("aborted %v, want %v", got, want)
	}
	live := stateOfProducers(f.producers)

	// Reopened (a restart): rebuilt from the batch headers and markers.
	l.Close()
	l, f = open(dir)
	if got := stateOfProducers(f.producers); got != live {
		t.Fatalf("rebuilt after a reopen:\n%s\nlive:\n%s", got, live)
	}

	// A snapshot restored into another replica's log.
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var stream bytes.Buffer
	if _, err := snap.(*fsmSnapshot).snap.WriteTo(&stream); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	l2, f2 := open(t.TempDir())
	defer l2.Close()
	if err := f2.Restore(ioNopCloser{&stream}); err != nil {
		t.Fatal(err)
	}
	if got := stateOfProducers(f2.producers); got != live {
		t.Fatalf("rebuilt after a snapshot restore:\n%s\nlive:\n%s", got, live)
	}

	// Retention through p1's first aborted transaction (0..6), then
	// through its open one (10..), then inside a plain batch: live and
	// rebuilt agree; aborted entries wholly below the log start go.
	mustAt(apply(batchEntry(next(), "x", "y", "z")), 13)
	for _, cut := range []int64{4, 7, 11, 14} {
		f.Apply(&raft.Log{Index: next(), Term: 1, Type: raft.LogCommand, Data: encodeDeleteBeforeCmd(cut)})
		if f.log.StartOffset() != cut {
			t.Fatalf("log start %d, want %d", f.log.StartOffset(), cut)
		}
		rebuilt := newProducerState()
		if err := rebuilt.rebuild(f.log); err != nil {
			t.Fatal(err)
		}
		if got, want := stateOfProducers(f.producers), stateOfProducers(rebuilt); got != want {
			t.Fatalf("after the log start moved to %d, live:\n%s\nrebuilt:\n%s", cut, got, want)
		}
		for _, a := range f.producers.abortedIn(0, 100) {
			if a.LastOffset < cut || a.FirstOffset < cut {
				t.Fatalf("log start %d: aborted %v kept", cut, a)
			}
		}
	}
	// The open transaction's first batch (10) was deleted: it is forgotten
	// (no batch of it is left), so the LSO is the log end.
	if got := lso(); got != f.log.EndOffset() {
		t.Fatalf("LSO %d after the open transaction's batches were deleted, want the log end %d", got, f.log.EndOffset())
	}
	l.Close()
}

type ioNopCloser struct{ *bytes.Buffer }

func (ioNopCloser) Close() error { return nil }

// TestWriteMarkerAndIsolation through a real Raft group: read_committed
// stops at an open transaction (FetchIsolated, FetchBatches, ListOffsets);
// read_uncommitted sees its records; WriteMarker wakes a Watch; after the
// abort read_committed drops the aborted records, FetchBatches lists the
// aborted transaction; no reader gets a control record as data, and
// NextOffset goes past a trailing marker; a stale marker is refused.
func TestWriteMarkerAndIsolation(t *testing.T) {
	r := openSolo(t, t.TempDir(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := produceValues(t, r, AcksAll, storage.NoProducer, "a"); err != nil {
		t.Fatal(err)
	}
	aborting := storage.ProducerInfo{ID: 1, Epoch: 0, BaseSequence: 0}
	committing := storage.ProducerInfo{ID: 2, Epoch: 0, BaseSequence: 0}
	for _, p := range []storage.ProducerInfo{aborting, committing} {
		if res, err := r.Produce(ctx, AcksAll, txnBatch(p, 2)); err != nil {
			t.Fatalf("transactional batch of %d: %+v, %v", p.ID, res, err)
		}
	}
	// Offsets: a 0, producer 1's 1-2, producer 2's 3-4.
	if got := r.LastStableOffset(); got != 1 || r.Status().LastStable != 1 {
		t.Fatalf("LSO %d, want 1", got)
	}
	values := func(res FetchResult) []string {
		var out []string
		for _, rec := range res.Records {
			out = append(out, string(rec.Value))
		}
		return out
	}
	res, err := r.FetchIsolated(ctx, 0, 1<<20, 0, ReadCommitted)
	if err != nil || !slices.Equal(values(res), []string{"a"}) || res.LastStable != 1 || res.NextOffset != 1 {
		t.Fatalf("read_committed: %q %+v %v", values(res), res, err)
	}
	res, err = r.FetchIsolated(ctx, 0, 1<<20, 0, ReadUncommitted)
	if err != nil || len(res.Records) != 5 || res.NextOffset != 5 {
		t.Fatalf("read_uncommitted: %q %v", values(res), err)
	}
	bf, err := r.FetchBatches(1, 1<<20, true, ReadCommitted)
	if err != nil || len(bf.Batches) != 0 || bf.LastStable != 1 || bf.HighWatermark != 5 || bf.Aborted == nil {
		t.Fatalf("FetchBatches read_committed at the LSO: %+v %v", bf, err)
	}
	if off, _, _, err := r.ListOffsetsIsolated(LatestTimestamp, ReadCommitted); err != nil || off != 1 {
		t.Fatalf("ListOffsets latest read_committed = %d, %v; want 1", off, err)
	}

	w := Watch([]*Replica{r})
	if off, err := r.WriteMarker(ctx, Marker{ProducerID: 1, ProducerEpoch: 0, Commit: false, CoordinatorEpoch: 1}); err != nil || off != 5 {
		t.Fatalf("abort marker: %d, %v", off, err)
	}
	if !w.Wait(ctx, time.After(30*time.Second)) {
		t.Fatal("the marker did not wake the watch")
	}
	if got := r.LastStableOffset(); got != 3 {
		t.Fatalf("LSO %d after producer 1's abort, want 3", got)
	}
	if off, err := r.WriteMarker(ctx, Marker{ProducerID: 2, ProducerEpoch: 0, Commit: true}); err != nil || off != 6 {
		t.Fatalf("commit marker: %d, %v", off, err)
	}
	if got := r.LastStableOffset(); got != 7 || got != r.HighWatermark() {
		t.Fatalf("LSO %d, want the high watermark 7", got)
	}
	res, err = r.FetchIsolated(ctx, 0, 1<<20, 0, ReadCommitted)
	if want := []string{"a", "p2-s0", "p2-s1"}; err != nil || !slices.Equal(values(res), want) || res.NextOffset != 7 {
		t.Fatalf("read_committed after the markers: %q (next %d), %v; want %q", values(res), res.NextOffset, err, want)
	}
	res, err = r.FetchIsolated(ctx, 0, 1<<20, 0, ReadUncommitted)
	if want := []string{"a", "p1-s0", "p1-s1", "p2-s0", "p2-s1"}; err != nil || !slices.Equal(values(res), want) {
		t.Fatalf("read_uncommitted after the markers: %q, %v; want %q", values(res), err, want)
	}
	// What the page draws: the markers read, the transactional batches and
	// the aborted transactions, at both isolation levels.
	for _, iso := range []IsolationLevel{ReadUncommitted, ReadCommitted} {
		res, err = r.FetchIsolated(ctx, 0, 1<<20, 0, iso)
		markers := fmt.Sprint(res.Markers)
		if err != nil || markers != "[{5 {1 0 false 1}} {6 {2 0 true 0}}]" ||
			!slices.Equal(res.TxnBatches, []TxnBatch{{ProducerID: 1, BaseOffset: 1, NextOffset: 3}, {ProducerID: 2, BaseOffset: 3, NextOffset: 5}}) ||
			!slices.Equal(res.Aborted, []AbortedTxn{{ProducerID: 1, FirstOffset: 1, LastOffset: 5}}) {
			t.Fatalf("isolation %d: markers %s, transactional batches %v, aborted %v, %v", iso, markers, res.TxnBatches, res.Aborted, err)
		}
		if id, ok := Transactional(res.TxnBatches, 2); !ok || id != 1 {
			t.Fatalf("offset 2: producer %d, %v; want 1", id, ok)
		}
		if _, ok := Transactional(res.TxnBatches, 0); ok {
			t.Fatal("offset 0 (not transactional) found among the transactional batches")
		}
	}
	// At a marker: no record, the next offset past it.
	res, err = r.FetchIsolated(ctx, 6, 1<<20, 0, ReadUncommitted)
	if err != nil || len(res.Records) != 0 || res.NextOffset != 7 || len(res.Markers) != 1 || res.Markers[0].Offset != 6 || !res.Markers[0].Commit {
		t.Fatalf("fetch at the trailing marker: %+v, %v", res, err)
	}
	bf, err = r.FetchBatches(0, 1<<20, true, ReadCommitted)
	if err != nil || len(bf.Batches) != 5 || !slices.Equal(bf.Aborted, []AbortedTxn{{ProducerID: 1, FirstOffset: 1, LastOffset: 5}}) {
		t.Fatalf("FetchBatches read_committed: %d batches, aborted %v, %v", len(bf.Batches), bf.Aborted, err)
	}
	if !bf.Batches[3].Batch.Control() || !bf.Batches[4].Batch.Control() {
		t.Fatal("the markers are not returned as stored control batches")
	}
	bf, err = r.FetchBatches(0, 1<<20, true, ReadUncommitted)
	if err != nil || bf.Aborted != nil {
		t.Fatalf("FetchBatches read_uncommitted lists aborted transactions: %+v, %v", bf.Aborted, err)
	}
	// A marker of an older epoch than the producer's is refused; a newer
	// one fences epoch 0.
	if _, err := r.WriteMarker(ctx, Marker{ProducerID: 2, ProducerEpoch: 1, Commit: false}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.WriteMarker(ctx, Marker{ProducerID: 2, ProducerEpoch: 0, Commit: true}); !kerr.Is(err, kerr.InvalidProducerEpoch) {
		t.Fatalf("stale marker: %v", err)
	}
	if _, err := r.Produce(ctx, AcksAll, txnBatch(storage.ProducerInfo{ID: 2, Epoch: 0, BaseSequence: 2}, 1)); !kerr.Is(err, kerr.InvalidProducerEpoch) {
		t.Fatalf("batch of a fenced epoch: %v", err)
	}
}
