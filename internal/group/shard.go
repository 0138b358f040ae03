package group

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tapes-dev/tapes/internal/assign"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// writeTimeout bounds a write the coordinator makes on its own behalf (a
// generation's assignment, a group becoming empty), independent of the
// request that caused it.
const writeTimeout = 10 * time.Second

// shard is the coordinator's state for one __consumer_offsets partition it
// leads in one Raft term.
type shard struct {
	c    *Coordinator
	p    int32
	term uint64
	log  Log

	// ready is closed when load finished; err is its outcome (read only
	// after ready is closed).
	ready chan struct{}
	err   error
	// done is closed by close: waiting calls answer NOT_COORDINATOR.
	done      chan struct{}
	closeOnce sync.Once

	// writes orders appends against compaction: append holds it shared
	// for the whole write, compact holds it exclusively, so no write of
	// this shard is in flight between compact's read of the partition and
	// its DeleteRecords (which would otherwise delete a commit compact did
	// not see).
	writes sync.RWMutex

	mu sync.Mutex
	// groups: every group with members or committed offsets in this
	// partition. Guarded by mu, as is everything inside each group.
	groups map[string]*group
	// sched counts the partition's records from its log start (load and
	// compact count them, every committed write adds) and says when to
	// compact it (compactlog.go).
	sched CompactSchedule
	// epochs: the newest epoch of each producer seen in the partition (its
	// markers and transactional commits); an older one is fenced. tailAt:
	// the offset the next tail reads from (txn.go). Guarded by mu.
	epochs map[int64]int16
	tailAt int64

	// tailMu runs tails one at a time; tailing is set while maybeTail's
	// runs.
	tailMu  sync.Mutex
	tailing atomic.Bool
}

func newShard(c *Coordinator, p int32, term uint64, l Log) *shard {
	return &shard{c: c, p: p, term: term, log: l, ready: make(chan struct{}), done: make(chan struct{}), groups: map[string]*group{},
		epochs: map[int64]int16{}}
}

// close ends the shard (leadership moved): waiting calls are answered
// NOT_COORDINATOR through done.
func (s *shard) close() {
	s.closeOnce.Do(func() { close(s.done) })
}

// failed reports whether the load finished with an error (the shard is then
// replaced by the next call).
func (s *shard) failed() bool {
	select {
	case <-s.ready:
		return s.err != nil
	default:
		return false
	}
}

// context returns a context that ends after timeout or when the shard
// closes, whichever comes first.
func (s *shard) context(timeout time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	go func() {
		select {
		case <-s.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// load rebuilds the partition's groups and offsets from its log.
func (s *shard) load() {
	defer close(s.ready)
	start := time.Now()
	ctx, cancel := s.context(time.Minute)
	defer cancel()
	groupGen := map[string]int32{}
	now := s.c.cfg.Now()
	n, end, err := s.scan(ctx, 0, func(_ Record, d decoded) {
		s.mu.Lock()
		defer s.mu.Unlock()
		switch {
		case d.marker != nil:
			s.applyMarker(d.marker, d.at)
			return
		case d.key.Kind == kindTxnOffset:
			s.applyTxnRecord(d)
			return
		}
		g := s.groups[d.key.Group]
		if g == nil {
			g = newGroup(d.key.Group)
			s.groups[d.key.Group] = g
		}
		switch {
		case d.offset != nil:
			g.offsets[assign.TopicPartition{Topic: d.key.Topic, Partition: d.key.Partition}] =
				committed{offset: d.offset.Offset, metadata: d.offset.Metadata, timestamp: d.offset.CommitTimestampMs}
		case d.group != nil:
			if last, ok := groupGen[g.id]; ok && d.group.GenerationId < last {
				return
			}
			groupGen[g.id] = d.group.GenerationId
			g.restore(d.group, now)
		}
	})
	if err != nil {
		s.err = err
		return
	}
	s.mu.Lock()
	s.tailAt = end
	s.sched.Loaded(int64(n), s.c.cfg.CompactAfter)
	s.mu.Unlock()
	s.c.log.Info("coordinator loaded", "partition", s.p, "epoch", s.term, "groups", len(s.groups), "records", n, "took", time.Since(start).Round(time.Millisecond))
}

// scan reads the partition from offset from (its log start, if later) up
// to its high watermark when scan began and calls fn, in order, with every
// record and marker it can decode (the record as read, and decoded). It
// returns how many entries it read, decodable or not, and the offset after
// the last.
func (s *shard) scan(ctx context.Context, from int64, fn func(Record, decoded)) (n int, end int64, err error) {
	return s.scanRaw(ctx, from, func(r Record) {
		d, err := decodeRecord(r)
		if err != nil {
			s.c.log.Warn("skipping an undecodable record", "partition", s.p, "offset", r.Offset, "err", err)
			return
		}
		fn(r, d)
	})
}

// scanRaw is scan without decoding: fn gets every entry as read.
func (s *shard) scanRaw(ctx context.Context, from int64, fn func(Record)) (n int, end int64, err error) {
	n, end, err = ScanLog(ctx, s.log, from, fn)
	if err != nil {
		err = fmt.Errorf("read %s-%d %w", OffsetsTopic, s.p, err)
	}
	return n, end, err
}

// group returns the group (creating it Empty when create is set). Caller
// holds s.mu.
func (s *shard) group(id string, create bool) *group {
	g := s.groups[id]
	if g == nil && create {
		g = newGroup(id)
		s.groups[id] = g
	}
	return g
}

// live checks, under s.mu, that this shard still coordinates.
func (s *shard) live(groupID string) error {
	select {
	case <-s.done:
		return s.c.notCoordinator(groupID, s.p)
	default:
	}
	if s.log.Term() != s.term {
		return s.c.notCoordinator(groupID, s.p)
	}
	return nil
}

// join registers a JoinGroup. It returns a response right away (resp) or
// an error, or a channel that the completed rebalance answers.
func (s *shard) join(req *tapesv1.JoinGroupRequest, host string, session, rebalance time.Duration) (chan joinOutcome, *tapesv1.JoinGroupResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.live(req.GroupId); err != nil {
		return nil, nil, err
	}
	now := s.c.cfg.Now()
	g := s.group(req.GroupId, true)
	if g.state == Dead {
		return nil, nil, kerr.New(kerr.CoordinatorNotAvailable, "group %s is being removed", g.id)
	}
	if len(g.members) > 0 && req.ProtocolType != g.protocolType {
		return nil, nil, kerr.New(kerr.InconsistentGroupProtocol, "group %s has protocol type %q; the member's is %q",
			g.id, g.protocolType, req.ProtocolType)
	}
	if !g.supportsProtocols(req.ProtocolType, req.Protocols) {
		return nil, nil, kerr.New(kerr.InconsistentGroupProtocol, "group %s (protocol type %q, protocol %q) has no protocol every member supports among the member's %s",
			g.id, g.protocolType, g.protocol, protocolNames(req.Protocols))
	}
	m, known := g.members[req.MemberId]
	switch {
	case req.MemberId == "" && !req.AssignMemberId:
		id := newMemberID(req.ClientId)
		g.pending[id] = now.Add(session)
		e := kerr.New(kerr.MemberIDRequired, "join group %s again with member id %s", g.id, id)
		e.Detail.MemberId = id
		return nil, nil, e
	case req.MemberId == "": // Kafka's JoinGroup v0-v3: joins at once
		m = &member{id: newMemberID(req.ClientId)}
	case !known:
		if _, ok := g.pending[req.MemberId]; !ok {
			return nil, nil, kerr.New(kerr.UnknownMemberID, "member %s is not in group %s (generation %d)", req.MemberId, g.id, g.generation)
		}
		delete(g.pending, req.MemberId)
		m = &member{id: req.MemberId}
	}
	changed := !known || !sameProtocols(m.protocols, req.Protocols)
	m.clientID, m.host, m.sessionTimeout, m.rebalanceTimeout = req.ClientId, host, session, rebalance
	m.protocols = req.Protocols
	m.deadline = now.Add(session)
	if !known {
		if len(g.members) == 0 {
			g.protocolType = req.ProtocolType
		}
		g.members[m.id] = m
		if g.leader == "" {
			g.leader = m.id
		}
	}
	switch g.state {
	case Stable, CompletingRebalance:
		// A rejoin that changes nothing is answered with the current
		// generation, except from a Stable group's leader (Kafka: the
		// leader rejoining means it wants a new assignment).
		if !changed && (g.state == CompletingRebalance || m.id != g.leader) {
			return nil, g.currentJoin(m), nil
		}
		g.prepareRebalance(now, s.c.cfg.InitialRebalanceDelay)
	case Empty:
		g.prepareRebalance(now, s.c.cfg.InitialRebalanceDelay)
	}
	if m.join != nil {
		m.join <- joinOutcome{err: kerr.New(kerr.RebalanceInProgress, "superseded by a newer JoinGroup of member %s", m.id)}
	}
	ch := make(chan joinOutcome, 1)
	m.join = ch
	if g.readyToCompleteJoin(now) {
		s.completeJoin(g, now)
	}
	return ch, nil, nil
}

func protocolNames(ps []*tapesv1.JoinGroupProtocol) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.GetName())
	}
	return out
}

// completeJoin completes g's join phase; an emptied group is persisted.
// Caller holds s.mu.
func (s *shard) completeJoin(g *group, now time.Time) {
	if g.completeJoin(now) {
		s.persistAsync(g.id, g.value(nil))
	}
	s.c.log.Info("group join completed", "group", g.id, "generation", g.generation, "members", len(g.members), "leader", g.leader, "protocol", g.protocol)
}

// persistAsync appends a group record on the coordinator's own behalf.
func (s *shard) persistAsync(groupID string, v *tapesv1.GroupValue) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
		defer cancel()
		if err := s.append(ctx, []Record{groupRecord(groupID, v)}); err != nil {
			s.c.log.Warn("could not persist group", "group", groupID, "generation", v.GenerationId, "err", err)
		}
	}()
}

// append writes recs while this shard still coordinates; a lost leadership
// is NOT_COORDINATOR (the write's outcome is then unknown, as Kafka's).
func (s *shard) append(ctx context.Context, recs []Record) error {
	_, err := s.appendAt(ctx, recs)
	return err
}

// appendAt is append that returns the offset of the first record.
func (s *shard) appendAt(ctx context.Context, recs []Record) (int64, error) {
	s.writes.RLock()
	defer s.writes.RUnlock()
	return s.write(ctx, recs)
}

// write appends recs and counts them; the caller holds s.writes (shared
// or exclusive). It returns the offset of the first record.
func (s *shard) write(ctx context.Context, recs []Record) (int64, error) {
	if s.log.Term() != s.term {
		return 0, kerr.New(kerr.NotCoordinator, "broker %d no longer leads %s-%d", s.c.cfg.BrokerID, OffsetsTopic, s.p)
	}
	base, err := s.log.Append(ctx, recs)
	if kerr.Is(err, kerr.NotLeaderOrFollower) || kerr.Is(err, kerr.LeaderNotAvailable) || s.log.Term() != s.term {
		return 0, kerr.New(kerr.NotCoordinator, "broker %d lost the leadership of %s-%d while writing: %v", s.c.cfg.BrokerID, OffsetsTopic, s.p, err)
	}
	if err != nil {
		return 0, fmt.Errorf("write to %s-%d: %w", OffsetsTopic, s.p, err)
	}
	s.sched.Wrote(len(recs))
	return base, nil
}

// sync registers a SyncGroup and returns the channel that answers it.
func (s *shard) sync(req *tapesv1.SyncGroupRequest) (chan syncOutcome, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.live(req.GroupId); err != nil {
		return nil, err
	}
	g := s.group(req.GroupId, false)
	if g == nil {
		return nil, kerr.New(kerr.UnknownMemberID, "group %s has no member %s", req.GroupId, req.MemberId)
	}
	m, ok := g.members[req.MemberId]
	if !ok {
		return nil, kerr.New(kerr.UnknownMemberID, "member %s is not in group %s", req.MemberId, g.id)
	}
	if req.GenerationId != g.generation {
		return nil, kerr.New(kerr.IllegalGeneration, "sync of member %s with generation %d; group %s is at %d", m.id, req.GenerationId, g.id, g.generation)
	}
	if (req.ProtocolType != "" && req.ProtocolType != g.protocolType) || (req.ProtocolName != "" && req.ProtocolName != g.protocol) {
		return nil, kerr.New(kerr.InconsistentGroupProtocol, "sync of member %s names protocol type %q, protocol %q; group %s has %q, %q",
			m.id, req.ProtocolType, req.ProtocolName, g.id, g.protocolType, g.protocol)
	}
	ch := make(chan syncOutcome, 1)
	switch g.state {
	case PreparingRebalance:
		return nil, kerr.New(kerr.RebalanceInProgress, "group %s is rebalancing: rejoin", g.id)
	case Stable:
		ch <- g.synced(m)
		return ch, nil
	case Empty, Dead:
		return nil, kerr.New(kerr.UnknownMemberID, "group %s is %s", g.id, g.state)
	}
	// CompletingRebalance.
	m.deadline = s.c.cfg.Now().Add(m.sessionTimeout)
	if m.sync != nil {
		m.sync <- syncOutcome{err: kerr.New(kerr.RebalanceInProgress, "superseded by a newer SyncGroup of member %s", m.id)}
	}
	m.sync = ch
	if m.id == g.leader {
		assignments := map[string][]byte{}
		for _, a := range req.Assignments {
			if _, ok := g.members[a.MemberId]; ok {
				assignments[a.MemberId] = a.Assignment
			}
		}
		gen, v := g.generation, g.value(assignments)
		go s.storeAssignment(g, gen, v, assignments)
	}
	return ch, nil
}

// storeAssignment commits a generation's assignment and, if the group is
// still in that generation, makes it Stable and answers every waiting
// SyncGroup.
func (s *shard) storeAssignment(g *group, gen int32, v *tapesv1.GroupValue, assignments map[string][]byte) {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	err := s.append(ctx, []Record{groupRecord(g.id, v)})
	s.mu.Lock()
	defer s.mu.Unlock()
	if g.generation != gen || g.state != CompletingRebalance || s.groups[g.id] != g {
		return // a newer rebalance began meanwhile
	}
	now := s.c.cfg.Now()
	if err != nil {
		s.c.log.Warn("could not store the assignment", "group", g.id, "generation", gen, "err", err)
		for _, m := range g.members {
			if m.sync != nil {
				m.sync <- syncOutcome{err: err}
				m.sync = nil
			}
		}
		g.prepareRebalance(now, 0)
		return
	}
	g.state = Stable
	for id, m := range g.members {
		m.assignment = assignments[id]
		if m.sync != nil {
			m.sync <- g.synced(m)
			m.sync = nil
		}
	}
	s.c.log.Info("group stable", "group", g.id, "generation", gen, "members", len(g.members))
}

// heartbeat handles a Heartbeat.
func (s *shard) heartbeat(req *tapesv1.HeartbeatRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.live(req.GroupId); err != nil {
		return err
	}
	g := s.group(req.GroupId, false)
	if g == nil {
		return kerr.New(kerr.UnknownMemberID, "group %s has no member %s", req.GroupId, req.MemberId)
	}
	m, ok := g.members[req.MemberId]
	if !ok {
		return kerr.New(kerr.UnknownMemberID, "member %s is not in group %s (generation %d)", req.MemberId, g.id, g.generation)
	}
	if req.GenerationId != g.generation {
		return kerr.New(kerr.IllegalGeneration, "heartbeat of member %s with generation %d; group %s is at %d", m.id, req.GenerationId, g.id, g.generation)
	}
	m.deadline = s.c.cfg.Now().Add(m.sessionTimeout)
	if g.state == PreparingRebalance {
		return kerr.New(kerr.RebalanceInProgress, "group %s is rebalancing: rejoin", g.id)
	}
	return nil
}

// leave handles a LeaveGroup.
func (s *shard) leave(req *tapesv1.LeaveGroupRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.live(req.GroupId); err != nil {
		return err
	}
	g := s.group(req.GroupId, false)
	var m *member
	if g != nil {
		m = g.members[req.MemberId]
	}
	if m == nil {
		return kerr.New(kerr.UnknownMemberID, "member %s is not in group %s", req.MemberId, req.GroupId)
	}
	now := s.c.cfg.Now()
	s.c.log.Info("member left", "group", g.id, "member", m.id, "generation", g.generation)
	s.remove(g, m, now, kerr.New(kerr.UnknownMemberID, "member %s left group %s", m.id, g.id))
	return nil
}

// remove takes m out of g and completes the join if that was what it
// waited for. Caller holds s.mu.
func (s *shard) remove(g *group, m *member, now time.Time, err error) {
	g.removeMember(m, now, err, s.c.cfg.InitialRebalanceDelay)
	if len(g.members) == 0 && g.state == PreparingRebalance {
		s.completeJoin(g, now)
		return
	}
	if g.readyToCompleteJoin(now) {
		s.completeJoin(g, now)
	}
}

// tick expires sessions and pending member ids and completes joins whose
// rebalance timeout passed.
func (s *shard) tick(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live("") != nil {
		return
	}
	for _, g := range s.groups {
		for id, exp := range g.pending {
			if now.After(exp) {
				delete(g.pending, id)
			}
		}
		for _, id := range sortedMemberIDs(g.members) {
			m := g.members[id]
			if m.join == nil && now.After(m.deadline) {
				s.c.log.Info("member session expired", "group", g.id, "member", m.id, "generation", g.generation, "session_timeout", m.sessionTimeout)
				s.remove(g, m, now, kerr.New(kerr.UnknownMemberID, "member %s of group %s: session timeout %v expired", m.id, g.id, m.sessionTimeout))
			}
		}
		if g.readyToCompleteJoin(now) {
			s.completeJoin(g, now)
		}
	}
}

// commit handles an OffsetCommit: the member and generation are checked,
// the offsets appended, and applied to the cache once committed.
func (s *shard) commit(ctx context.Context, req *tapesv1.OffsetCommitRequest) error {
	if err := checkOffsets(req.Offsets); err != nil {
		return err
	}
	s.mu.Lock()
	if err := s.live(req.GroupId); err != nil {
		s.mu.Unlock()
		return err
	}
	g := s.group(req.GroupId, true)
	if err := g.checkCommit(req); err != nil {
		s.mu.Unlock()
		return err
	}
	s.mu.Unlock()

	now := s.c.cfg.Now().UnixMilli()
	recs := make([]Record, 0, len(req.Offsets))
	for _, o := range req.Offsets {
		recs = append(recs, offsetRecord(req.GroupId, o.Topic, o.Partition, &tapesv1.OffsetValue{Offset: o.Offset, Metadata: o.Metadata, CommitTimestampMs: now}))
	}
	if len(recs) == 0 {
		return nil
	}
	if err := s.append(ctx, recs); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g = s.group(req.GroupId, true)
	for _, o := range req.Offsets {
		g.offsets[assign.TopicPartition{Topic: o.Topic, Partition: o.Partition}] = committed{offset: o.Offset, metadata: o.Metadata, timestamp: now}
	}
	return nil
}

// checkCommit fences a commit as Kafka does: an admin commit (generation
// -1, no member) only into an empty group; otherwise the member must be in
// the group, in its generation, and the group not waiting for an
// assignment.
func (g *group) checkCommit(req *tapesv1.OffsetCommitRequest) error {
	if req.GenerationId < 0 && req.MemberId == "" {
		if g.state != Empty {
			return kerr.New(kerr.UnknownMemberID, "group %s has %d active members (%s): only they may commit", g.id, len(g.members), g.state)
		}
		return nil
	}
	m, ok := g.members[req.MemberId]
	if !ok {
		return kerr.New(kerr.UnknownMemberID, "member %s is not in group %s (generation %d): commit rejected", req.MemberId, g.id, g.generation)
	}
	if req.GenerationId != g.generation {
		return kerr.New(kerr.IllegalGeneration, "commit of member %s with generation %d; group %s is at %d", m.id, req.GenerationId, g.id, g.generation)
	}
	if g.state == CompletingRebalance {
		return kerr.New(kerr.RebalanceInProgress, "group %s is waiting for its assignment: commit after the rebalance", g.id)
	}
	return nil
}

// fetchOffsets answers an OffsetFetch from the cache, with, per answered
// partition, whether a transactional commit of it is pending.
func (s *shard) fetchOffsets(req *tapesv1.OffsetFetchRequest) (*tapesv1.OffsetFetchResponse, []bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := &tapesv1.OffsetFetchResponse{}
	var unstable []bool
	g := s.groups[req.GroupId]
	one := func(tp assign.TopicPartition) {
		co := &tapesv1.CommittedOffset{Topic: tp.Topic, Partition: tp.Partition, Offset: -1}
		if g != nil {
			if c, ok := g.offsets[tp]; ok {
				co.Offset, co.Metadata, co.CommitTimestampMs = c.offset, c.metadata, c.timestamp
			}
		}
		resp.Offsets = append(resp.Offsets, co)
		unstable = append(unstable, g != nil && g.txnPending(tp))
	}
	if len(req.Partitions) > 0 {
		for _, tp := range toPartitions(req.Partitions) {
			one(tp)
		}
		return resp, unstable
	}
	if g == nil {
		return resp, unstable
	}
	tps := make([]assign.TopicPartition, 0, len(g.offsets))
	for tp := range g.offsets {
		tps = append(tps, tp)
	}
	assign.SortPartitions(tps)
	for _, tp := range tps {
		one(tp)
	}
	return resp, unstable
}

// describe describes one group.
func (s *shard) describe(groupID string) *tapesv1.GroupDescription {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groups[groupID]
	if g == nil {
		return &tapesv1.GroupDescription{GroupId: groupID, State: string(Dead), CoordinatorId: s.c.cfg.BrokerID}
	}
	return g.describe(s.c.cfg.BrokerID)
}

// list lists the shard's groups.
func (s *shard) list() []*tapesv1.ListedGroup {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*tapesv1.ListedGroup, 0, len(s.groups))
	for _, g := range s.groups {
		out = append(out, &tapesv1.ListedGroup{GroupId: g.id, State: string(g.state), ProtocolType: g.protocolType, CoordinatorId: s.c.cfg.BrokerID})
	}
	return out
}
