package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tapes-dev/tapes/internal/metadata"
	"github.com/tapes-dev/tapes/internal/raftlog"
	"github.com/tapes-dev/tapes/internal/raftnet"
)

// RaftTimings are the Raft settings every partition group of a broker uses.
type RaftTimings struct {
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	// HeartbeatLinger is how long the transport holds a heartbeat (or an
	// idle AppendEntries) to send it with others to the same broker; it
	// stretches raft's heartbeat period (HeartbeatTimeout/10 to
	// 2*HeartbeatTimeout/10) by up to this much. Invariant: well below
	// LeaderLeaseTimeout - 2*HeartbeatTimeout/10, so that a leader hears
	// from its followers several times within a lease.
	HeartbeatLinger   time.Duration
	SnapshotInterval  time.Duration
	SnapshotThreshold uint64
	TrailingLogs      uint64
}

// DefaultRaftTimings pairs a 1 s heartbeat timeout with a 1 s leader lease
// (250 ms leases caused leader churn under load) and a 2 s CommitTimeout
// (the idle AppendEntries that also confirms each follower's log end for
// the ISR). An idle broker's CPU is raft's per-follower heartbeats: each is
// a timer wake-up that costs about 37 us of CPU on a 2-core VM, and raft
// sends one every HeartbeatTimeout/10 to 2*HeartbeatTimeout/10 after the
// last was answered. The 200 ms heartbeat linger stretches that period to
// 300-400 ms, under half of a follower's 1-2 s timeout. Idle CPU of 100
// partitions (RF 3) on 3 brokers (internal/bench TestBenchIdleCPU, 30 s
// windows, 2026-12-03): 15.9-16.7% of one core with 500 ms timeouts, a 60 ms
// linger and a 1 s CommitTimeout; 11.5% with 1 s timeouts and a 100 ms
// linger; 9.9-10.8% with these. A leader's SIGKILL is noticed at once
// (internal/broker peers.go); what the longer timeouts slow is noticing a
// paused or cut-off leader: 1-2 s instead of 0.5-1 s (Kafka: its 9 s broker
// session timeout).
func DefaultRaftTimings() RaftTimings {
	return RaftTimings{
		HeartbeatTimeout:   time.Second,
		ElectionTimeout:    time.Second,
		LeaderLeaseTimeout: time.Second,
		CommitTimeout:      2 * time.Second,
		HeartbeatLinger:    200 * time.Millisecond,
		SnapshotInterval:   2 * time.Minute,
		SnapshotThreshold:  8192,
		TrailingLogs:       10240,
	}
}

// MaxHeartbeatLinger is the longest HeartbeatLinger the other timings
// allow: half of the leader lease minus two of raft's longest heartbeat
// periods (see HeartbeatLinger).
func (t RaftTimings) MaxHeartbeatLinger() time.Duration {
	return (t.LeaderLeaseTimeout - 2*t.HeartbeatTimeout/10) / 2
}

// Validate checks the relations hashicorp/raft requires and that the ISR
// needs.
func (t RaftTimings) Validate() error {
	switch {
	case t.HeartbeatTimeout < 5*time.Millisecond:
		return fmt.Errorf("%w: heartbeat timeout %v", ErrBadTiming, t.HeartbeatTimeout)
	case t.LeaderLeaseTimeout > t.HeartbeatTimeout:
		return fmt.Errorf("%w: leader lease %v exceeds heartbeat timeout %v", ErrBadTiming, t.LeaderLeaseTimeout, t.HeartbeatTimeout)
	case t.ElectionTimeout < t.HeartbeatTimeout:
		return fmt.Errorf("%w: election timeout %v is below heartbeat timeout %v", ErrBadTiming, t.ElectionTimeout, t.HeartbeatTimeout)
	case t.HeartbeatLinger < 0 || t.HeartbeatLinger > t.MaxHeartbeatLinger():
		return fmt.Errorf("%w: heartbeat linger %v must be between 0 and half of leader lease minus twice the heartbeat period (%v)", ErrBadTiming, t.HeartbeatLinger, t.MaxHeartbeatLinger())
	case t.CommitTimeout <= 0:
		return fmt.Errorf("%w: commit timeout %v", ErrBadTiming, t.CommitTimeout)
	case t.SnapshotThreshold == 0 || t.SnapshotInterval <= 0:
		return fmt.Errorf("%w: snapshot threshold %d, interval %v", ErrBadTiming, t.SnapshotThreshold, t.SnapshotInterval)
	}
	return nil
}

// raftConfig returns the hashicorp/raft configuration for one group.
func (t RaftTimings) raftConfig(local metadata.BrokerID) *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = ServerID(local)
	c.HeartbeatTimeout = t.HeartbeatTimeout
	c.ElectionTimeout = t.ElectionTimeout
	c.LeaderLeaseTimeout = t.LeaderLeaseTimeout
	c.CommitTimeout = t.CommitTimeout
	c.SnapshotInterval = t.SnapshotInterval
	c.SnapshotThreshold = t.SnapshotThreshold
	c.TrailingLogs = t.TrailingLogs
	// raft measures each heartbeat twice (with and without the peer's
	// label) unless told not to; once is enough, and every heartbeat of
	// every group pays for it.
	c.NoLegacyTelemetry = true
	// The partition log is the durable state: Raft replays only what
	// follows its last snapshot, and the FSM skips what the log holds.
	c.NoSnapshotRestoreOnStart = true
	// Pre-vote (the raftnet Transport implements raft.WithPreVote): a
	// replica that was away (paused, cut off) must not depose a leader its
	// peers still follow. Leadership transfers and TriggerElection skip it.
	c.PreVoteDisabled = false
	return c
}

// Errors of this package.
var (
	// ErrBadTiming: Raft timings that hashicorp/raft would refuse or that
	// break the ISR.
	ErrBadTiming = errors.New("invalid raft timing")
	// ErrClosed: the replica was closed.
	ErrClosed = errors.New("replica closed")
	// ErrStorageFailed: the partition log failed to store a committed
	// entry (an I/O error); the replica stopped applying and serving until
	// its broker restarts. Clients see KAFKA_STORAGE_ERROR.
	ErrStorageFailed = errors.New("partition storage failed")
	// ErrBadRaftLog: a Raft log kind other than wal or bolt.
	ErrBadRaftLog = errors.New("invalid raft log kind")
)

// ServerID is the Raft id (and address) of a broker: its id in decimal. The
// raftnet transport resolves it to a network address.
func ServerID(id metadata.BrokerID) raft.ServerID { return raft.ServerID(fmt.Sprint(id)) }

// BrokerOf parses a Raft server id back to a broker id (-1 when malformed).
// It runs on every outbound Raft RPC (through the broker's resolver), so it
// parses with strconv rather than fmt.
func BrokerOf(id raft.ServerID) metadata.BrokerID {
	b, err := strconv.ParseInt(string(id), 10, 32)
	if err != nil {
		return -1
	}
	return metadata.BrokerID(b)
}

// GroupName is the Raft group name of a partition; the topic id keeps a
// recreated topic's groups apart from the deleted one's.
func GroupName(topic string, partition int32, id metadata.TopicID) string {
	return fmt.Sprintf("%s-%d@%d", topic, partition, id)
}

// Transport is what a replica needs of its Raft transport (internal/raftnet):
// a raft.Transport that reports each follower's AppendEntries answers.
type Transport interface {
	raft.Transport
	raft.WithClose
	// SetAppendObserver registers fn, called on the replicating goroutine
	// after every answered non-heartbeat AppendEntries; fn must not block.
	SetAppendObserver(fn raftnet.AppendObserver)
	// TriggerElection makes the local Raft instance a candidate at once,
	// with the leadership-transfer flag (see CandidateAfterCrash).
	TriggerElection(ctx context.Context, from raft.ServerID) error
	// SetThrottle limits the catch-up traffic (AppendEntries with entries,
	// InstallSnapshot) to target to bytesPerSec; 0 removes the limit.
	// Throttle returns it.
	SetThrottle(target raft.ServerAddress, bytesPerSec int64)
	Throttle(target raft.ServerAddress) int64
	// BytesReceived counts the entry and snapshot bytes sent to target
	// that it answered for.
	BytesReceived(target raft.ServerAddress) uint64
}

// Report is a leader's view of its partition, sent to the controller.
type Report struct {
	Topic     string
	TopicID   metadata.TopicID
	Partition int32
	Leader    metadata.BrokerID
	Epoch     int64
	ISR       []metadata.BrokerID
}

// Config describes one replica.
type Config struct {
	Topic     string
	TopicID   metadata.TopicID
	Partition int32
	// Dir holds raft.db (or stable.db), snapshots/ and log/.
	Dir string
	// RaftLog is the broker's shared Raft log, nil if it has none: then
	// every group keeps its log in raft.db. NewRaftLog is where a group
	// with neither raft.db nor stable.db (a new one) keeps it; an existing
	// group keeps the store it has (see Replica.openLogStores).
	RaftLog    *raftlog.Log
	NewRaftLog RaftLogKind
	// Stable is the broker's shared stable store (term and vote), nil if
	// it has none. A group whose log is in RaftLog and has no stable.db
	// keeps its term and vote there (one commit for the elections of many
	// groups); one with a stable.db keeps that file.
	Stable   *SharedStable
	LocalID  metadata.BrokerID
	Replicas []metadata.BrokerID
	// Join: this replica is being added to an existing group by a
	// reassignment (metadata PartitionState.Adding): a new one does not
	// bootstrap (its Raft configuration comes from the leader, which adds
	// it as a non-voter) and takes no head start.
	Join        bool
	TopicConfig metadata.TopicConfig
	Raft        RaftTimings
	// ReplicaLagTimeMax: a follower that has not caught up to the leader's
	// log end within this long leaves the ISR (replica.lag.time.max.ms).
	ReplicaLagTimeMax time.Duration
	// RetentionCheckInterval: how often the leader checks retention.
	RetentionCheckInterval time.Duration
	// PreferredLeaderDelay: a leader that is not the preferred replica hands
	// leadership to it after leading this long, once it is caught up (0:
	// never; Kafka's auto.leader.rebalance.enable).
	PreferredLeaderDelay time.Duration
	Transport            Transport
	// Observer, if set, is registered on the Raft instance (the broker's one
	// non-blocking observer for all groups).
	Observer *raft.Observer
	// LeaderAddress resolves a broker id to its client address for
	// NOT_LEADER_OR_FOLLOWER hints ("" if unknown). Called from request
	// goroutines; must not block.
	LeaderAddress func(metadata.BrokerID) string
	// OnReport is called (from the replica's goroutines, never with a lock
	// held) when this replica becomes a ready leader or its ISR changes. It
	// must not block.
	OnReport func(Report)
	// PreviousISR, if set, returns the ISR the controller last recorded for
	// this partition (nil if none). A new leader calls it, from its own
	// goroutine, once its Barrier is done: only those replicas keep a place
	// in the ISR for a lag period; the others join by catching up. It must
	// not block long.
	PreviousISR func() []metadata.BrokerID
	Logger      *slog.Logger

	// wrapLog, if set, wraps what the FSM writes the partition log through
	// (tests inject storage faults with it).
	wrapLog func(logWriter) logWriter
}

// RaftLogKind names where a new group's Raft log is kept (brokerd
// --raft-log).
type RaftLogKind string

// The Raft log stores.
const (
	// RaftLogWAL: the broker's shared log (internal/raftlog), group commit
	// across its groups; the group's term and vote in the broker's shared
	// stable store (Config.Stable), or in its stable.db if it has one.
	RaftLogWAL RaftLogKind = "wal"
	// RaftLogBolt: the group's own raft-boltdb file, raft.db.
	RaftLogBolt RaftLogKind = "bolt"
)

// ParseRaftLogKind checks a --raft-log value.
func ParseRaftLogKind(s string) (RaftLogKind, error) {
	switch k := RaftLogKind(s); k {
	case RaftLogWAL, RaftLogBolt:
		return k, nil
	}
	return "", fmt.Errorf("%w: %q (want %q or %q)", ErrBadRaftLog, s, RaftLogWAL, RaftLogBolt)
}
