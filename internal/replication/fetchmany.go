package replication

import (
	"context"
	"errors"
	"reflect"
	"time"

	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/storage"
)

// What Kafka's Fetch needs beyond Fetch: whole stored batches (the Kafka
// front end returns batches, not records), and one wait over the many
// partitions of a request, woken by any of them, without a goroutine per
// partition.

// BatchFetch is a successful FetchBatches.
type BatchFetch struct {
	// Batches are whole committed batches, the first holding the offset
	// asked for (it may begin below it).
	Batches       []storage.StoredBatch
	HighWatermark int64
	// LastStable is the last stable offset (LastStableOffset) as the read
	// saw it.
	LastStable int64
	// Aborted (read_committed only) are the aborted transactions among the
	// batches returned (AbortedTxns from the offset to the end of the last
	// batch), for Kafka's Fetch; nil read_uncommitted.
	Aborted  []AbortedTxn
	LogStart int64
	// Term is the Raft term this replica leads in (Kafka's leader epoch).
	Term uint64
}

// FetchBatches reads committed batches from offset on the ready leader,
// never past the high watermark (read_committed: the last stable offset,
// with the aborted transactions among them), control batches included as
// stored, without waiting: storage.Log.ReadBatches
// bounded by maxBytes (minOne: the first batch however large, KIP-74).
// offset == high watermark gives no batches. Offsets below the log start or
// above the high watermark are OFFSET_OUT_OF_RANGE carrying both bounds; a
// replica that is not the ready leader answers NOT_LEADER_OR_FOLLOWER (with
// the leader and term its Raft knows) or LEADER_NOT_AVAILABLE (just elected,
// catching up). Safe for concurrent use; it does not block beyond disk reads.
func (r *Replica) FetchBatches(offset int64, maxBytes int, minOne bool, isolation IsolationLevel) (BatchFetch, error) {
	term, err := r.readyTerm()
	if err != nil {
		return BatchFetch{}, err
	}
	hw, start := r.log.EndOffset(), r.log.StartOffset()
	if offset < start || offset > hw {
		return BatchFetch{}, kerr.OutOfRange(offset, start, hw)
	}
	lso := r.LastStableOffset()
	var bs []storage.StoredBatch
	if upTo := r.upTo(hw, isolation); offset < upTo {
		bs, err = r.log.ReadBatches(offset, maxBytes, upTo, minOne)
	}
	if errors.Is(err, storage.ErrOffsetOutOfRange) {
		// Retention moved the start between the check and the read.
		return BatchFetch{}, kerr.OutOfRange(offset, r.log.StartOffset(), hw)
	}
	if err != nil {
		return BatchFetch{}, kerr.New(kerr.KafkaStorageError, "read %s-%d at %d: %v", r.cfg.Topic, r.cfg.Partition, offset, err)
	}
	res := BatchFetch{Batches: bs, HighWatermark: hw, LastStable: min(lso, hw), LogStart: start, Term: term}
	if isolation == ReadCommitted {
		res.Aborted = []AbortedTxn{}
		if len(bs) > 0 {
			res.Aborted = r.AbortedTxns(offset, bs[len(bs)-1].NextOffset())
		}
	}
	return res, nil
}

// Wakeup is what a long-poll over many replicas waits on. Take it with
// Watch before reading the replicas, so that nothing that happens after the
// reads is missed.
type Wakeup struct {
	cases []reflect.SelectCase
}

// Watch returns the wake-up of replicas as of now: its Wait returns at the
// first change after this call of any of them: an append (a marker too, so
// read_committed fetchers wake when the last stable offset moves) or a
// move of the log start (the FSM's change channel), a change of leadership, a storage
// failure (the leader state's signal, which also fires when followers
// progress while acks=all requests wait: a spurious wake, the caller reads
// again), or the replica closing. It does not block.
func Watch(replicas []*Replica) *Wakeup {
	w := &Wakeup{cases: make([]reflect.SelectCase, 0, 3*len(replicas)+2)}
	add := func(ch <-chan struct{}) {
		w.cases = append(w.cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
	}
	for _, r := range replicas {
		add(r.fsm.changed())
		r.lead.mu.Lock()
		lead := r.lead.changed
		r.lead.mu.Unlock()
		add(lead)
		add(r.stop)
	}
	return w
}

// Wait blocks until one of the watched replicas changes (see Watch), ctx is
// done (the connection or the server closing) or timeout fires. It reports
// whether a replica woke it. One goroutine waits on all the channels (one
// select over them); nothing is started.
func (w *Wakeup) Wait(ctx context.Context, timeout <-chan time.Time) bool {
	n := len(w.cases)
	cases := append(w.cases[:n:n],
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timeout)})
	chosen, _, _ := reflect.Select(cases)
	return chosen < n
}
