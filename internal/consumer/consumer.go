package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/tapes-dev/tapes/internal/assign"
	"github.com/tapes-dev/tapes/internal/client"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// TopicPartition names one partition.
type TopicPartition = assign.TopicPartition

// Record is one consumed record with where it came from.
type Record struct {
	Topic     string
	Partition int32
	*tapesv1.Record
}

// Listener receives the member's assignment changes. Every method is called
// on the poll goroutine, inside Poll (or Close), and may call Commit.
type Listener interface {
	// Revoked: the partitions are about to be taken away (a rebalance, or
	// Close). Commit what was processed now; afterwards a commit of them is
	// refused or lands for someone else.
	Revoked(ctx context.Context, generation int32, tps []TopicPartition)
	// Assigned: the partitions were given to this member in generation.
	Assigned(ctx context.Context, generation int32, tps []TopicPartition)
	// Lost: the member was fenced (session expired, or a newer generation
	// went on without it); the partitions may already be owned by another
	// member, and committing them is refused.
	Lost(ctx context.Context, generation int32, tps []TopicPartition, why error)
	// Gap: the member's position in a partition was below the log start
	// (retention deleted offsets [from, to)); it continues at to, or at
	// the end with From "latest". It is called inside Poll once the
	// records fetched before the gap were returned by earlier Polls, and
	// before any record after it: in order with the records.
	Gap(tp TopicPartition, from, to int64, resumeAt int64)
}

// Config configures a Consumer.
type Config struct {
	Client   *client.Client
	Group    string
	Topic    string
	ClientID string
	// Assignor: assign.CooperativeStickyName (default) or assign.RangeName.
	Assignor string
	// SessionTimeout (default 10s), HeartbeatInterval (default a third of
	// it) and MaxPollInterval (default 5m): Kafka's session.timeout.ms,
	// heartbeat.interval.ms and max.poll.interval.ms. A member that does not
	// call Poll within MaxPollInterval leaves the group (and rejoins at its
	// next Poll); it is also the rebalance timeout sent in JoinGroup.
	SessionTimeout, HeartbeatInterval, MaxPollInterval time.Duration
	// From is auto.offset.reset: "earliest" (default) or "latest", for a
	// partition without committed offset or whose position fell below the
	// log start. Latest is the high watermark, with ReadCommitted the last
	// stable offset (Kafka's ListOffsets by isolation level).
	From string
	// FetchMaxBytes bounds one fetch (default 1 MiB); FetchMaxWait is its
	// long poll (default 500ms).
	FetchMaxBytes int
	FetchMaxWait  time.Duration
	// MaxBuffered is how many records of a partition are held, fetched
	// but not yet polled, before fetching stops (default 2000): with
	// FetchMaxBytes, how far a slow consumer reads ahead of its processing.
	MaxBuffered int
	// IsolationLevel is Kafka's isolation.level: ReadUncommitted (the
	// default, as Kafka's) reads up to the high watermark, records of open
	// and aborted transactions included; ReadCommitted reads below the last
	// stable offset only, without the records of aborted transactions.
	IsolationLevel IsolationLevel
	Listener       Listener
	Logger         *slog.Logger
}

// IsolationLevel is which records a consumer reads, with the values of
// Kafka's isolation.level (and of FetchRequest.isolation_level).
type IsolationLevel int32

const (
	ReadUncommitted IsolationLevel = 0
	ReadCommitted   IsolationLevel = 1
)

// String is the level's name in Kafka's spelling.
func (l IsolationLevel) String() string {
	switch l {
	case ReadUncommitted:
		return "read_uncommitted"
	case ReadCommitted:
		return "read_committed"
	}
	return fmt.Sprintf("isolation-level(%d)", int32(l))
}

// ParseIsolationLevel reads read_committed or read_uncommitted.
func ParseIsolationLevel(s string) (IsolationLevel, error) {
	switch s {
	case "read_uncommitted":
		return ReadUncommitted, nil
	case "read_committed":
		return ReadCommitted, nil
	}
	return 0, fmt.Errorf("isolation level %q: want read_committed or read_uncommitted", s)
}

// ErrClosed is returned by Poll after Close.
var ErrClosed = errors.New("consumer: closed")

func (c *Config) validate() error {
	if c.Client == nil || c.Group == "" || c.Topic == "" {
		return fmt.Errorf("consumer: client, group and topic are required")
	}
	if c.Assignor == "" {
		c.Assignor = assign.CooperativeStickyName
	}
	if _, err := assign.ByName(c.Assignor); err != nil {
		return err
	}
	if c.SessionTimeout <= 0 {
		c.SessionTimeout = 10 * time.Second
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = c.SessionTimeout / 3
	}
	if c.HeartbeatInterval >= c.SessionTimeout {
		return fmt.Errorf("consumer: heartbeat interval %v must be below the session timeout %v", c.HeartbeatInterval, c.SessionTimeout)
	}
	if c.MaxPollInterval <= 0 {
		c.MaxPollInterval = 5 * time.Minute
	}
	switch c.From {
	case "":
		c.From = "earliest"
	case "earliest", "latest":
	default:
		return fmt.Errorf("consumer: from %q: want earliest or latest", c.From)
	}
	if c.IsolationLevel != ReadUncommitted && c.IsolationLevel != ReadCommitted {
		return fmt.Errorf("consumer: isolation level %d: want 0 (read_uncommitted) or 1 (read_committed)", c.IsolationLevel)
	}
	if c.FetchMaxBytes <= 0 {
		c.FetchMaxBytes = 1 << 20
	}
	if c.FetchMaxWait <= 0 {
		c.FetchMaxWait = 500 * time.Millisecond
	}
	if c.MaxBuffered <= 0 {
		c.MaxBuffered = defaultMaxBuffered
	}
	if c.ClientID == "" {
		c.ClientID = "consumer"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Listener == nil {
		c.Listener = nopListener{}
	}
	return nil
}

type nopListener struct{}

func (nopListener) Revoked(context.Context, int32, []TopicPartition)     {}
func (nopListener) Assigned(context.Context, int32, []TopicPartition)    {}
func (nopListener) Lost(context.Context, int32, []TopicPartition, error) {}
func (nopListener) Gap(TopicPartition, int64, int64, int64)              {}

// Consumer is one group member. Poll, Commit, Positions and Close are for
// the poll goroutine; Pause, Resume and Status may be called from any
// goroutine.
type Consumer struct {
	cfg      Config
	log      *slog.Logger
	cl       *client.Client
	assignor assign.Assignor
	coop     bool

	// Owned by the poll goroutine.
	owned     map[TopicPartition]*fetcher
	ownedGen  int32 // generation in which owned was last confirmed
	positions map[TopicPartition]int64
	joining   bool // a join request is with the member goroutine
	started   bool

	// events from the member goroutine to the poll goroutine.
	events chan event
	// joinReq from the poll goroutine to the member goroutine.
	joinReq chan joinRequest
	// wake is signalled when a fetcher buffered records.
	wake chan struct{}
	// assignWarn limits the member goroutine's warnings about an
	// assignment it cannot compute.
	assignWarn client.RateLimit

	mu sync.Mutex
	// member and generation as the coordinator knows them (commits use
	// them); set by the member goroutine, read by anyone.
	memberID   string
	generation int32
	leader     string
	state      string
	paused     bool
	lastPoll   time.Time
	// snapshot: owned partitions and positions as of the end of the last
	// Poll, for other goroutines.
	snapshot []PartitionPosition

	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

type eventKind int

const (
	evAssigned eventKind = iota
	evRejoin
	evFenced
)

type event struct {
	kind       eventKind
	generation int32
	assigned   []TopicPartition
	err        error
}

// assignWarnEvery is the least time between two warnings that the leader
// could not compute the assignment.
const assignWarnEvery = 30 * time.Second

type joinRequest struct {
	owned      []TopicPartition
	generation int32
}

// New starts a consumer's member goroutine. It joins the group at the
// first Poll.
func New(cfg Config) (*Consumer, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	a, _ := assign.ByName(cfg.Assignor)
	c := &Consumer{cfg: cfg, log: cfg.Logger.With("group", cfg.Group), cl: cfg.Client, assignor: a, coop: assign.Cooperative(a),
		owned: map[TopicPartition]*fetcher{}, positions: map[TopicPartition]int64{}, ownedGen: -1,
		events: make(chan event, 64), joinReq: make(chan joinRequest, 1), wake: make(chan struct{}, 1),
		state: "joining", stop: make(chan struct{}), lastPoll: time.Now(),
		assignWarn: client.RateLimit{Every: assignWarnEvery}}
	c.wg.Add(1)
	go c.member()
	return c, nil
}

// Status is a consumer's state for its control API.
type Status struct {
	MemberID   string
	Generation int32
	Leader     bool
	State      string // joining, stable, rebalancing, paused, closed
	Assigned   []TopicPartition
	Positions  map[TopicPartition]int64
}

// PartitionPosition is an owned partition and its position.
type PartitionPosition struct {
	Partition int32
	Position  int64
}

// AssignedSnapshot returns the owned partitions and positions as of the end
// of the last Poll; safe from any goroutine.
func (c *Consumer) AssignedSnapshot() []PartitionPosition {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.snapshot)
}

// publish refreshes the snapshot. Poll goroutine only.
func (c *Consumer) publish() {
	var snap []PartitionPosition
	for _, tp := range c.Assigned() {
		snap = append(snap, PartitionPosition{Partition: tp.Partition, Position: c.positions[tp]})
	}
	c.mu.Lock()
	c.snapshot = snap
	c.mu.Unlock()
}

// Pause stops Poll from returning records (fetching stops once buffers
// fill); heartbeats go on, so the member keeps its partitions.
func (c *Consumer) Pause() { c.mu.Lock(); c.paused = true; c.mu.Unlock() }

// Resume undoes Pause.
func (c *Consumer) Resume() { c.mu.Lock(); c.paused = false; c.mu.Unlock() }

// Membership returns the member id and generation commits use.
func (c *Consumer) Membership() (string, int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.memberID, c.generation
}

// Assigned returns the partitions the poll goroutine owns, sorted. Poll
// goroutine only.
func (c *Consumer) Assigned() []TopicPartition {
	out := make([]TopicPartition, 0, len(c.owned))
	for tp := range c.owned {
		out = append(out, tp)
	}
	assign.SortPartitions(out)
	return out
}

// Positions returns the next offset to process of every owned partition.
// Poll goroutine only.
func (c *Consumer) Positions() map[TopicPartition]int64 {
	out := map[TopicPartition]int64{}
	for tp := range c.owned {
		if p, ok := c.positions[tp]; ok {
			out[tp] = p
		}
	}
	return out
}

// Rewind moves owned partitions back to the given positions (Kafka's
// seek): what their fetchers buffered is dropped and fetching starts again
// there. A read-process-write loop whose transaction aborted rewinds to
// where the transaction began, so that the next poll returns the same
// records again. Partitions not owned any more are ignored. Poll goroutine
// only.
func (c *Consumer) Rewind(positions map[TopicPartition]int64) {
	for tp, pos := range positions {
		f := c.owned[tp]
		if f == nil {
			continue
		}
		f.close()
		c.positions[tp] = pos
		c.owned[tp] = c.newFetcher(tp, pos)
	}
	c.publish()
}

// State returns the member's state in a word, from any goroutine.
func (c *Consumer) State() (state string, paused bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state, c.paused
}

// Poll runs pending rebalance steps (calling the Listener) and returns up to
// max records from the owned partitions, waiting up to wait for some.
func (c *Consumer) Poll(ctx context.Context, max int, wait time.Duration) ([]Record, error) {
	select {
	case <-c.stop:
		return nil, ErrClosed
	default:
	}
	c.mu.Lock()
	c.lastPoll = time.Now()
	c.mu.Unlock()
	if !c.started {
		c.started = true
		c.requestJoin()
	}
	deadline := time.Now().Add(wait)
	defer c.publish()
	for {
		c.drainEvents(ctx)
		c.mu.Lock()
		paused := c.paused
		c.mu.Unlock()
		if !paused {
			if recs := c.take(max); len(recs) > 0 {
				return recs, nil
			}
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, nil
		}
		t := time.NewTimer(left)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-c.stop:
			t.Stop()
			return nil, ErrClosed
		case ev := <-c.events:
			t.Stop()
			c.handle(ctx, ev)
		case <-c.wake:
			t.Stop()
		case <-t.C:
		}
	}
}

// take returns up to max buffered records, round-robin over partitions in
// order, and advances positions. A retention gap of a partition is
// reported to the listener (Gap) when it comes next and none of that
// partition's records is in this batch: the records before it have been
// processed by then, those after it come in the next batches.
func (c *Consumer) take(max int) []Record {
	var out []Record
	tps := c.Assigned()
	taken := map[TopicPartition]bool{}
	for progress := true; progress && len(out) < max; {
		progress = false
		for _, tp := range tps {
			f := c.owned[tp]
			if f == nil {
				continue
			}
			r, g := f.next(c.positions[tp], !taken[tp])
			if g != nil {
				c.cfg.Listener.Gap(tp, g.from, g.to, g.resumeAt)
				progress = true
				continue
			}
			if r == nil {
				continue
			}
			taken[tp] = true
			out = append(out, Record{Topic: tp.Topic, Partition: tp.Partition, Record: r})
			c.positions[tp] = r.Offset + 1
			progress = true
			if len(out) == max {
				break
			}
		}
	}
	return out
}

func (c *Consumer) drainEvents(ctx context.Context) {
	for {
		select {
		case ev := <-c.events:
			c.handle(ctx, ev)
		default:
			return
		}
	}
}

// requestJoin asks the member goroutine for a rebalance with what this
// member owns (nothing under the eager protocol).
func (c *Consumer) requestJoin() {
	if c.joining {
		return
	}
	c.joining = true
	req := joinRequest{generation: -1}
	if c.coop {
		req.owned, req.generation = c.Assigned(), c.ownedGen
	}
	c.joinReq <- req
}

// handle applies one event from the member goroutine.
func (c *Consumer) handle(ctx context.Context, ev event) {
	switch ev.kind {
	case evRejoin:
		if !c.coop {
			c.revoke(ctx, c.Assigned())
		}
		c.requestJoin()
	case evFenced:
		c.joining = false
		if lost := c.Assigned(); len(lost) > 0 {
			c.drop(lost)
			c.cfg.Listener.Lost(ctx, ev.generation, lost, ev.err)
		}
		c.ownedGen = -1
		c.requestJoin()
	case evAssigned:
		c.joining = false
		newSet := map[TopicPartition]bool{}
		for _, tp := range ev.assigned {
			newSet[tp] = true
		}
		var revoked, added []TopicPartition
		for _, tp := range c.Assigned() {
			if !newSet[tp] {
				revoked = append(revoked, tp)
			}
		}
		for _, tp := range ev.assigned {
			if _, ok := c.owned[tp]; !ok {
				added = append(added, tp)
			}
		}
		if len(revoked) > 0 {
			c.revoke(ctx, revoked)
		}
		c.ownedGen = ev.generation
		c.start(ctx, added)
		c.cfg.Listener.Assigned(ctx, ev.generation, added)
		if c.coop && len(revoked) > 0 {
			// KIP-429: the partitions given up are free only after this
			// member rejoins without them.
			c.requestJoin()
		}
	}
}

// revoke tells the listener (which commits) and stops the partitions.
func (c *Consumer) revoke(ctx context.Context, tps []TopicPartition) {
	if len(tps) == 0 {
		return
	}
	_, gen := c.Membership()
	c.cfg.Listener.Revoked(ctx, gen, tps)
	c.drop(tps)
}

func (c *Consumer) drop(tps []TopicPartition) {
	for _, tp := range tps {
		if f := c.owned[tp]; f != nil {
			f.close()
		}
		delete(c.owned, tp)
		delete(c.positions, tp)
	}
}

// start sets the positions of newly owned partitions (the committed offset,
// else From) and starts their fetchers.
func (c *Consumer) start(ctx context.Context, tps []TopicPartition) {
	if len(tps) == 0 {
		return
	}
	req := []*tapesv1.TopicPartitions{{Topic: c.cfg.Topic}}
	for _, tp := range tps {
		req[0].Partitions = append(req[0].Partitions, tp.Partition)
	}
	committed := map[TopicPartition]int64{}
	offs, err := c.fetchCommitted(ctx, req)
	if err != nil {
		c.log.Warn("could not fetch committed offsets; starting from the reset policy", "err", err)
	}
	for _, o := range offs {
		if o.Offset >= 0 {
			committed[TopicPartition{Topic: o.Topic, Partition: o.Partition}] = o.Offset
		}
	}
	for _, tp := range tps {
		pos, ok := committed[tp]
		if !ok {
			pos = c.resetOffset(ctx, tp)
		}
		c.positions[tp] = pos
		c.owned[tp] = c.newFetcher(tp, pos)
	}
}

// fetchCommitted asks the group's committed offsets. Read_committed asks
// with require_stable, as Kafka's consumer does: while a transactional
// commit of a partition is pending (UNSTABLE_OFFSET_COMMIT) it asks again,
// every 100 ms until ctx ends, rather than start from the offset before a
// transaction that may still commit (and so process its input twice).
func (c *Consumer) fetchCommitted(ctx context.Context, req []*tapesv1.TopicPartitions) ([]*tapesv1.CommittedOffset, error) {
	for {
		octx, cancel := context.WithTimeout(ctx, c.cfg.SessionTimeout)
		var offs []*tapesv1.CommittedOffset
		var err error
		if c.cfg.IsolationLevel == ReadCommitted {
			offs, err = c.cl.OffsetFetchStable(octx, c.cfg.Group, req)
		} else {
			offs, err = c.cl.OffsetFetch(octx, c.cfg.Group, req)
		}
		cancel()
		if !kerr.Is(err, kerr.UnstableOffsetCommit) {
			return offs, err
		}
		c.log.Debug("a transactional offset commit is pending; asking again", "err", err)
		if sleep(ctx, 100*time.Millisecond); ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}

// resetOffset is From's offset of tp (-1 when it cannot be had now; the
// fetcher then resolves it).
func (c *Consumer) resetOffset(ctx context.Context, tp TopicPartition) int64 {
	ts := client.EarliestOffset
	if c.cfg.From == "latest" {
		ts = client.LatestOffset
	}
	lctx, cancel := context.WithTimeout(ctx, c.cfg.SessionTimeout)
	defer cancel()
	// read_committed: latest is the last stable offset (Kafka's
	// ListOffsets with isolation_level 1), so the records of a
	// transaction open below the high watermark are read once committed.
	resp, err := c.cl.ListOffsetsIsolated(lctx, tp.Topic, tp.Partition, ts, int32(c.cfg.IsolationLevel))
	if err != nil {
		return -1
	}
	return resp.Offset
}

// Commit commits offsets (next offset to process) as this member, in its
// current generation. REBALANCE_IN_PROGRESS (the group waits for its
// assignment) is retried until ctx ends; a generation that moved on while
// the commit was in flight is retried once with the new one; fencing
// (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION) is returned.
func (c *Consumer) Commit(ctx context.Context, offsets map[TopicPartition]int64) error {
	if len(offsets) == 0 {
		return nil
	}
	tps := make([]TopicPartition, 0, len(offsets))
	for tp := range offsets {
		tps = append(tps, tp)
	}
	assign.SortPartitions(tps)
	var parts []*tapesv1.OffsetCommitPartition
	for _, tp := range tps {
		parts = append(parts, &tapesv1.OffsetCommitPartition{Topic: tp.Topic, Partition: tp.Partition, Offset: offsets[tp]})
	}
	retriedGen := false
	for {
		member, gen := c.Membership()
		if member == "" || gen <= 0 {
			return kerr.New(kerr.UnknownMemberID, "%s is not a member of group %s (yet): commit refused", c.cfg.ClientID, c.cfg.Group)
		}
		err := c.cl.OffsetCommit(ctx, &tapesv1.OffsetCommitRequest{GroupId: c.cfg.Group, GenerationId: gen, MemberId: member, Offsets: parts})
		switch {
		case err == nil:
			return nil
		case kerr.Is(err, kerr.RebalanceInProgress):
			t := time.NewTimer(50 * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				return err
			case <-t.C:
			}
		case kerr.Is(err, kerr.IllegalGeneration) && !retriedGen:
			retriedGen = true
			if _, now := c.Membership(); now == gen {
				return err
			}
		default:
			return err
		}
	}
}

// CommitPositions commits the positions of every owned partition.
func (c *Consumer) CommitPositions(ctx context.Context) error {
	return c.Commit(ctx, c.Positions())
}

// Close revokes every owned partition (the listener commits), leaves the
// group and stops the member goroutine. Call it from the poll goroutine.
func (c *Consumer) Close(ctx context.Context) error {
	select {
	case <-c.stop:
		return nil
	default:
	}
	c.drainEvents(ctx)
	c.revoke(ctx, c.Assigned())
	member, _ := c.Membership()
	var err error
	if member != "" {
		err = c.cl.LeaveGroup(ctx, c.cfg.Group, member)
	}
	c.shutdown()
	return err
}

// Abandon stops the consumer without committing or leaving (the group
// notices after the session timeout), as a crash would.
func (c *Consumer) Abandon() { c.shutdown() }

func (c *Consumer) shutdown() {
	c.stopOnce.Do(func() {
		close(c.stop)
		for _, f := range c.owned {
			f.close()
		}
		c.wg.Wait()
		c.mu.Lock()
		c.state = "closed"
		c.mu.Unlock()
	})
}

// sortedTPs returns tps sorted.
func sortedTPs(tps []TopicPartition) []TopicPartition {
	out := slices.Clone(tps)
	assign.SortPartitions(out)
	return out
}
