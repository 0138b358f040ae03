package txn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tapes-dev/tapes/internal/kerr"
)

// Marker is the end of one transaction to be written, as a control batch,
// on each of Partitions (Kafka's WriteTxnMarkers entry).
type Marker struct {
	ProducerID    int64
	ProducerEpoch int16
	Commit        bool
	// CoordinatorEpoch is the coordinator's leader epoch of its
	// __transaction_state partition (the Raft term), so that a partition
	// can refuse markers of a deposed coordinator.
	CoordinatorEpoch int32
	Partitions       []TopicPartition
}

// Markers writes transaction markers on partitions. The broker implements
// it with Kafka's WriteTxnMarkers sent to each partition's leader.
type Markers interface {
	// WriteMarkers makes one attempt at writing m on each of
	// m.Partitions and returns one error per partition, in order: nil
	// when the marker is committed on that partition, ErrPartitionGone
	// (wrapped) when the partition no longer exists (its marker is then
	// not needed), a Kafka error of the partition (kerr), or a failure to
	// reach its leader. The coordinator retries the others. Called from
	// the coordinator's completion goroutines (one per transaction being
	// completed, so concurrently for different transactions); it may block
	// up to ctx, which ends when the coordinator loses the leadership of
	// the transaction's __transaction_state partition.
	WriteMarkers(ctx context.Context, m Marker) []error
}

// Errors. Configuration errors are returned by New (wrapped with the
// offending value); ErrPartitionGone is what Markers returns for a
// partition that no longer exists.
var (
	ErrNoPartitions  = errors.New("txn: Config.Partitions is required")
	ErrNoOpen        = errors.New("txn: Config.Open is required")
	ErrNoAlloc       = errors.New("txn: Config.AllocProducerID is required")
	ErrNoMarkers     = errors.New("txn: Config.Markers is required")
	ErrBadMaxTimeout = errors.New("txn: Config.MaxTimeout must be > 0")
	ErrBadCompact    = errors.New("txn: Config.CompactAfter must be >= 0")
	ErrBadExpiration = errors.New("txn: Config.IDExpiration must be >= 0")
	ErrPartitionGone = errors.New("txn: partition no longer exists")
)

// DefaultIDExpiration is Kafka's default transactional.id.expiration.ms.
const DefaultIDExpiration = 7 * 24 * time.Hour

// Config configures a Coordinator.
type Config struct {
	// BrokerID is this broker's id (shown as the coordinator).
	BrokerID int32
	// Partitions returns the partition count of __transaction_state (0
	// while the topic does not exist). Must not block.
	Partitions func() int32
	// Open returns the local replica of partition p of __transaction_state,
	// nil when this broker hosts none. Must not block.
	Open func(p int32) Log
	// AllocProducerID allocates a producer id unique in the cluster (the
	// broker's one allocator, shared with idempotent producers). It may
	// block up to ctx.
	AllocProducerID func(ctx context.Context) (int64, error)
	// Markers writes the markers that end transactions.
	Markers Markers
	// MaxTimeout is Kafka's transaction.max.timeout.ms: a producer asking
	// for more is INVALID_TRANSACTION_TIMEOUT.
	MaxTimeout time.Duration
	// Tick is how often transactions are checked for their timeout and
	// leadership for changes (Kafka's
	// transaction.abort.timed.out.transaction.cleanup.interval.ms). 1 s
	// when 0.
	Tick time.Duration
	// RetryBackoff and MaxRetryBackoff bound the waits between attempts at
	// writing markers (100 ms and 2 s when 0).
	RetryBackoff, MaxRetryBackoff time.Duration
	// CompactAfter: once a partition this broker coordinates holds at
	// least this many records, and at least twice as many as it has
	// transactional ids, the coordinator rewrites the latest record of
	// each id and moves the log start past the rest (compact.go). 0 never
	// compacts.
	CompactAfter int64
	// IDExpiration is Kafka's transactional.id.expiration.ms: an id in
	// Empty, CompleteCommit or CompleteAbort whose state has not changed
	// for longer is removed (expire.go). 7 days when 0.
	IDExpiration time.Duration
	// Now is the clock (time.Now when nil).
	Now    func() time.Time
	Logger *slog.Logger
}

// Validate checks cfg and fills defaults.
func (c *Config) Validate() error {
	switch {
	case c.Partitions == nil:
		return ErrNoPartitions
	case c.Open == nil:
		return ErrNoOpen
	case c.AllocProducerID == nil:
		return ErrNoAlloc
	case c.Markers == nil:
		return ErrNoMarkers
	case c.MaxTimeout <= 0:
		return fmt.Errorf("%w: %v", ErrBadMaxTimeout, c.MaxTimeout)
	case c.CompactAfter < 0:
		return fmt.Errorf("%w: %d", ErrBadCompact, c.CompactAfter)
	case c.IDExpiration < 0:
		return fmt.Errorf("%w: %v", ErrBadExpiration, c.IDExpiration)
	}
	if c.IDExpiration == 0 {
		c.IDExpiration = DefaultIDExpiration
	}
	if c.Tick <= 0 {
		c.Tick = time.Second
	}
	if c.RetryBackoff <= 0 {
		c.RetryBackoff = 100 * time.Millisecond
	}
	if c.MaxRetryBackoff <= 0 {
		c.MaxRetryBackoff = 2 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Coordinator serves the transactional ids of every __transaction_state
// partition this broker leads. Its methods are called from request
// handlers, concurrently; those that write block until the write is
// committed or ctx ends. Run drives timeouts and leadership changes.
type Coordinator struct {
	cfg Config
	log *slog.Logger

	mu sync.Mutex
	// shards: the partitions this broker coordinates (or is loading), by
	// partition. Invariant: a shard's term is its Log's term when it was
	// created; a shard whose Log moved to another term, whose load failed,
	// or that went stale (a write of unknown outcome) is closed and
	// replaced by the next tick or request.
	shards map[int32]*shard

	answers concurrentAnswers
}

// New returns a Coordinator; call Run to drive it.
func New(cfg Config) (*Coordinator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Coordinator{cfg: cfg, log: cfg.Logger, shards: map[int32]*shard{}}, nil
}

// Run checks leadership and transaction timeouts every Tick until ctx
// ends, loading the partitions this broker comes to lead (and finishing
// their prepared transactions).
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
	n := c.cfg.Partitions()
	c.mu.Lock()
	for p, s := range c.shards {
		if p >= n {
			s.close()
			delete(c.shards, p)
		}
	}
	c.mu.Unlock()
	now := c.cfg.Now()
	for p := int32(0); p < n; p++ {
		if s := c.current(p); s != nil && s.loaded() {
			s.abortTimedOut(now)
			s.expireIDs(now)
			s.maybeCompact()
		}
	}
}

// current returns the shard of partition p for its Log's current term,
// creating it (and starting its load) when this broker just came to lead
// p; nil when this broker does not lead p.
func (c *Coordinator) current(p int32) *shard {
	l := c.cfg.Open(p)
	var term uint64
	if l != nil {
		term = l.Term()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.shards[p]
	if s != nil && (s.term != term || s.failed() || s.isStale()) {
		s.close()
		delete(c.shards, p)
		s = nil
	}
	if s == nil && term != 0 {
		s = newShard(c, p, term, l)
		c.shards[p] = s
		go s.load()
	}
	return s
}

// lookup returns the shard coordinating id, loaded or not, or
// INVALID_REQUEST, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR.
func (c *Coordinator) lookup(id string) (*shard, error) {
	if id == "" {
		return nil, kerr.New(kerr.InvalidRequest, "transactional id is empty")
	}
	n := c.cfg.Partitions()
	if n <= 0 {
		return nil, kerr.New(kerr.CoordinatorNotAvailable, "%s does not exist yet (it is created by the first FindCoordinator or InitProducerId with a transactional id)", StateTopic)
	}
	p := PartitionFor(id, n)
	s := c.current(p)
	if s == nil {
		return nil, kerr.New(kerr.NotCoordinator, "broker %d is not the coordinator of transactional id %s (it does not lead %s-%d)", c.cfg.BrokerID, id, StateTopic, p)
	}
	return s, nil
}

// Check reports, without blocking, whether this broker serves id now: nil
// when it coordinates id and has loaded its partition, else
// INVALID_REQUEST, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR or
// COORDINATOR_LOAD_IN_PROGRESS. Called from any goroutine.
func (c *Coordinator) Check(id string) error {
	s, err := c.lookup(id)
	if err != nil {
		return err
	}
	return s.loadErr(id)
}

// shardOf returns the loaded shard coordinating id. It does not wait for a
// load (Kafka answers COORDINATOR_LOAD_IN_PROGRESS and the client retries).
func (c *Coordinator) shardOf(id string) (*shard, error) {
	s, err := c.lookup(id)
	if err != nil {
		return nil, err
	}
	if err := s.loadErr(id); err != nil {
		return nil, err
	}
	return s, nil
}

// InitRequest is an InitProducerId with a transactional id.
type InitRequest struct {
	TransactionalID string
	TimeoutMs       int32
	// ProducerID and ProducerEpoch are the producer's current ones
	// (InitProducerId v3+, KIP-360), -1 when not given.
	ProducerID    int64
	ProducerEpoch int16
}

// InitProducerID handles an InitProducerId with a transactional id: a new
// producer id with epoch 0 for an id never seen, else the epoch bumped (a
// new producer id once the epoch is exhausted). An ongoing transaction of
// the previous incarnation is aborted with its epoch bumped, fencing it,
// and the caller is answered CONCURRENT_TRANSACTIONS until that abort has
// completed (it retries). Errors: INVALID_REQUEST (empty id),
// INVALID_TRANSACTION_TIMEOUT, NOT_COORDINATOR,
// COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
// CONCURRENT_TRANSACTIONS, PRODUCER_FENCED (v3+ naming an id or epoch that
// is not the current one). It blocks until the new state is committed or
// ctx ends.
func (c *Coordinator) InitProducerID(ctx context.Context, req InitRequest) (producerID int64, epoch int16, err error) {
	if req.TransactionalID == "" {
		return -1, -1, kerr.New(kerr.InvalidRequest, "transactional id is empty")
	}
	timeout := time.Duration(req.TimeoutMs) * time.Millisecond
	if req.TimeoutMs <= 0 || timeout > c.cfg.MaxTimeout {
		return -1, -1, kerr.New(kerr.InvalidTransactionTimeout, "transactional id %s: transaction timeout %d ms is outside (0, %d] ms (transaction.max.timeout.ms)",
			req.TransactionalID, req.TimeoutMs, c.cfg.MaxTimeout.Milliseconds())
	}
	s, err := c.shardOf(req.TransactionalID)
	if err != nil {
		return -1, -1, err
	}
	err = s.hold(ctx, KindInitProducerID, req.TransactionalID, func() error {
		producerID, epoch, err = s.initProducerID(ctx, req)
		return err
	})
	return producerID, epoch, err
}

// AddPartitions handles AddPartitionsToTxn (and AddOffsetsToTxn, whose
// partition is the group's __consumer_offsets partition): the partitions
// join the producer's ongoing transaction, starting one if none is.
// Errors: INVALID_PRODUCER_ID_MAPPING (unknown transactional id or another
// producer id), PRODUCER_FENCED (another epoch), CONCURRENT_TRANSACTIONS
// (the previous transaction is still completing), the coordinator errors.
// It blocks until the new state is committed or ctx ends.
func (c *Coordinator) AddPartitions(ctx context.Context, id string, producerID int64, epoch int16, parts []TopicPartition) error {
	s, err := c.shardOf(id)
	if err != nil {
		return err
	}
	return s.hold(ctx, KindAddPartitions, id, func() error { return s.addPartitions(ctx, id, producerID, epoch, parts) })
}

// EndTxn handles EndTxn: PrepareCommit or PrepareAbort is written and, once
// committed, the call returns while the markers are written in the
// background, then CompleteCommit or CompleteAbort. A retry of a completed
// end with the same outcome succeeds. Errors: INVALID_PRODUCER_ID_MAPPING,
// PRODUCER_FENCED, CONCURRENT_TRANSACTIONS (the same end still
// completing), INVALID_TXN_STATE (no transaction ongoing, or the other
// outcome already decided), the coordinator errors.
func (c *Coordinator) EndTxn(ctx context.Context, id string, producerID int64, epoch int16, commit bool) error {
	s, err := c.shardOf(id)
	if err != nil {
		return err
	}
	return s.endTxn(ctx, id, producerID, epoch, commit)
}

// Description describes one transactional id (DescribeTransactions).
type Description struct {
	TransactionalID string
	Coordinator     int32
	ProducerID      int64
	ProducerEpoch   int16
	State           State
	TimeoutMs       int32
	// StartMs is when the current transaction began (-1: none).
	StartMs    int64
	Partitions []TopicPartition
}

// Describe describes id: TRANSACTIONAL_ID_NOT_FOUND when this coordinator
// has no state for it, or the coordinator errors.
func (c *Coordinator) Describe(id string) (Description, error) {
	s, err := c.shardOf(id)
	if err != nil {
		return Description{}, err
	}
	return s.describe(id)
}

// ListFilter selects transactions (ListTransactions); empty fields select
// all.
type ListFilter struct {
	States      []State
	ProducerIDs []int64
	// MinDuration: only transactions running for longer (v1, KIP-994).
	MinDuration time.Duration
}

// List lists the transactions of every partition this broker
// coordinates, sorted by id: COORDINATOR_LOAD_IN_PROGRESS while one of
// them is loading (as Kafka).
func (c *Coordinator) List(f ListFilter) ([]Description, error) {
	n := c.cfg.Partitions()
	var shards []*shard
	for p := int32(0); p < n; p++ {
		if s := c.current(p); s != nil {
			if err := s.loadErr(""); err != nil {
				return nil, err
			}
			shards = append(shards, s)
		}
	}
	now := millis(c.cfg.Now())
	var out []Description
	for _, s := range shards {
		out = append(out, s.list(f, now)...)
	}
	slices.SortFunc(out, func(a, b Description) int { return strings.Compare(a.TransactionalID, b.TransactionalID) })
	return out, nil
}
