package broker

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tapes-dev/tapes/internal/metadata"
	"github.com/tapes-dev/tapes/internal/replication"
	"github.com/tapes-dev/tapes/internal/txn"
)

// Config is a broker's configuration. Zero durations take defaults in
// ValidateConfig.
type Config struct {
	ID      metadata.BrokerID
	DataDir string
	// Advertise is the address clients dial; registered with the controller.
	Advertise string
	// KafkaAdvertise is the HOST:PORT Kafka clients dial to reach this
	// broker's Kafka listener (ServeKafka); registered with the controller
	// beside Advertise, so that every broker's Kafka Metadata lists it. ""
	// when the broker serves no Kafka listener.
	KafkaAdvertise string
	// Peers maps every broker of the controller quorum (this one included)
	// to the address THIS broker uses to reach it. Brokers may see each
	// other through different addresses (e.g. per-link fault proxies).
	Peers map[metadata.BrokerID]string
	// Join lists gRPC addresses of brokers of a running cluster (brokerd
	// --join). A broker without a controller state of its own then does
	// not bootstrap the controller quorum: it registers through them (as
	// a joining broker, metadata.Command.Join) and waits for the quorum's
	// leader to add it (addControllerMembers). Peers may then hold this
	// broker only (ValidateConfig adds it); the others are learnt from the
	// metadata.
	Join []string

	Raft replication.RaftTimings
	// RaftLog is where new partition groups keep their Raft log: the
	// broker's shared log in DATA/raftlog (group commit) or a raft.db per
	// group. Existing groups keep theirs. Empty: DefaultRaftLog.
	RaftLog replication.RaftLogKind
	// ReplicaLagTimeMax is Kafka's replica.lag.time.max.ms.
	ReplicaLagTimeMax time.Duration
	// RetentionCheckInterval is Kafka's log.retention.check.interval.ms.
	RetentionCheckInterval time.Duration
	// PreferredLeaderDelay: how long a non-preferred leader leads before it
	// hands leadership back to the caught-up preferred replica (0 disables;
	// Kafka's auto.leader.rebalance.enable).
	PreferredLeaderDelay time.Duration
	// HeartbeatInterval: how often this broker tells every peer it is alive.
	HeartbeatInterval time.Duration
	// SessionTimeout: a broker not heard from for this long is shown dead.
	SessionTimeout time.Duration
	// MaxPartitionsPerBroker is the partition budget: how many partition
	// replicas (internal topics included) one broker may host. The cluster's
	// limit is this times the registered brokers. The controller refuses a
	// topic that would exceed either with POLICY_VIOLATION (see
	// metadata.State.CheckBudget); ARCHITECTURE.md "Partition budget" has
	// the measurement behind the default.
	MaxPartitionsPerBroker int
	// DefaultPartitions and DefaultReplicationFactor are Kafka's
	// num.partitions and default.replication.factor: what a Kafka
	// CreateTopics asking for -1 gets (kafka_admin.go). Kafka's defaults, 1.
	DefaultPartitions, DefaultReplicationFactor int32

	// Groups configures the consumer group coordinator.
	Groups GroupConfig
	// Transactions configures the transaction coordinator.
	Transactions TxnConfig

	Logger *slog.Logger
}

// GroupConfig configures the consumer group coordinator and its internal
// topic, __consumer_offsets (created on the first FindCoordinator).
type GroupConfig struct {
	// OffsetsTopicPartitions is offsets.topic.num.partitions.
	OffsetsTopicPartitions int32
	// OffsetsTopicReplicationFactor is offsets.topic.replication.factor;
	// the topic is created with min(this, brokers in the cluster).
	OffsetsTopicReplicationFactor int
	// MinSessionTimeout and MaxSessionTimeout bound a member's session
	// timeout (group.min/max.session.timeout.ms).
	MinSessionTimeout, MaxSessionTimeout time.Duration
	// InitialRebalanceDelay is group.initial.rebalance.delay.ms.
	InitialRebalanceDelay time.Duration
	// OffsetsCompactAfter is how many records a __consumer_offsets
	// partition may hold before its coordinator compacts it (Kafka runs
	// its log cleaner instead); 0 never compacts.
	OffsetsCompactAfter int64
}

// TxnConfig configures the transaction coordinator and its internal topic,
// __transaction_state (created on the first FindCoordinator of a
// transactional id or InitProducerId with one).
type TxnConfig struct {
	// StateTopicPartitions is transaction.state.log.num.partitions.
	StateTopicPartitions int32
	// StateTopicReplicationFactor is
	// transaction.state.log.replication.factor; the topic is created with
	// min(this, brokers in the cluster).
	StateTopicReplicationFactor int
	// MaxTimeout is transaction.max.timeout.ms.
	MaxTimeout time.Duration
	// AbortTimedOutInterval is how often transactions are checked for
	// their timeout (transaction.abort.timed.out.transaction.cleanup.interval.ms).
	AbortTimedOutInterval time.Duration
	// StateCompactAfter is how many records a __transaction_state
	// partition may hold before its coordinator compacts it (as
	// Groups.OffsetsCompactAfter); 0 never compacts.
	StateCompactAfter int64
	// IDExpiration is transactional.id.expiration.ms: an id unused for
	// longer (no transaction open) is removed.
	IDExpiration time.Duration
}

// Configuration errors. ValidateConfig wraps one of them with the offending
// value.
var (
	ErrNoID          = errors.New("broker id must be positive")
	ErrNoDataDir     = errors.New("data dir is required")
	ErrNoAdvertise   = errors.New("advertised address is required")
	ErrPeers         = errors.New("invalid peers")
	ErrTiming        = errors.New("invalid timing")
	ErrLagBelowRaft  = errors.New("replica lag time max must exceed the raft commit timeout")
	ErrSessionTiming = errors.New("session timeout must exceed the heartbeat interval")
	ErrGroupConfig   = errors.New("invalid group coordinator config")
	ErrBudget        = errors.New("invalid max partitions per broker")
	ErrTopicDefaults = errors.New("invalid topic defaults")
	ErrTxnConfig     = errors.New("invalid transaction coordinator config")
)

// DefaultMaxPartitionsPerBroker: measured on a 2-core machine, 300 replicas
// per broker cost 4 open files, about 120 KB and 0.02% of a core each, idle;
// 1200 per broker (3 brokers) did not settle and deposed other partitions'
// leaders. See ARCHITECTURE.md "Partition budget".
const DefaultMaxPartitionsPerBroker = 500

// maxPartitionMetadataBytes bounds what one partition replica adds to a
// Metadata answer, with margin: TestMetadataFitsTheBudget measures 133 bytes
// per RF-1 partition of a topic with a 249-character name, ids and epochs at
// their largest and LEADER_NOT_AVAILABLE set, 51 per replica at RF 3.
const maxPartitionMetadataBytes = 160

// clientMaxMessageBytes is the largest message a gRPC client receives by
// default (grpc.defaultClientMaxReceiveMessageSize). Metadata for every
// topic of a cluster at its partition budget must fit in it.
const clientMaxMessageBytes = 4 << 20

// DefaultRaftLog is the Raft log store of new partition groups; see
// ARCHITECTURE.md "Where the time goes" for the measurement.
const DefaultRaftLog = replication.RaftLogWAL

// DefaultConfig returns the defaults for the timing fields.
func DefaultConfig() Config {
	return Config{
		Raft:                     replication.DefaultRaftTimings(),
		RaftLog:                  DefaultRaftLog,
		ReplicaLagTimeMax:        10 * time.Second,
		RetentionCheckInterval:   5 * time.Second,
		PreferredLeaderDelay:     5 * time.Second,
		HeartbeatInterval:        time.Second,
		SessionTimeout:           4 * time.Second,
		MaxPartitionsPerBroker:   DefaultMaxPartitionsPerBroker,
		DefaultPartitions:        1,
		DefaultReplicationFactor: 1,
		Groups: GroupConfig{
			OffsetsTopicPartitions:        6,
			OffsetsTopicReplicationFactor: 3,
			MinSessionTimeout:             500 * time.Millisecond,
			MaxSessionTimeout:             30 * time.Minute,
			OffsetsCompactAfter:           50_000,
		},
		Transactions: TxnConfig{
			StateTopicPartitions:        6,
			StateTopicReplicationFactor: 3,
			MaxTimeout:                  15 * time.Minute,
			AbortTimedOutInterval:       time.Second,
			StateCompactAfter:           50_000,
			IDExpiration:                txn.DefaultIDExpiration,
		},
	}
}

// ValidateConfig checks each field and the relations between them: the ISR
// is judged from the idle AppendEntries Raft sends every CommitTimeout, so
// the lag limit must leave room for at least two of them.
func ValidateConfig(c *Config) error {
	if c.ID <= 0 {
		return fmt.Errorf("%w: %d", ErrNoID, c.ID)
	}
	if c.DataDir == "" {
		return ErrNoDataDir
	}
	if c.Advertise == "" {
		return ErrNoAdvertise
	}
	if len(c.Join) > 0 {
		if c.Peers == nil {
			c.Peers = map[metadata.BrokerID]string{}
		}
		if _, ok := c.Peers[c.ID]; !ok {
			c.Peers[c.ID] = c.Advertise
		}
	}
	if len(c.Peers) == 0 {
		return fmt.Errorf("%w: none given", ErrPeers)
	}
	if _, ok := c.Peers[c.ID]; !ok {
		return fmt.Errorf("%w: this broker (%d) is not among them", ErrPeers, c.ID)
	}
	for id, addr := range c.Peers {
		if id <= 0 || addr == "" {
			return fmt.Errorf("%w: %d=%q", ErrPeers, id, addr)
		}
	}
	if err := c.Raft.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrTiming, err)
	}
	if c.ReplicaLagTimeMax < 2*c.Raft.CommitTimeout {
		return fmt.Errorf("%w: replica lag %v, commit timeout %v", ErrLagBelowRaft, c.ReplicaLagTimeMax, c.Raft.CommitTimeout)
	}
	if c.RetentionCheckInterval <= 0 || c.HeartbeatInterval <= 0 {
		return fmt.Errorf("%w: retention check %v, heartbeat %v", ErrTiming, c.RetentionCheckInterval, c.HeartbeatInterval)
	}
	if c.RaftLog == "" {
		c.RaftLog = DefaultRaftLog
	}
	if _, err := replication.ParseRaftLogKind(string(c.RaftLog)); err != nil {
		return err
	}
	if c.PreferredLeaderDelay < 0 {
		return fmt.Errorf("%w: preferred leader delay %v", ErrTiming, c.PreferredLeaderDelay)
	}
	if c.SessionTimeout <= c.HeartbeatInterval {
		return fmt.Errorf("%w: session %v, heartbeat %v", ErrSessionTiming, c.SessionTimeout, c.HeartbeatInterval)
	}
	if c.MaxPartitionsPerBroker <= 0 {
		return fmt.Errorf("%w: %d", ErrBudget, c.MaxPartitionsPerBroker)
	}
	if c.DefaultPartitions <= 0 || c.DefaultReplicationFactor <= 0 || c.DefaultReplicationFactor > math.MaxInt16 {
		return fmt.Errorf("%w: default partitions %d, default replication factor %d (each at least 1)", ErrTopicDefaults, c.DefaultPartitions, c.DefaultReplicationFactor)
	}
	if worst := c.MaxPartitionsPerBroker * len(c.Peers) * maxPartitionMetadataBytes; worst > clientMaxMessageBytes {
		return fmt.Errorf("%w: %d partitions per broker x %d brokers could make a Metadata answer of %d bytes, over the %d a gRPC client accepts; at most %d per broker",
			ErrBudget, c.MaxPartitionsPerBroker, len(c.Peers), worst, clientMaxMessageBytes, clientMaxMessageBytes/maxPartitionMetadataBytes/len(c.Peers))
	}
	g := c.Groups
	switch {
	case g.OffsetsTopicPartitions <= 0 || g.OffsetsTopicReplicationFactor <= 0:
		return fmt.Errorf("%w: offsets topic partitions %d, replication factor %d", ErrGroupConfig, g.OffsetsTopicPartitions, g.OffsetsTopicReplicationFactor)
	case g.MinSessionTimeout <= 0 || g.MaxSessionTimeout < g.MinSessionTimeout:
		return fmt.Errorf("%w: session timeouts min %v, max %v", ErrGroupConfig, g.MinSessionTimeout, g.MaxSessionTimeout)
	case g.InitialRebalanceDelay < 0:
		return fmt.Errorf("%w: initial rebalance delay %v", ErrGroupConfig, g.InitialRebalanceDelay)
	case g.OffsetsCompactAfter < 0:
		return fmt.Errorf("%w: offsets compact after %d records", ErrGroupConfig, g.OffsetsCompactAfter)
	}
	if x := c.Transactions; x.StateTopicPartitions <= 0 || x.StateTopicReplicationFactor <= 0 || x.MaxTimeout <= 0 || x.AbortTimedOutInterval <= 0 {
		return fmt.Errorf("%w: state topic partitions %d, replication factor %d, max timeout %v, abort check interval %v (each positive)",
			ErrTxnConfig, x.StateTopicPartitions, x.StateTopicReplicationFactor, x.MaxTimeout, x.AbortTimedOutInterval)
	}
	if x := c.Transactions; x.StateCompactAfter < 0 || x.IDExpiration <= 0 {
		return fmt.Errorf("%w: state compact after %d records (0 or more), transactional id expiration %v (positive)",
			ErrTxnConfig, x.StateCompactAfter, x.IDExpiration)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// ParsePeers parses "1=host:port,2=host:port".
func ParsePeers(s string) (map[metadata.BrokerID]string, error) {
	out := map[metadata.BrokerID]string{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		id, addr, ok := strings.Cut(part, "=")
		n, err := strconv.Atoi(strings.TrimSpace(id))
		if !ok || err != nil || n <= 0 || strings.TrimSpace(addr) == "" {
			return nil, fmt.Errorf("%w: %q is not ID=HOST:PORT", ErrPeers, part)
		}
		if _, dup := out[metadata.BrokerID(n)]; dup {
			return nil, fmt.Errorf("%w: broker %d given twice", ErrPeers, n)
		}
		out[metadata.BrokerID(n)] = strings.TrimSpace(addr)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: none given", ErrPeers)
	}
	return out, nil
}

// sortedPeers returns the peer ids in ascending order.
func (c *Config) sortedPeers() []metadata.BrokerID {
	ids := make([]metadata.BrokerID, 0, len(c.Peers))
	for id := range c.Peers {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}
