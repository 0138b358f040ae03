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
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/tapes-dev/tapes/internal/metadata"
	"github.com/tapes-dev/tapes/internal/storage"
)

// Replica is one partition replica. Its methods are safe for concurrent use.
type Replica struct {
	cfg   Config
	log   *storage.Log
	fsm   *fsm
	raft  *raft.Raft
	bolt  *raftboltdb.BoltStore
	store *ackingStore

	maxAppend int // raft's MaxAppendEntries
	seq       *sequencer

	lead leaderState

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
	// one term from issuing two.
	barrierTerm uint64
	// readyTerm is the term in which this replica leads and has applied
	// everything earlier terms committed; 0 when not a ready leader.
	// Produce, Fetch and ListOffsets are refused unless readyTerm != 0.
	readyTerm uint64
	// nextOffset is the offset the next batch entry this leader writes to
	// its Raft log will get when applied (acks=1's provisional offset).
	// Invariant while readyTerm != 0: EndOffset of the log plus the records
	// of every batch entry of readyTerm stored but not yet applied.
	nextOffset int64
	// waiters: acks=1 requests waiting for their entry to reach the local
	// Raft log, by request id.
	waiters map[uint64]chan int64
	// followers: progress of each other replica, valid while readyTerm != 0.
	followers map[metadata.BrokerID]*followerProgress
	// reportedISR is the ISR last passed to OnReport in readyTerm.
	reportedISR []metadata.BrokerID
	// lastRetention is when retention was last checked.
	lastRetention time.Time
	// readySince is when readyTerm began; lastTransfer when this leader last
	// tried to hand leadership to the preferred replica.
	readySince, lastTransfer time.Time
}

// followerProgress is a follower's log progress as the leader sees it from
// its AppendEntries answers (hashicorp/raft exposes none).
type followerProgress struct {
	// match is the highest Raft index the follower is known to store.
	// Invariant: only grows within a leadership term.
	match uint64
	// lastCaughtUp is the last time the follower's log reached the leader's
	// log end (or the start of this leadership). The follower is in the ISR
	// while now - lastCaughtUp <= ReplicaLagTimeMax.
	lastCaughtUp time.Time
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
	r := &Replica{cfg: cfg, log: l, fsm: f, seq: newSequencer(), stop: make(chan struct{})}
	f.onShort = r.shortEntry
	r.lead.waiters = map[uint64]chan int64{}
	if err := r.startRaft(); err != nil {
		l.Close()
		return nil, err
	}
	r.wg.Add(1)
	go r.tickLoop()
	return r, nil
}

func (r *Replica) startRaft() error {
	cfg := r.cfg
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(cfg.Dir, "raft.db")})
	if err != nil {
		return fmt.Errorf("open raft log store: %w", err)
	}
	cache, err := raft.NewLogCache(512, bolt)
	if err != nil {
		bolt.Close()
		return fmt.Errorf("raft log cache: %w", err)
	}
	hlog := hclog.New(&hclog.LoggerOptions{
		Name:   "raft " + GroupName(cfg.Topic, cfg.Partition, cfg.TopicID),
		Level:  hclog.Warn,
		Output: os.Stderr,
	})
	snaps, err := newSnapStore(filepath.Join(cfg.Dir, "snapshots"), 2, cfg.Logger)
	if err != nil {
		bolt.Close()
		return fmt.Errorf("raft snapshot store: %w", err)
	}
	rc := cfg.Raft.raftConfig(cfg.LocalID)
	rc.Logger = hlog
	normal := raft.ReloadableConfig{TrailingLogs: rc.TrailingLogs, SnapshotInterval: rc.SnapshotInterval,
		SnapshotThreshold: rc.SnapshotThreshold, HeartbeatTimeout: rc.HeartbeatTimeout, ElectionTimeout: rc.ElectionTimeout}
	r.maxAppend = rc.MaxAppendEntries
	r.store = &ackingStore{LogStore: cache, r: r}
	r.bolt = bolt

	existing, err := raft.HasExistingState(r.store, bolt, snaps)
	if err != nil {
		bolt.Close()
		return fmt.Errorf("inspect raft state: %w", err)
	}
	// A new group's first election goes to the preferred replica (the first
	// of the assignment), as Kafka's controller makes it the first leader:
	// the others wait preferredHeadStart times longer before they stand,
	// until a leader is known. Otherwise whoever times out first leads, and
	// PreferredLeaderDelay later hands leadership over in the middle of the
	// topic's first writes.
	headStart := !existing && len(cfg.Replicas) > 1 && cfg.Replicas[0] != cfg.LocalID
	if headStart {
		rc.HeartbeatTimeout *= preferredHeadStart
		rc.ElectionTimeout *= preferredHeadStart
	}
	if !existing {
		var servers []raft.Server
		for _, id := range cfg.Replicas {
			servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: ServerID(id), Address: raft.ServerAddress(ServerID(id))})
		}
		if err := raft.BootstrapCluster(rc, r.store, bolt, snaps, cfg.Transport, raft.Configuration{Servers: servers}); err != nil {
			bolt.Close()
			return fmt.Errorf("bootstrap raft group: %w", err)
		}
	}
	cfg.Transport.SetAppendObserver(r.observeAppend)
	ra, err := raft.NewRaft(rc, r.fsm, r.store, bolt, snaps, cfg.Transport)
	if err != nil {
		bolt.Close()
		return fmt.Errorf("start raft: %w", err)
	}
	r.raft = ra
	if cfg.Observer != nil {
		ra.RegisterObserver(cfg.Observer)
	}
	if headStart {
		r.wg.Add(1)
		go r.endHeadStart(normal)
	}
	return nil
}

// preferredHeadStart is how many times longer than configured the
// non-preferred replicas of a new group wait before their first election.
const preferredHeadStart = 3

// endHeadStart restores the configured timeouts once the group has a
// leader (or the replica closes).
func (r *Replica) endHeadStart(normal raft.ReloadableConfig) {
	defer r.wg.Done()
	t := time.NewTicker(20 * time.Millisecond)
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
		if e := r.bolt.Close(); e != nil && err == nil {
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
	if r.closed.Load() {
		return
	}
	if r.raft.State() != raft.Leader {
		r.lead.mu.Lock()
		r.lead.readyTerm = 0
		r.lead.barrierTerm = 0
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
	r.lead.mu.Unlock()
	r.wg.Add(1)
	go r.becomeReady(term)
}

func (r *Replica) becomeReady(term uint64) {
	defer r.wg.Done()
	err := waitFuture(r.stopContext(10*time.Second), r.raft.Barrier(10*time.Second))
	r.lead.mu.Lock()
	if err != nil || r.raft.CurrentTerm() != term || r.raft.State() != raft.Leader || r.closed.Load() {
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
	r.lead.nextOffset = r.log.EndOffset()
	r.lead.followers = map[metadata.BrokerID]*followerProgress{}
	for _, id := range r.cfg.Replicas {
		if id != r.cfg.LocalID {
			r.lead.followers[id] = &followerProgress{lastCaughtUp: now}
		}
	}
	isr := r.isrLocked(now)
	r.lead.reportedISR = isr
	r.lead.mu.Unlock()
	r.cfg.Logger.Info("leading", "epoch", term, "log_end", r.log.EndOffset(), "isr", isr)
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
// retention once a second.
func (r *Replica) tickLoop() {
	defer r.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case now := <-t.C:
			r.CheckLeadership()
			r.tick(now)
		}
	}
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
	if r.cfg.PreferredLeaderDelay <= 0 || len(r.cfg.Replicas) < 2 {
		return 0, false
	}
	pref := r.cfg.Replicas[0]
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

// isrLocked: the leader, and every follower that caught up within
// ReplicaLagTimeMax, in assignment order. Caller holds lead.mu.
func (r *Replica) isrLocked(now time.Time) []metadata.BrokerID {
	isr := make([]metadata.BrokerID, 0, len(r.cfg.Replicas))
	for _, id := range r.cfg.Replicas {
		if id == r.cfg.LocalID {
			isr = append(isr, id)
			continue
		}
		if f := r.lead.followers[id]; f != nil && now.Sub(f.lastCaughtUp) <= r.cfg.ReplicaLagTimeMax {
			isr = append(isr, id)
		}
	}
	return isr
}

// observeAppend records a follower's answer to AppendEntries. A follower has
// caught up as of sentAt when the request carried the leader's whole tail:
// fewer entries than MaxAppendEntries (hashicorp/raft sends everything up to
// its last index, capped there), or its match reaches the current last index.
func (r *Replica) observeAppend(peer raft.ServerID, req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse, sentAt time.Time) {
	if !resp.Success {
		return
	}
	match := req.PrevLogEntry + uint64(len(req.Entries))
	id := BrokerOf(peer)
	r.lead.mu.Lock()
	defer r.lead.mu.Unlock()
	if r.lead.readyTerm == 0 || req.Term != r.lead.readyTerm {
		return
	}
	f := r.lead.followers[id]
	if f == nil {
		return
	}
	if match > f.match {
		f.match = match
	}
	if len(req.Entries) < r.maxAppend || match >= r.raft.LastIndex() {
		if sentAt.After(f.lastCaughtUp) {
			f.lastCaughtUp = sentAt
		}
	}
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
// the local Raft log.
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
		id, count, ok := peekBatchCmd(l.Data)
		if !ok {
			continue
		}
		base := r.lead.nextOffset
		r.lead.nextOffset += int64(count)
		if ch, ok := r.lead.waiters[id]; ok {
			ch <- base
			delete(r.lead.waiters, id)
		}
	}
}

// shortEntry corrects the provisional next offset when a batch entry this
// leader counted appended fewer records (a deduplicated or refused batch).
func (r *Replica) shortEntry(term uint64, missing int) {
	r.lead.mu.Lock()
	if r.lead.readyTerm != 0 && term == r.lead.readyTerm {
		r.lead.nextOffset -= int64(missing)
	}
	r.lead.mu.Unlock()
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
	if StandFor(r.cfg.Replicas, dead) != r.cfg.LocalID {
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
