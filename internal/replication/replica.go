package replication

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/tapes-dev/tapes/internal/metadata"
	"github.com/tapes-dev/tapes/internal/raftlog"
	"github.com/tapes-dev/tapes/internal/storage"
)

// Replica is one partition replica. Its methods are safe for concurrent use.
type Replica struct {
	cfg  Config
	log  *storage.Log
	fsm  *fsm
	raft *raft.Raft
	// bolt is the group's raft-boltdb file: its stable store, and its log
	// store too unless wal is set (see openLogStores); nil when the group's
	// term and vote are in the broker's shared stable store.
	bolt *BoltStore
	// stable is the group's raft.StableStore: bolt, or its view of
	// cfg.Stable (shared).
	stable raft.StableStore
	shared *GroupStable
	// wal is the group's view of the broker's shared Raft log, nil when
	// the group's log is in bolt.
	wal   *raftlog.Store
	store *ackingStore
	// drop: Close drops the group's entries from the shared log (Delete).
	drop atomic.Bool

	maxAppend int // raft's MaxAppendEntries
	seq       *sequencer

	lead leaderState

	// throttle is the reassignment throttle SetThrottle last set.
	throttleMu sync.Mutex
	throttle   catchUpThrottle

	// failed is the storage failure that took the replica out (see
	// storageFailed); nil while healthy. Set once, by the FSM goroutine.
	failed    atomic.Pointer[error]
	closed    atomic.Bool
	stop      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

// leaderState is what a leader tracks beyond Raft. Everything in it is reset
// when this replica becomes a ready leader (after a Barrier in a new term).
type leaderState struct {
	mu sync.Mutex
	// barrierTerm is the term whose Barrier is in flight or done; it keeps
	// one term from issuing two. followers belong to it.
	barrierTerm uint64
	// readyTerm is the term in which this replica leads and has applied
	// everything earlier terms committed; 0 when not a ready leader.
	// Produce, Fetch and ListOffsets are refused unless readyTerm != 0.
	readyTerm uint64
	// The provisional offsets of acks=1 (see stored and appliedEntry).
	// pending holds the batch entries of readyTerm stored in the leader's
	// Raft log but not yet applied, in index order; base is the offset the
	// first of them will get (the log end once every earlier entry is
	// applied). Invariant: the first known entries of pending are exact
	// (their record count is certain) and prefixEnd = base + their counts:
	// pending[known], if any, starts at prefixEnd; the offsets of the
	// entries after it are not known until it applies. pendingRecords is
	// the records of all of pending as stored (Status's log end).
	pending        []pendingEntry
	known          int
	base           int64
	prefixEnd      int64
	pendingRecords int64
	// waiters: acks=1 requests waiting for their provisional offset, by
	// request id.
	waiters map[uint64]chan int64
	// followers: progress of each other replica in barrierTerm.
	followers map[metadata.BrokerID]*followerProgress
	// changed is closed and replaced when a follower progresses (only while
	// awaiting > 0, the acks=all requests waiting for copies), the
	// leadership changes or the replica fails.
	changed  chan struct{}
	awaiting int
	// reportedISR is the ISR last passed to OnReport in readyTerm.
	reportedISR []metadata.BrokerID
	// lastRetention is when retention was last checked.
	lastRetention time.Time
	// members is the replica set (nil: Config.Replicas; then each
	// SetReplicas; read through membersLocked): the followers tracked, the ISR's candidates and order,
	// members[0] the preferred leader.
	members []metadata.BrokerID
	// readySince is when readyTerm began; lastTransfer when this leader last
	// tried to hand leadership to the preferred replica.
	readySince, lastTransfer time.Time
}

// pendingEntry is a batch entry of the ready term in the leader's Raft log,
// not yet applied.
type pendingEntry struct {
	index uint64
	count int
	// exact: the entry will append exactly count records (a plain batch,
	// validated before it was proposed). An idempotent batch may apply short
	// (a duplicate, or refused by the producer state), so the offsets after
	// it are known only once it is applied.
	exact bool
	// waiter is the acks=1 request id still to be answered, 0 if none.
	waiter uint64
}

var nextRequestID atomic.Uint64

// Open opens (or creates) the replica's log and Raft group and starts Raft.
// A brand-new group is bootstrapped with cfg.Replicas as voters; every
// replica bootstraps the same configuration, which hashicorp/raft allows.
func Open(cfg Config) (*Replica, error) {
	if err := cfg.Raft.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		return nil, fmt.Errorf("replica %s-%d: no logger", cfg.Topic, cfg.Partition)
	}
	if cfg.ReplicaLagTimeMax <= 0 {
		return nil, fmt.Errorf("replica %s-%d: replica lag time max %v must be positive", cfg.Topic, cfg.Partition, cfg.ReplicaLagTimeMax)
	}
	cfg.Logger = cfg.Logger.With("topic", cfg.Topic, "partition", cfg.Partition)
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("replica dir: %w", err)
	}
	l, err := storage.Open(filepath.Join(cfg.Dir, "log"), storage.Config{SegmentBytes: cfg.TopicConfig.SegmentBytes}, cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("open partition log: %w", err)
	}
	f, err := newFSM(l, cfg.Logger)
	if err != nil {
		l.Close()
		return nil, err
	}
	if cfg.wrapLog != nil {
		f.w = cfg.wrapLog(f.w)
	}
	r := &Replica{cfg: cfg, log: l, fsm: f, seq: newSequencer(maxSequencedProducers), stop: make(chan struct{})}
	f.onApplied = r.appliedEntry
	f.onFail = r.storageFailed
	r.lead.waiters = map[uint64]chan int64{}
	r.lead.changed = make(chan struct{})
	if err := r.startRaft(); err != nil {
		l.Close()
		return nil, err
	}
	r.wg.Add(1)
	go r.tickLoop()
	return r, nil
}

// The files of a replica's Raft state in its directory: raft.db holds the
// log and the stable store (raft-boltdb); stable.db only the stable store,
// when the log is in the broker's shared log.
const (
	boltLogFile    = "raft.db"
	boltStableFile = "stable.db"
)

// openLogStores opens the group's Raft log store and stable store. A group
// keeps the layout it was created with: raft.db (raft-boltdb for both), or
// stable.db with its entries in the broker's shared log (cfg.RaftLog); a
// new group takes cfg.NewRaftLog. The stable store (term, vote) is bolt's
// commit, durable before raft relies on it: in raft.db, in the group's
// stable.db, or (a group with its log in the shared log and no stable.db,
// when the broker has one) in the broker's shared stable store, where the
// elections of many groups share a commit.
func (r *Replica) openLogStores() (raft.LogStore, error) {
	cfg := r.cfg
	_, errBolt := os.Stat(filepath.Join(cfg.Dir, boltLogFile))
	_, errStable := os.Stat(filepath.Join(cfg.Dir, boltStableFile))
	inShared := cfg.Stable != nil && cfg.Stable.Has(GroupName(cfg.Topic, cfg.Partition, cfg.TopicID))
	useWAL := errStable == nil || inShared || (errBolt != nil && cfg.NewRaftLog == RaftLogWAL)
	if errBolt == nil {
		useWAL = false
	}
	if !useWAL {
		bolt, err := OpenBoltStore(filepath.Join(cfg.Dir, boltLogFile))
		if err != nil {
			return nil, fmt.Errorf("open raft log store: %w", err)
		}
		r.bolt, r.stable = bolt, bolt
		return bolt, nil
	}
	if cfg.RaftLog == nil {
		return nil, fmt.Errorf("replica %s-%d: its Raft log is in the broker's shared log (%s), which is not open", cfg.Topic, cfg.Partition, boltStableFile)
	}
	wal, err := cfg.RaftLog.Group(GroupName(cfg.Topic, cfg.Partition, cfg.TopicID))
	if err != nil {
		return nil, fmt.Errorf("open raft log store: %w", err)
	}
	r.wal = wal
	if errStable != nil && cfg.Stable != nil {
		r.shared = cfg.Stable.Group(GroupName(cfg.Topic, cfg.Partition, cfg.TopicID))
		r.stable = r.shared
		return wal, nil
	}
	bolt, err := OpenBoltStore(filepath.Join(cfg.Dir, boltStableFile))
	if err != nil {
		wal.Close()
		return nil, fmt.Errorf("open raft stable store: %w", err)
	}
	r.bolt, r.stable = bolt, bolt
	return wal, nil
}

// closeLogStores closes what openLogStores opened; with drop, the group's
// entries leave the shared log (its partition is deleted).
func (r *Replica) closeLogStores(drop bool) error {
	var err error
	if r.wal != nil {
		if drop {
			err = r.wal.Drop()
		} else {
			err = r.wal.Close()
		}
	}
	if r.shared != nil && drop {
		if e := r.shared.Drop(); e != nil && err == nil {
			err = e
		}
	}
	if r.bolt != nil {
		if e := r.bolt.Close(); e != nil && err == nil {
			err = e
		}
	}
	return err
}

func (r *Replica) startRaft() error {
	cfg := r.cfg
	logs, err := r.openLogStores()
	if err != nil {
		return err
	}
	cache, err := raft.NewLogCache(512, logs)
	if err != nil {
		r.closeLogStores(false)
		return fmt.Errorf("raft log cache: %w", err)
	}
	hlog := hclog.New(&hclog.LoggerOptions{
		Name:   "raft " + GroupName(cfg.Topic, cfg.Partition, cfg.TopicID),
		Level:  hclog.Warn,
		Output: os.Stderr,
	})
	snaps, err := newSnapStore(filepath.Join(cfg.Dir, "snapshots"), 2, cfg.Logger)
	if err != nil {
		r.closeLogStores(false)
		return fmt.Errorf("raft snapshot store: %w", err)
	}
	rc := cfg.Raft.raftConfig(cfg.LocalID)
	rc.Logger = hlog
	normal := raft.ReloadableConfig{TrailingLogs: rc.TrailingLogs, SnapshotInterval: rc.SnapshotInterval,
		SnapshotThreshold: rc.SnapshotThreshold, HeartbeatTimeout: rc.HeartbeatTimeout, ElectionTimeout: rc.ElectionTimeout}
	r.maxAppend = rc.MaxAppendEntries
	r.store = &ackingStore{LogStore: cache, r: r}

	existing, err := raft.HasExistingState(r.store, r.stable, snaps)
	if err != nil {
		r.closeLogStores(false)
		return fmt.Errorf("inspect raft state: %w", err)
	}
	// A new group's first election goes to the preferred replica (the first
	// of the assignment), as Kafka's controller makes it the first leader:
	// the others wait preferredHeadStart times longer before they stand,
	// until a leader is known. Otherwise whoever times out first leads, and
	// PreferredLeaderDelay later hands leadership over in the middle of the
	// topic's first writes.
	headStart := !existing && !cfg.Join && len(cfg.Replicas) > 1 && cfg.Replicas[0] != cfg.LocalID
	if headStart {
		rc.HeartbeatTimeout *= preferredHeadStart
		rc.ElectionTimeout *= preferredHeadStart
	}
	// Until it knows a leader, a group's candidate waits at least
	// firstElectionTimeout for votes before it starts again with a higher
	// term. When a broker opens a thousand groups, their first elections
	// run together and a vote's answer can take longer than the configured
	// 500 ms: with it, 1,000 partitions (RF 3) on 3 brokers restarted
	// elections for minutes and never all had a leader; with 3 s every
	// partition had one after 16.5 s (ARCHITECTURE.md "Cost as partitions
	// grow"). Once a leader is known the configured timeouts return, so a
	// failover later is as fast as before.
	slowStart := len(cfg.Replicas) > 1 && rc.ElectionTimeout < firstElectionTimeout
	if slowStart {
		rc.ElectionTimeout = firstElectionTimeout
	}
	if !existing && !cfg.Join {
		var servers []raft.Server
		for _, id := range cfg.Replicas {
			servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: ServerID(id), Address: raft.ServerAddress(ServerID(id))})
		}
		if err := raft.BootstrapCluster(rc, r.store, r.stable, snaps, cfg.Transport, raft.Configuration{Servers: servers}); err != nil {
			r.closeLogStores(false)
			return fmt.Errorf("bootstrap raft group: %w", err)
		}
	}
	cfg.Transport.SetAppendObserver(r.observeAppend)
	ra, err := raft.NewRaft(rc, r.fsm, r.store, r.stable, snaps, cfg.Transport)
	if err != nil {
		r.closeLogStores(false)
		return fmt.Errorf("start raft: %w", err)
	}
	r.raft = ra
	if cfg.Observer != nil {
		ra.RegisterObserver(cfg.Observer)
	}
	if headStart || slowStart {
		r.wg.Add(1)
		go r.endHeadStart(normal)
	}
	return nil
}

// firstElectionTimeout is the least election timeout of a group that has
// not seen a leader since it was opened (see startRaft).
const firstElectionTimeout = 3 * time.Second

// headStartPoll is how often a group still on its first-election timeouts
// checks for a leader: a thousand groups opening at once wake 10,000 times
// a second in all at 100 ms (they woke 50,000 times at 20 ms).
const headStartPoll = 100 * time.Millisecond

// preferredHeadStart is how many times longer than configured the
// non-preferred replicas of a new group wait before their first election.
const preferredHeadStart = 3

// endHeadStart restores the configured timeouts once the group has a
// leader (or the replica closes).
func (r *Replica) endHeadStart(normal raft.ReloadableConfig) {
	defer r.wg.Done()
	t := time.NewTicker(headStartPoll)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		if _, id := r.raft.LeaderWithID(); id != "" {
			if err := r.raft.ReloadConfig(normal); err != nil {
				r.cfg.Logger.Warn("restoring raft timeouts after the first election", "err", err)
			}
			return
		}
	}
}

// Raft returns the replica's Raft instance (for the broker's observer).
func (r *Replica) Raft() *raft.Raft { return r.raft }

// Config returns the configuration the replica was opened with.
func (r *Replica) Config() Config { return r.cfg }

// Close stops Raft and closes the log. The transport is closed first so
// that Raft's shutdown cannot hang on an unreachable peer.
func (r *Replica) Close() error {
	var err error
	r.closeOnce.Do(func() {
		r.closed.Store(true)
		close(r.stop)
		r.wg.Wait()
		if r.cfg.Observer != nil {
			r.raft.DeregisterObserver(r.cfg.Observer)
		}
		_ = r.cfg.Transport.Close()
		if e := r.raft.Shutdown().Error(); e != nil {
			err = fmt.Errorf("raft shutdown: %w", e)
		}
		if e := r.closeLogStores(r.drop.Load()); e != nil && err == nil {
			err = fmt.Errorf("close raft log: %w", e)
		}
		if e := r.log.Close(); e != nil && err == nil {
			err = fmt.Errorf("close partition log: %w", e)
		}
	})
	return err
}

// Delete closes the replica and removes its data (the topic was deleted).
func (r *Replica) Delete() error {
	r.drop.Store(true)
	err := r.Close()
	if e := os.RemoveAll(r.cfg.Dir); e != nil && err == nil {
		err = fmt.Errorf("remove replica dir: %w", e)
	}
	return err
}

// CheckLeadership reacts to a Raft state change: a new leader issues a
// Barrier (so that everything earlier terms committed is applied) before it
// serves anything; a replica that stopped leading drops its leader state.
// The broker calls it from its observer goroutine; it does not block.
func (r *Replica) CheckLeadership() {
	if r.closed.Load() || r.failed.Load() != nil {
		return
	}
	if r.raft.State() != raft.Leader {
		r.lead.mu.Lock()
		r.stopLeadingLocked()
		r.lead.mu.Unlock()
		return
	}
	term := r.raft.CurrentTerm()
	r.lead.mu.Lock()
	if r.lead.barrierTerm == term {
		r.lead.mu.Unlock()
		return
	}
	r.lead.barrierTerm = term
	r.lead.readyTerm = 0
	r.startProgressLocked()
	r.lead.mu.Unlock()
	r.wg.Add(1)
	go r.becomeReady(term)
}

// stopLeadingLocked drops the leader state: requests waiting for copies
// are woken and answer. Caller holds lead.mu.
func (r *Replica) stopLeadingLocked() {
	if r.lead.readyTerm != 0 || r.lead.barrierTerm != 0 {
		r.signalLocked()
	}
	r.lead.readyTerm = 0
	r.lead.barrierTerm = 0
	r.lead.pending = nil
}

func (r *Replica) becomeReady(term uint64) {
	defer r.wg.Done()
	err := waitFuture(r.stopContext(10*time.Second), r.raft.Barrier(10*time.Second))
	var previous []metadata.BrokerID
	if err == nil && r.cfg.PreviousISR != nil {
		previous = r.cfg.PreviousISR()
	}
	r.lead.mu.Lock()
	if err != nil || r.raft.CurrentTerm() != term || r.raft.State() != raft.Leader || r.closed.Load() || r.failed.Load() != nil || r.lead.barrierTerm != term {
		if r.lead.barrierTerm == term {
			r.lead.barrierTerm = 0 // let the next check try again
		}
		r.lead.mu.Unlock()
		if err != nil && !r.closed.Load() {
			r.cfg.Logger.Warn("leader barrier failed", "term", term, "err", err)
		}
		return
	}
	now := time.Now()
	r.lead.readyTerm = term
	r.lead.readySince = now
	r.lead.pending, r.lead.known, r.lead.pendingRecords = nil, 0, 0
	r.lead.base = r.log.EndOffset()
	r.lead.prefixEnd = r.lead.base
	r.graceLocked(now, previous)
	isr := r.isrLocked(now)
	r.lead.reportedISR = isr
	r.lead.mu.Unlock()
	r.cfg.Logger.Info("leading", "epoch", term, "log_end", r.log.EndOffset(), "isr", isr, "previous_isr", previous)
	r.report(term, isr)
}

func (r *Replica) report(term uint64, isr []metadata.BrokerID) {
	if r.cfg.OnReport == nil {
		return
	}
	r.cfg.OnReport(Report{Topic: r.cfg.Topic, TopicID: r.cfg.TopicID, Partition: r.cfg.Partition,
		Leader: r.cfg.LocalID, Epoch: int64(term), ISR: isr})
}

// stopContext returns a context cancelled by Close or after d.
func (r *Replica) stopContext(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	go func() {
		select {
		case <-r.stop:
		case <-ctx.Done():
		}
		cancel()
	}()
	return ctx
}

// tickLoop re-checks leadership (observations may be dropped), the ISR and
// retention once a second. Every replica's ticks fall on the whole second
// of the clock, so that an idle broker's hundreds of replicas wake together
// (one timer wake-up of the process for all of them) instead of each at its
// own moment.
func (r *Replica) tickLoop() {
	defer r.wg.Done()
	next := time.NewTimer(untilNextSecond(time.Now()))
	defer next.Stop()
	for {
		select {
		case <-r.stop:
			return
		case now := <-next.C:
			r.CheckLeadership()
			r.tick(now)
			next.Reset(untilNextSecond(time.Now()))
		}
	}
}

// untilNextSecond is how long from now to the clock's next whole second.
func untilNextSecond(now time.Time) time.Duration {
	return now.Truncate(time.Second).Add(time.Second).Sub(now)
}

func (r *Replica) tick(now time.Time) {
	r.lead.mu.Lock()
	term := r.lead.readyTerm
	if term == 0 {
		r.lead.mu.Unlock()
		return
	}
	isr := r.isrLocked(now)
	changed := !slices.Equal(isr, r.lead.reportedISR)
	if changed {
		r.cfg.Logger.Info("ISR changed", "epoch", term, "from", r.lead.reportedISR, "to", isr)
		r.lead.reportedISR = isr
	}
	checkRetention := now.Sub(r.lead.lastRetention) >= r.cfg.RetentionCheckInterval
	if checkRetention {
		r.lead.lastRetention = now
	}
	preferred, transfer := r.preferredLeaderLocked(now, isr)
	r.lead.mu.Unlock()
	if changed {
		r.report(term, isr)
	}
	if checkRetention {
		r.applyRetention(now)
	}
	if transfer {
		r.cfg.Logger.Info("handing leadership to the preferred replica", "epoch", term, "to", preferred)
		go r.raft.LeadershipTransferToServer(ServerID(preferred), raft.ServerAddress(ServerID(preferred)))
	}
}

// preferredLeaderLocked decides whether this leader hands leadership back to
// the preferred replica (the first of the assignment), as Kafka's
// auto.leader.rebalance does: only when that replica is in the ISR, holds
// the leader's whole log, and this leader has led for PreferredLeaderDelay;
// at most once per PreferredLeaderDelay. Raft alone would leave the
// leaders wherever elections put them. Caller holds lead.mu.
func (r *Replica) preferredLeaderLocked(now time.Time, isr []metadata.BrokerID) (metadata.BrokerID, bool) {
	if r.cfg.PreferredLeaderDelay <= 0 || len(r.membersLocked()) < 2 {
		return 0, false
	}
	pref := r.membersLocked()[0]
	if pref == r.cfg.LocalID || now.Sub(r.lead.readySince) < r.cfg.PreferredLeaderDelay || now.Sub(r.lead.lastTransfer) < r.cfg.PreferredLeaderDelay {
		return 0, false
	}
	f := r.lead.followers[pref]
	if f == nil || !slices.Contains(isr, pref) || f.match < r.raft.LastIndex() {
		return 0, false
	}
	r.lead.lastTransfer = now
	return pref, true
}

// applyRetention proposes DeleteBefore when retention would delete segments;
// every replica then deletes the same ones when it applies the entry.
func (r *Replica) applyRetention(now time.Time) {
	tc := r.cfg.TopicConfig
	point, ok := r.log.RetentionPoint(now, tc.RetentionMs, tc.RetentionBytes)
	if !ok || point <= r.log.StartOffset() {
		return
	}
	r.cfg.Logger.Info("retention", "new_log_start", point)
	r.raft.Apply(encodeDeleteBeforeCmd(point), 5*time.Second) // outcome is seen in the log; a lost leader retries next tick
}

// ISR returns the in-sync replicas as this leader computes them, or nil when
// it is not a ready leader.
func (r *Replica) ISR() []metadata.BrokerID {
	r.lead.mu.Lock()
	defer r.lead.mu.Unlock()
	if r.lead.readyTerm == 0 {
		return nil
	}
	return r.isrLocked(time.Now())
}

// ackingStore wraps the Raft log store. On the leader, storing a batch entry
// of the ready term is the moment acks=1 is answered: the record is in the
// leader's own Raft log, before any follower has it.
type ackingStore struct {
	raft.LogStore
	r *Replica
}

func (s *ackingStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s *ackingStore) StoreLogs(logs []*raft.Log) error {
	if err := s.LogStore.StoreLogs(logs); err != nil {
		return err
	}
	s.r.stored(logs)
	return nil
}

// stored runs on Raft's leader (or follower) goroutine after entries reached
// the local Raft log. On the ready leader each batch entry of its term joins
// pending, and an acks=1 request waiting for it is answered with its offset
// as soon as that is certain: at once, unless an earlier pending entry may
// apply short (then when that one applies, see appliedEntry).
func (r *Replica) stored(logs []*raft.Log) {
	r.lead.mu.Lock()
	defer r.lead.mu.Unlock()
	if r.lead.readyTerm == 0 {
		return
	}
	for _, l := range logs {
		if l.Type != raft.LogCommand || l.Term != r.lead.readyTerm {
			continue
		}
		id, count, exact, ok := peekBatchCmd(l.Data)
		if !ok {
			continue
		}
		r.lead.pending = append(r.lead.pending, pendingEntry{index: l.Index, count: count, exact: exact, waiter: id})
		r.lead.pendingRecords += int64(count)
		if r.lead.known == len(r.lead.pending)-1 {
			r.settleLocked()
		}
	}
}

// appliedEntry is the FSM's word (on its goroutine) that the batch entry at
// index of term appended appended records: pending drops it and the offsets
// after it become known.
func (r *Replica) appliedEntry(term, index uint64, appended int) {
	r.lead.mu.Lock()
	defer r.lead.mu.Unlock()
	if r.lead.readyTerm == 0 || term != r.lead.readyTerm {
		return
	}
	for len(r.lead.pending) > 0 && r.lead.pending[0].index <= index {
		p := r.lead.pending[0]
		r.lead.pending = r.lead.pending[1:]
		r.lead.pendingRecords -= int64(p.count)
		if p.index == index {
			r.lead.base += int64(appended)
		} else {
			r.lead.base += int64(p.count) // not reported (cannot happen): as stored
		}
		if r.lead.known > 0 {
			r.lead.known--
			continue
		}
		r.lead.prefixEnd = r.lead.base
		r.settleLocked()
	}
	if len(r.lead.pending) == 0 {
		r.lead.pending = nil // let the backing array go
	}
}

// settleLocked extends the known prefix of pending as far as it can,
// answering each acks=1 waiter whose offset is now certain. Each entry is
// passed once. Caller holds lead.mu.
func (r *Replica) settleLocked() {
	for r.lead.known < len(r.lead.pending) {
		p := &r.lead.pending[r.lead.known]
		if p.waiter != 0 {
			if ch, ok := r.lead.waiters[p.waiter]; ok {
				ch <- r.lead.prefixEnd
				delete(r.lead.waiters, p.waiter)
			}
			p.waiter = 0
		}
		if !p.exact {
			return
		}
		r.lead.prefixEnd += int64(p.count)
		r.lead.known++
	}
}

// waitFuture waits for a Raft future, bounded by ctx: hashicorp/raft's
// futures can wait forever when quorum is lost.
func waitFuture(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// isLeadershipErr reports the Raft errors after which the entry may or may
// not be committed later.
func isLeadershipErr(err error) bool {
	return errors.Is(err, raft.ErrLeadershipLost)
}

// StandFor is the replica that stands for election when leader's process
// is known to be gone: the first replica in assignment order other than
// leader. Every survivor applies the same rule, so exactly one stands and
// the others vote for it.
func StandFor(replicas []metadata.BrokerID, leader metadata.BrokerID) metadata.BrokerID {
	for _, id := range replicas {
		if id != leader {
			return id
		}
	}
	return -1
}

// CandidateAfterCrash is called when broker dead refuses connections (its
// process is gone). If dead leads this partition and this replica is the
// one StandFor chooses, it becomes a candidate at once instead of waiting
// for Raft's heartbeat timeout. A paused or partitioned leader still
// accepts or hangs connections, so it is deposed by the timeouts as usual.
// It reports whether an election was started.
func (r *Replica) CandidateAfterCrash(dead metadata.BrokerID) bool {
	if r.closed.Load() || r.raft.State() != raft.Follower {
		return false
	}
	if _, id := r.raft.LeaderWithID(); id == "" || BrokerOf(id) != dead {
		return false
	}
	if StandFor(r.voters(), dead) != r.cfg.LocalID {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := r.cfg.Transport.TriggerElection(ctx, ServerID(dead)); err != nil {
		r.cfg.Logger.Warn("could not start an election after the leader crashed", "leader", dead, "err", err)
		return false
	}
	r.cfg.Logger.Info("leader's broker is gone: standing for election", "dead_leader", dead)
	return true
}
