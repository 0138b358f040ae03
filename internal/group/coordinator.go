package group

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tapes-dev/tapes/internal/assign"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// Log is one partition of __consumer_offsets as the coordinator uses it.
// The broker implements it over its local replica. Every method may be
// called from any goroutine (request handlers, the ticker, loaders).
type Log interface {
	// Term is the leadership term in which this broker leads the partition
	// and has applied everything committed before it; 0 when it does not
	// lead. It must not block.
	Term() uint64
	// Append writes recs as one batch with acks=all and returns the
	// offset of its first record once the batch is committed, or an error
	// (a Kafka error, e.g. NOT_LEADER_OR_FOLLOWER). It blocks up to ctx.
	Append(ctx context.Context, recs []Record) (base int64, err error)
	// DeleteRecords moves the partition's log start to before (at most
	// the high watermark) on every replica and returns the new log start
	// once that is committed. It blocks up to ctx.
	DeleteRecords(ctx context.Context, before int64) (logStart int64, err error)
	// Read returns committed entries from offset on (some, not
	// necessarily all), in offset order, each with its Offset: records,
	// and the transaction markers (Kafka control batches) as Records with
	// Marker set; then the offset to read next and the high watermark.
	// offset below the log start reads from the log start. It blocks up
	// to ctx.
	Read(ctx context.Context, offset int64) (recs []Record, next, highWatermark int64, err error)
}

// Config configures a Coordinator.
type Config struct {
	// BrokerID is this broker's id (shown as the coordinator).
	BrokerID int32
	// Partitions returns the partition count of __consumer_offsets (0
	// while the topic does not exist). Must not block.
	Partitions func() int32
	// Open returns the local replica of partition p of __consumer_offsets,
	// nil when this broker hosts none. Called from request handlers and the
	// ticker; must not block.
	Open func(p int32) Log
	// Session timeouts a member may ask for (Kafka's
	// group.min/max.session.timeout.ms).
	MinSessionTimeout, MaxSessionTimeout time.Duration
	// InitialRebalanceDelay is how long the first join of an empty group
	// waits for more members (Kafka's group.initial.rebalance.delay.ms).
	InitialRebalanceDelay time.Duration
	// CompactAfter: once a partition this broker coordinates holds at
	// least this many records, and at least twice as many as it has keys,
	// the coordinator rewrites the latest record of each key at the end of
	// the partition and moves its log start past the rest (see
	// compact.go). 0 never compacts.
	CompactAfter int64
	// Tick is how often sessions and rebalance timeouts are checked.
	Tick time.Duration
	// Now is the clock (time.Now when nil).
	Now    func() time.Time
	Logger *slog.Logger
}

// Configuration errors.
var (
	ErrNoPartitions = errors.New("group: Config.Partitions is required")
	ErrBadTimeouts  = errors.New("group: session timeout bounds must satisfy 0 < min <= max")
	ErrNoOpen       = errors.New("group: Config.Open is required")
	ErrBadCompact   = errors.New("group: Config.CompactAfter must be >= 0")
)

// Validate checks cfg and fills defaults.
func (c *Config) Validate() error {
	switch {
	case c.Partitions == nil:
		return ErrNoPartitions
	case c.MinSessionTimeout <= 0 || c.MaxSessionTimeout < c.MinSessionTimeout:
		return fmt.Errorf("%w: min %v, max %v", ErrBadTimeouts, c.MinSessionTimeout, c.MaxSessionTimeout)
	case c.Open == nil:
		return ErrNoOpen
	case c.CompactAfter < 0:
		return fmt.Errorf("%w: %d", ErrBadCompact, c.CompactAfter)
	}
	if c.Tick <= 0 {
		c.Tick = 100 * time.Millisecond
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Coordinator serves the groups of every __consumer_offsets partition this
// broker leads. Its methods are called from gRPC handlers, concurrently;
// JoinGroup and SyncGroup block until the rebalance step they wait for
// completes or ctx ends. Run drives timeouts.
type Coordinator struct {
	cfg Config
	log *slog.Logger

	mu sync.Mutex
	// shards: the partitions this broker coordinates (or is loading), by
	// partition. Invariant: a shard's term is the Log's term when it was
	// created; a shard whose Log moved to another term is closed and
	// removed by the next tick or request.
	shards map[int32]*shard
}

// New returns a Coordinator; call Run to drive it.
func New(cfg Config) (*Coordinator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Coordinator{cfg: cfg, log: cfg.Logger, shards: map[int32]*shard{}}, nil
}

// Run checks leadership, sessions and rebalance timeouts every Tick until
// ctx ends, loading the partitions this broker comes to lead.
func (c *Coordinator) Run(ctx context.Context) {
	t := time.NewTicker(c.cfg.Tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			c.mu.Lock()
			for p, s := range c.shards {
				s.close()
				delete(c.shards, p)
			}
			c.mu.Unlock()
			return
		case <-t.C:
			c.tick()
		}
	}
}

func (c *Coordinator) tick() {
	now := c.cfg.Now()
	n := c.cfg.Partitions()
	c.mu.Lock()
	for p, s := range c.shards {
		if p >= n { // the topic was recreated smaller
			s.close()
			delete(c.shards, p)
		}
	}
	c.mu.Unlock()
	for p := int32(0); p < n; p++ {
		s, _ := c.current(p)
		if s == nil {
			continue
		}
		select {
		case <-s.ready:
			if s.err == nil {
				s.tick(now)
				s.maybeTail()
				s.maybeCompact()
			}
		default:
		}
	}
}

// current returns the shard of partition p for the Log's current term,
// creating it (and starting its load) when this broker just came to lead p,
// and closing a shard of an earlier term. nil when this broker does not
// lead p; then log is the local replica, if any.
func (c *Coordinator) current(p int32) (*shard, Log) {
	l := c.cfg.Open(p)
	var term uint64
	if l != nil {
		term = l.Term()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.shards[p]
	if s != nil && (s.term != term || s.failed()) {
		s.close()
		delete(c.shards, p)
		s = nil
	}
	if s == nil && term != 0 {
		s = newShard(c, p, term, l)
		c.shards[p] = s
		go s.load()
	}
	return s, l
}

// lookup returns the shard coordinating groupID, loaded or not, or
// INVALID_GROUP_ID, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR.
func (c *Coordinator) lookup(groupID string) (*shard, error) {
	if groupID == "" {
		return nil, kerr.New(kerr.InvalidGroupID, "group id is empty")
	}
	n := c.cfg.Partitions()
	if n <= 0 {
		return nil, kerr.New(kerr.CoordinatorNotAvailable, "%s does not exist yet (it is created by the first FindCoordinator)", OffsetsTopic)
	}
	p := PartitionFor(groupID, n)
	s, _ := c.current(p)
	if s == nil {
		return nil, c.notCoordinator(groupID, p)
	}
	return s, nil
}

// Check reports, without blocking, whether this broker serves groupID now:
// nil when it coordinates the group and has loaded its partition, else
// INVALID_GROUP_ID, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, or
// COORDINATOR_LOAD_IN_PROGRESS while (or when) loading the partition
// failed. The Kafka front end calls it before each group call, from any
// goroutine, so that a client is told at once, as Kafka's coordinator tells
// it, instead of waiting for the load as the other methods do.
func (c *Coordinator) Check(groupID string) error {
	s, err := c.lookup(groupID)
	if err != nil {
		return err
	}
	select {
	case <-s.ready:
	default:
		return kerr.New(kerr.CoordinatorLoadInProgress, "broker %d is loading %s-%d (group %s)", c.cfg.BrokerID, OffsetsTopic, s.p, groupID)
	}
	if s.err != nil {
		return kerr.New(kerr.CoordinatorLoadInProgress, "broker %d failed to load %s-%d (group %s): %v", c.cfg.BrokerID, OffsetsTopic, s.p, groupID, s.err)
	}
	return nil
}

// shardOf returns the loaded shard coordinating groupID, waiting for its
// load up to ctx, or NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS.
func (c *Coordinator) shardOf(ctx context.Context, groupID string) (*shard, error) {
	s, err := c.lookup(groupID)
	if err != nil {
		return nil, err
	}
	p := s.p
	select {
	case <-s.ready:
	case <-ctx.Done():
		return nil, kerr.New(kerr.CoordinatorLoadInProgress, "broker %d is loading %s-%d (group %s)", c.cfg.BrokerID, OffsetsTopic, p, groupID)
	}
	if s.err != nil {
		return nil, kerr.New(kerr.CoordinatorLoadInProgress, "broker %d failed to load %s-%d (group %s): %v", c.cfg.BrokerID, OffsetsTopic, p, groupID, s.err)
	}
	return s, nil
}

func (c *Coordinator) notCoordinator(groupID string, p int32) error {
	return kerr.New(kerr.NotCoordinator, "broker %d is not the coordinator of group %s (it does not lead %s-%d)", c.cfg.BrokerID, groupID, OffsetsTopic, p)
}

// newMemberID returns a member id as Kafka makes them: the client id and a
// random suffix.
func newMemberID(clientID string) string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	if clientID == "" {
		clientID = "member"
	}
	return clientID + "-" + hex.EncodeToString(b[:])
}

// JoinGroup handles a JoinGroup from host (the member's address). It blocks
// until the rebalance completes or ctx ends.
func (c *Coordinator) JoinGroup(ctx context.Context, req *tapesv1.JoinGroupRequest, host string) (*tapesv1.JoinGroupResponse, error) {
	s, err := c.shardOf(ctx, req.GroupId)
	if err != nil {
		return nil, err
	}
	session := time.Duration(req.SessionTimeoutMs) * time.Millisecond
	if session < c.cfg.MinSessionTimeout || session > c.cfg.MaxSessionTimeout {
		return nil, kerr.New(kerr.InvalidSessionTimeout, "session timeout %v is outside [%v, %v]", session, c.cfg.MinSessionTimeout, c.cfg.MaxSessionTimeout)
	}
	rebalance := time.Duration(req.RebalanceTimeoutMs) * time.Millisecond
	if rebalance <= 0 {
		rebalance = session
	}
	if req.ProtocolType == "" || len(req.Protocols) == 0 {
		return nil, kerr.New(kerr.InconsistentGroupProtocol, "join of group %s names no protocol type or no protocols", req.GroupId)
	}
	ch, resp, err := s.join(req, host, session, rebalance)
	if err != nil || resp != nil {
		return resp, err
	}
	select {
	case out := <-ch:
		return out.resp, out.err
	case <-ctx.Done():
		return nil, kerr.New(kerr.RebalanceInProgress, "join of group %s: %v before the rebalance completed; rejoin", req.GroupId, ctx.Err())
	case <-s.done:
		return nil, c.notCoordinator(req.GroupId, s.p)
	}
}

// SyncGroup handles a SyncGroup; it blocks until the leader's assignment is
// committed or ctx ends.
func (c *Coordinator) SyncGroup(ctx context.Context, req *tapesv1.SyncGroupRequest) (*tapesv1.SyncGroupResponse, error) {
	s, err := c.shardOf(ctx, req.GroupId)
	if err != nil {
		return nil, err
	}
	ch, err := s.sync(req)
	if err != nil {
		return nil, err
	}
	select {
	case out := <-ch:
		if out.err != nil {
			return nil, out.err
		}
		return &tapesv1.SyncGroupResponse{Assignment: out.assignment, ProtocolType: out.protocolType, ProtocolName: out.protocol}, nil
	case <-ctx.Done():
		return nil, kerr.New(kerr.RebalanceInProgress, "sync of group %s: %v before the leader's assignment; rejoin", req.GroupId, ctx.Err())
	case <-s.done:
		return nil, c.notCoordinator(req.GroupId, s.p)
	}
}

// Heartbeat handles a Heartbeat.
func (c *Coordinator) Heartbeat(ctx context.Context, req *tapesv1.HeartbeatRequest) error {
	s, err := c.shardOf(ctx, req.GroupId)
	if err != nil {
		return err
	}
	return s.heartbeat(req)
}

// LeaveGroup handles a LeaveGroup.
func (c *Coordinator) LeaveGroup(ctx context.Context, req *tapesv1.LeaveGroupRequest) error {
	s, err := c.shardOf(ctx, req.GroupId)
	if err != nil {
		return err
	}
	return s.leave(req)
}

// OffsetCommit handles an OffsetCommit: fenced, appended, then applied.
func (c *Coordinator) OffsetCommit(ctx context.Context, req *tapesv1.OffsetCommitRequest) error {
	s, err := c.shardOf(ctx, req.GroupId)
	if err != nil {
		return err
	}
	return s.commit(ctx, req)
}

// OffsetFetch handles an OffsetFetch.
func (c *Coordinator) OffsetFetch(ctx context.Context, req *tapesv1.OffsetFetchRequest) (*tapesv1.OffsetFetchResponse, error) {
	s, err := c.shardOf(ctx, req.GroupId)
	if err != nil {
		return nil, err
	}
	resp, _ := s.fetchOffsets(req)
	return resp, nil
}

// DescribeGroup describes one group (state Dead when unknown).
func (c *Coordinator) DescribeGroup(ctx context.Context, groupID string) (*tapesv1.GroupDescription, error) {
	s, err := c.shardOf(ctx, groupID)
	if err != nil {
		return nil, err
	}
	return s.describe(groupID), nil
}

// ListGroups lists the groups of every loaded partition, by id.
func (c *Coordinator) ListGroups() []*tapesv1.ListedGroup {
	c.mu.Lock()
	shards := make([]*shard, 0, len(c.shards))
	for _, s := range c.shards {
		shards = append(shards, s)
	}
	c.mu.Unlock()
	var out []*tapesv1.ListedGroup
	for _, s := range shards {
		select {
		case <-s.ready:
		default:
			continue
		}
		if s.err != nil || s.log.Term() != s.term {
			continue
		}
		out = append(out, s.list()...)
	}
	slices.SortFunc(out, func(a, b *tapesv1.ListedGroup) int { return strings.Compare(a.GroupId, b.GroupId) })
	return out
}

func sortedMemberIDs(ms map[string]*member) []string {
	ids := make([]string, 0, len(ms))
	for id := range ms {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// toPartitions converts the wire form to assign's.
func toPartitions(tps []*tapesv1.TopicPartitions) []assign.TopicPartition {
	var out []assign.TopicPartition
	for _, t := range tps {
		for _, p := range t.Partitions {
			out = append(out, assign.TopicPartition{Topic: t.Topic, Partition: p})
		}
	}
	return out
}
