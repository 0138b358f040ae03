package replication

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/metadata"
	"github.com/tapes-dev/tapes/internal/recordbatch"
	"github.com/tapes-dev/tapes/internal/storage"
)

// FetchResult is a successful Fetch.
type FetchResult struct {
	// Records are data records only: never a control record (a transaction
	// marker), nor, read_committed, a record of an aborted transaction.
	Records       []storage.Record
	HighWatermark int64
	// LastStable is the last stable offset (LastStableOffset).
	LastStable int64
	LogStart   int64
	Epoch      int64
	// NextOffset is where the next fetch begins: after the last batch read,
	// past the control batches and aborted records skipped, so a reader
	// does not ask again for what it was not given; the offset asked for
	// when nothing was read.
	NextOffset int64
	// Markers are the control batches (transaction markers) read, which
	// Records leave out, in offset order.
	Markers []FetchedMarker
	// TxnBatches are the transactional data batches read, in offset order
	// (read_committed, the aborted ones too): which records are
	// transactional, and whose.
	TxnBatches []TxnBatch
	// Aborted are the aborted transactions overlapping what was read (the
	// offset asked for to NextOffset), at both isolation levels
	// (AbortedTxns, the index read_committed drops records by).
	Aborted []AbortedTxn
}

// FetchedMarker is a transaction marker read at Offset.
type FetchedMarker struct {
	Offset int64
	recordbatch.Marker
}

// TxnBatch is a transactional data batch: its producer and offsets.
type TxnBatch struct {
	ProducerID int64
	BaseOffset int64
	NextOffset int64
}

// Transactional reports whether the record at off is in one of bs (in
// offset order), and the batch's producer id.
func Transactional(bs []TxnBatch, off int64) (producerID int64, ok bool) {
	i, found := slices.BinarySearchFunc(bs, off, func(b TxnBatch, off int64) int {
		switch {
		case b.NextOffset <= off:
			return -1
		case b.BaseOffset > off:
			return 1
		}
		return 0
	})
	if !found {
		return 0, false
	}
	return bs[i].ProducerID, true
}

// HighWatermark is the end of the committed, applied log: the replica's
// FSM only ever applies committed entries.
func (r *Replica) HighWatermark() int64 { return r.log.EndOffset() }

// Fetch is FetchIsolated with ReadUncommitted.
func (r *Replica) Fetch(ctx context.Context, offset int64, maxBytes int, maxWait time.Duration) (FetchResult, error) {
	return r.FetchIsolated(ctx, offset, maxBytes, maxWait, ReadUncommitted)
}

// FetchIsolated reads committed records from offset on the leader, never at
// or past the high watermark (read_committed: the last stable offset, and
// the records of aborted transactions are dropped). Control records are
// never returned. When nothing is there to read it waits up to maxWait for
// new records. Offsets below the log start or above the high watermark are
// OFFSET_OUT_OF_RANGE carrying both bounds.
func (r *Replica) FetchIsolated(ctx context.Context, offset int64, maxBytes int, maxWait time.Duration, isolation IsolationLevel) (FetchResult, error) {
	term, err := r.readyTerm()
	if err != nil {
		return FetchResult{}, err
	}
	deadline := time.NewTimer(maxWait)
	defer deadline.Stop()
	first := offset
	var read txnRead // across the rounds: what a round without records skipped
	for {
		changed := r.fsm.changed()
		hw, start := r.log.EndOffset(), r.log.StartOffset()
		if offset < start || offset > hw {
			return FetchResult{}, kerr.OutOfRange(offset, start, hw)
		}
		res := FetchResult{HighWatermark: hw, LastStable: r.LastStableOffset(), LogStart: start, Epoch: int64(term), NextOffset: offset}
		upTo := r.upTo(hw, isolation)
		for res.NextOffset < upTo && len(res.Records) == 0 {
			recs, next, err := r.readRecords(res.NextOffset, maxBytes, upTo, isolation, &read)
			if errors.Is(err, storage.ErrOffsetOutOfRange) {
				// Retention moved the start between the check and the read.
				return FetchResult{}, kerr.OutOfRange(offset, r.log.StartOffset(), hw)
			}
			if err != nil {
				return FetchResult{}, kerr.New(kerr.KafkaStorageError, "read %s-%d at %d: %v", r.cfg.Topic, r.cfg.Partition, offset, err)
			}
			if next <= res.NextOffset {
				break // no whole batch below upTo (cannot happen: both lie at batch ends)
			}
			res.Records, res.NextOffset = recs, next
		}
		if len(res.Records) > 0 {
			return r.withTxns(res, first, read), nil
		}
		select {
		case <-changed:
		case <-deadline.C:
			return r.withTxns(res, first, read), nil
		case <-ctx.Done():
			return r.withTxns(res, first, read), nil
		case <-r.stop:
			return FetchResult{}, r.notLeader("is closing its replica")
		}
		if term2, err := r.readyTerm(); err != nil || term2 != term {
			return FetchResult{}, r.notLeader("lost leadership")
		}
		offset = res.NextOffset
	}
}

// txnRead is what a fetch read of transactions besides its records.
type txnRead struct {
	markers []FetchedMarker
	batches []TxnBatch
}

// withTxns sets res's transaction fields: read's markers and batches, and
// the aborted transactions overlapping [first, res.NextOffset).
func (r *Replica) withTxns(res FetchResult, first int64, read txnRead) FetchResult {
	res.Markers, res.TxnBatches = read.markers, read.batches
	if res.NextOffset > first {
		res.Aborted = r.AbortedTxns(first, res.NextOffset)
	}
	return res
}

// readRecords reads the data records of the whole batches from offset
// (the first holding it) that end at or below upTo, within maxBytes of
// stored batches (the first however large): control batches skipped
// (added to read's markers), and read_committed the batches of aborted
// transactions; the transactional batches are added to read's batches.
// next is the offset after the last batch read.
func (r *Replica) readRecords(offset int64, maxBytes int, upTo int64, isolation IsolationLevel, read *txnRead) (recs []storage.Record, next int64, err error) {
	bs, err := r.log.ReadBatches(offset, maxBytes, upTo, true)
	if err != nil {
		return nil, offset, err
	}
	next = offset
	var aborted []AbortedTxn
	if isolation == ReadCommitted && len(bs) > 0 {
		aborted = r.AbortedTxns(offset, bs[len(bs)-1].NextOffset())
	}
	for _, sb := range bs {
		next = sb.NextOffset()
		if sb.Batch.Control() {
			kb, _ := sb.Batch.Kafka()
			m, err := recordbatch.ParseMarker(kb)
			if err != nil {
				return recs, next, err
			}
			read.markers = append(read.markers, FetchedMarker{Offset: sb.BaseOffset, Marker: m})
			continue
		}
		p := sb.Batch.Producer()
		if sb.Batch.Transactional() {
			read.batches = append(read.batches, TxnBatch{ProducerID: p.ID, BaseOffset: sb.BaseOffset, NextOffset: next})
		}
		if len(aborted) > 0 && sb.Batch.Transactional() && abortedBatch(aborted, p.ID, sb.BaseOffset) {
			continue
		}
		rs, err := sb.Batch.Records(sb.BaseOffset)
		if err != nil {
			return recs, next, err
		}
		for _, rec := range rs {
			if rec.Offset >= offset {
				recs = append(recs, rec)
			}
		}
	}
	return recs, next, nil
}

// Timestamps for ListOffsets, as Kafka defines them.
const (
	LatestTimestamp   = -1
	EarliestTimestamp = -2
)

// ListOffsets is ListOffsetsIsolated with ReadUncommitted.
func (r *Replica) ListOffsets(ts int64) (offset, timestamp, epoch int64, err error) {
	return r.ListOffsetsIsolated(ts, ReadUncommitted)
}

// ListOffsetsIsolated answers the earliest offset (log start), the latest
// (the high watermark; read_committed the last stable offset) or the first
// committed offset whose timestamp is at or after ts (-1 when none is;
// read_committed, none at or past the last stable offset).
func (r *Replica) ListOffsetsIsolated(ts int64, isolation IsolationLevel) (offset, timestamp, epoch int64, err error) {
	term, err := r.readyTerm()
	if err != nil {
		return 0, 0, 0, err
	}
	end := r.upTo(r.log.EndOffset(), isolation)
	switch ts {
	case LatestTimestamp:
		return end, -1, int64(term), nil
	case EarliestTimestamp:
		return r.log.StartOffset(), -1, int64(term), nil
	}
	if ts < 0 {
		return 0, 0, 0, kerr.New(kerr.InvalidRequest, "timestamp %d: use -1 (latest), -2 (earliest) or milliseconds since the epoch", ts)
	}
	off, t, ok := r.log.OffsetForTimestamp(ts)
	if !ok || off >= end {
		return -1, -1, int64(term), nil
	}
	return off, t, int64(term), nil
}

// KnownLeader returns the leader this replica's Raft knows and the term it
// knows it in; ok is false while it knows none (e.g. during an election).
func (r *Replica) KnownLeader() (leader metadata.BrokerID, term int64, ok bool) {
	_, id := r.raft.LeaderWithID()
	if id == "" {
		return -1, 0, false
	}
	return BrokerOf(id), int64(r.raft.CurrentTerm()), true
}

// Status is a snapshot of the replica for DescribeReplicas.
type Status struct {
	RaftState      string
	Term           uint64
	Leader         int32
	LastIndex      uint64
	CommitIndex    uint64
	AppliedIndex   uint64
	HighWatermark  int64
	LastStable     int64 // the last stable offset (LastStableOffset)
	LogStart       int64
	LogEnd         int64
	ISR            []int32
	Followers      []FollowerStatus
	LogBytes       int64
	SegmentCount   int
	LastRaftInLog  uint64
	ReadyForClient bool
}

// FollowerStatus is one follower's progress as the leader sees it.
type FollowerStatus struct {
	Broker       int32
	Match        uint64
	LastCaughtUp time.Time
	// BytesReceived: the entry and snapshot bytes the transport sent it
	// that it answered for; Throttle: the transport's limit on what it
	// sends it, bytes per second (0: none).
	BytesReceived uint64
	Throttle      int64
}

// Status returns the replica's current state.
func (r *Replica) Status() Status {
	_, leaderID := r.raft.LeaderWithID()
	leader := int32(-1)
	if leaderID != "" {
		leader = int32(BrokerOf(leaderID))
	}
	st := Status{
		RaftState: r.raft.State().String(), Term: r.raft.CurrentTerm(), Leader: leader,
		LastIndex: r.raft.LastIndex(), CommitIndex: r.raft.CommitIndex(), AppliedIndex: r.raft.AppliedIndex(),
		HighWatermark: r.log.EndOffset(), LastStable: r.LastStableOffset(), LogStart: r.log.StartOffset(), LogEnd: r.log.EndOffset(),
		LastRaftInLog: r.log.LastRaftIndex(),
	}
	for _, s := range r.log.Segments() {
		st.LogBytes += s.Bytes
		st.SegmentCount++
	}
	r.lead.mu.Lock()
	if r.lead.readyTerm != 0 {
		st.ReadyForClient = true
		st.LogEnd = r.lead.base + r.lead.pendingRecords
		for _, id := range r.isrLocked(time.Now()) {
			st.ISR = append(st.ISR, int32(id))
		}
		for _, id := range r.membersLocked() {
			if f := r.lead.followers[id]; f != nil {
				addr := raft.ServerAddress(ServerID(id))
				st.Followers = append(st.Followers, FollowerStatus{Broker: int32(id), Match: f.match, LastCaughtUp: f.lastCaughtUp,
					BytesReceived: r.cfg.Transport.BytesReceived(addr), Throttle: r.cfg.Transport.Throttle(addr)})
			}
		}
	}
	r.lead.mu.Unlock()
	return st
}
