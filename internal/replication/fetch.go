package replication

import (
	"context"
	"errors"
	"time"

	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/metadata"
	"github.com/tapes-dev/tapes/internal/storage"
)

// FetchResult is a successful Fetch.
type FetchResult struct {
	Records       []storage.Record
	HighWatermark int64
	LogStart      int64
	Epoch         int64
}

// HighWatermark is the end of the committed, applied log: the replica's
// FSM only ever applies committed entries.
func (r *Replica) HighWatermark() int64 { return r.log.EndOffset() }

// Fetch reads committed records from offset on the leader, never at or past
// the high watermark. When offset equals the high watermark it waits up to
// maxWait for new records. Offsets below the log start or above the high
// watermark are OFFSET_OUT_OF_RANGE carrying both bounds.
func (r *Replica) Fetch(ctx context.Context, offset int64, maxBytes int, maxWait time.Duration) (FetchResult, error) {
	term, err := r.readyTerm()
	if err != nil {
		return FetchResult{}, err
	}
	deadline := time.NewTimer(maxWait)
	defer deadline.Stop()
	for {
		changed := r.fsm.changed()
		hw, start := r.log.EndOffset(), r.log.StartOffset()
		if offset < start || offset > hw {
			return FetchResult{}, kerr.OutOfRange(offset, start, hw)
		}
		if offset < hw {
			recs, err := r.log.Read(offset, maxBytes, hw)
			if errors.Is(err, storage.ErrOffsetOutOfRange) {
				// Retention moved the start between the check and the read.
				return FetchResult{}, kerr.OutOfRange(offset, r.log.StartOffset(), hw)
			}
			if err != nil {
				return FetchResult{}, kerr.New(kerr.KafkaStorageError, "read %s-%d at %d: %v", r.cfg.Topic, r.cfg.Partition, offset, err)
			}
			return FetchResult{Records: recs, HighWatermark: hw, LogStart: start, Epoch: int64(term)}, nil
		}
		select {
		case <-changed:
		case <-deadline.C:
			return FetchResult{HighWatermark: hw, LogStart: start, Epoch: int64(term)}, nil
		case <-ctx.Done():
			return FetchResult{HighWatermark: hw, LogStart: start, Epoch: int64(term)}, nil
		case <-r.stop:
			return FetchResult{}, r.notLeader("is closing its replica")
		}
		if term2, err := r.readyTerm(); err != nil || term2 != term {
			return FetchResult{}, r.notLeader("lost leadership")
		}
	}
}

// Timestamps for ListOffsets, as Kafka defines them.
const (
	LatestTimestamp   = -1
	EarliestTimestamp = -2
)

// ListOffsets answers the earliest offset (log start), the latest (high
// watermark) or the first committed offset whose timestamp is at or after
// ts (-1 when none is).
func (r *Replica) ListOffsets(ts int64) (offset, timestamp, epoch int64, err error) {
	term, err := r.readyTerm()
	if err != nil {
		return 0, 0, 0, err
	}
	switch ts {
	case LatestTimestamp:
		return r.log.EndOffset(), -1, int64(term), nil
	case EarliestTimestamp:
		return r.log.StartOffset(), -1, int64(term), nil
	}
	if ts < 0 {
		return 0, 0, 0, kerr.New(kerr.InvalidRequest, "timestamp %d: use -1 (latest), -2 (earliest) or milliseconds since the epoch", ts)
	}
	off, t, ok := r.log.OffsetForTimestamp(ts)
	if !ok || off >= r.log.EndOffset() {
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
		HighWatermark: r.log.EndOffset(), LogStart: r.log.StartOffset(), LogEnd: r.log.EndOffset(),
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
				st.Followers = append(st.Followers, FollowerStatus{Broker: int32(id), Match: f.match, LastCaughtUp: f.lastCaughtUp})
			}
		}
	}
	r.lead.mu.Unlock()
	return st
}
