package replication

import (
	"context"
	"time"

	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/recordbatch"
	"github.com/tapes-dev/tapes/internal/storage"
)

// Transactions inside a partition (issue 13): a transactional producer's
// batches open a transaction at their first offset; the coordinator's
// marker (WriteMarker) closes it; the last stable offset is the first
// offset of the oldest open transaction (or the high watermark); the
// aborted transactions are indexed for read_committed readers. All of it
// is the producer state's (producers.go): a pure function of the log.

// IsolationLevel is Kafka's isolation.level of a fetch or ListOffsets.
type IsolationLevel int8

const (
	// ReadUncommitted reads up to the high watermark, aborted data and
	// open transactions included.
	ReadUncommitted IsolationLevel = 0
	// ReadCommitted reads only below the last stable offset; the aborted
	// transactions there are named (Kafka's Fetch) or their records
	// dropped (FetchIsolated).
	ReadCommitted IsolationLevel = 1
)

// AbortedTxn is one aborted transaction of a partition: its producer, the
// offset of its first batch here (Kafka's Fetch answers these two) and the
// offset of its abort marker.
type AbortedTxn struct {
	ProducerID  int64
	FirstOffset int64
	LastOffset  int64
}

// Marker is what the transaction coordinator writes into a partition to end
// a producer's transaction there (Kafka's WriteTxnMarkers).
type Marker struct {
	ProducerID    int64
	ProducerEpoch int16
	// Commit: a commit marker; otherwise abort.
	Commit           bool
	CoordinatorEpoch int32
}

// WriteMarker appends m as Kafka's control batch (recordbatch.EncodeMarker,
// stored verbatim as storage version 3) through Raft with acks=all
// (min.insync.replicas applies: NOT_ENOUGH_REPLICAS, ..._AFTER_APPEND),
// and returns its offset once committed. The marker sets the producer's
// epoch (fencing older ones) and ends its open transaction here, if any:
// a marker for a producer without one is written all the same, as Kafka
// does. A marker whose epoch is older than the producer's current one is
// refused (INVALID_PRODUCER_EPOCH, nothing written), and so is one whose
// coordinator epoch is older than that of the producer's last marker here
// (TRANSACTION_COORDINATOR_FENCED). The ready leader only
// (NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE otherwise); REQUEST_TIMED_OUT
// when ctx ends first (the marker may still commit). Safe for concurrent
// use; it blocks until the outcome is known or ctx is done. The partition
// does not check that the coordinator added it to the transaction.
func (r *Replica) WriteMarker(ctx context.Context, m Marker) (offset int64, err error) {
	if m.ProducerID < 0 || m.ProducerEpoch < 0 {
		return -1, kerr.New(kerr.InvalidRequest, "marker for producer %d epoch %d: a producer id and epoch are never negative", m.ProducerID, m.ProducerEpoch)
	}
	kb := recordbatch.EncodeMarker(recordbatch.Marker{ProducerID: m.ProducerID, ProducerEpoch: m.ProducerEpoch,
		Commit: m.Commit, CoordinatorEpoch: m.CoordinatorEpoch}, time.Now().UnixMilli())
	b, err := storage.WrapKafka(kb)
	if err != nil {
		return -1, kerr.New(kerr.UnknownServerError, "marker batch: %v", err)
	}
	res, err := r.Produce(ctx, AcksAll, b)
	if err != nil {
		return -1, err
	}
	return res.BaseOffset, nil
}

// LastStableOffset is the partition's last stable offset as this replica
// applied it: the first offset of its oldest open transaction, or the high
// watermark when none is open. Never above HighWatermark. Safe from any
// goroutine; it does not block.
func (r *Replica) LastStableOffset() int64 {
	return min(r.fsm.producers.lso(), r.log.EndOffset())
}

// AbortedTxns returns the aborted transactions that overlap [from, to):
// those whose abort marker is at or above from and whose first offset is
// below to, in marker order, as Kafka's Fetch lists them for the records it
// returns. Safe from any goroutine; it does not block.
func (r *Replica) AbortedTxns(from, to int64) []AbortedTxn {
	return r.fsm.producers.abortedIn(from, to)
}

// upTo is where a read at isolation stops: the high watermark hw, or the
// last stable offset for read_committed.
func (r *Replica) upTo(hw int64, isolation IsolationLevel) int64 {
	if isolation == ReadCommitted {
		return min(r.LastStableOffset(), hw)
	}
	return hw
}

// abortedBatch reports whether a transactional batch at base of producer
// id belongs to one of the aborted transactions aborted.
func abortedBatch(aborted []AbortedTxn, id, base int64) bool {
	for _, a := range aborted {
		if a.ProducerID == id && a.FirstOffset <= base && base < a.LastOffset {
			return true
		}
	}
	return false
}
