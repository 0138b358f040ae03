package replication

import (
	"testing"

	"github.com/hashicorp/raft"

	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/recordbatch"
	"github.com/tapes-dev/tapes/internal/storage"
)

// coordMarkerEntry is the Raft entry of a marker from a coordinator of
// epoch coord.
func coordMarkerEntry(index uint64, id int64, epoch int16, coord int32) *raft.Log {
	b, err := storage.WrapKafka(recordbatch.EncodeMarker(recordbatch.Marker{ProducerID: id, ProducerEpoch: epoch, Commit: true, CoordinatorEpoch: coord}, 1))
	if err != nil {
		panic(err)
	}
	return &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: encodeBatchCmd(0, b)}
}

// TestMarkerOfADeposedCoordinatorIsFenced: once a coordinator of epoch 5
// wrote a marker of producer 10, a marker of producer 10 from coordinator
// epoch 4 (a deposed coordinator still completing) is
// TRANSACTION_COORDINATOR_FENCED and nothing is written, whatever its
// producer epoch; epochs 5 and 6 are written. Another producer's markers
// are not judged by producer 10's. The coordinator epoch is rebuilt from
// the markers after a reopen, so the fencing survives a restart.
func TestMarkerOfADeposedCoordinatorIsFenced(t *testing.T) {
	dir := t.TempDir()
	l, f := openFSM(t, dir, 300)
	idx := uint64(0)
	apply := func(e *raft.Log) applyResult {
		t.Helper()
		return f.Apply(e).(applyResult)
	}
	next := func() uint64 { idx++; return idx }
	mustAt := func(r applyResult, at int64) {
		t.Helper()
		if r.err != nil || r.baseOffset != at {
			t.Fatalf("applied %+v, want offset %d", r, at)
		}
	}
	p := storage.ProducerInfo{ID: 10, Epoch: 0, BaseSequence: 0}
	mustAt(apply(txnEntry(next(), p, 1)), 0)
	mustAt(apply(coordMarkerEntry(next(), 10, 0, 5)), 1)
	fenced := func(what string, e *raft.Log) {
		t.Helper()
		end := f.log.EndOffset()
		if r := apply(e); !kerr.Is(r.err, kerr.TransactionCoordinatorFenced) {
			t.Fatalf("%s: %+v, want TRANSACTION_COORDINATOR_FENCED", what, r)
		}
		if f.log.EndOffset() != end {
			t.Fatalf("%s: the log end moved from %d to %d", what, end, f.log.EndOffset())
		}
	}
	fenced("coordinator epoch 4 after 5", coordMarkerEntry(next(), 10, 0, 4))
	fenced("coordinator epoch 4 after 5, a newer producer epoch", coordMarkerEntry(next(), 10, 1, 4))
	mustAt(apply(coordMarkerEntry(next(), 10, 0, 5)), 2) // the same coordinator again
	mustAt(apply(coordMarkerEntry(next(), 20, 0, 1)), 3) // another producer: its own history
	mustAt(apply(coordMarkerEntry(next(), 10, 0, 6)), 4) // a newer coordinator
	fenced("coordinator epoch 5 after 6", coordMarkerEntry(next(), 10, 0, 5))

	l.Close()
	l, f = openFSM(t, dir, 300)
	defer l.Close()
	fenced("coordinator epoch 5 after 6, reopened", coordMarkerEntry(next(), 10, 0, 5))
	mustAt(apply(coordMarkerEntry(next(), 10, 0, 6)), 5)
}
