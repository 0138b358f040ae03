package group

import (
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tapes-dev/tapes/internal/assign"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// State is a group's state, as Kafka names it.
type State string

// The group states. Transitions:
//
//	Empty -> PreparingRebalance           a member joins
//	PreparingRebalance -> CompletingRebalance   every member rejoined (or the rebalance timeout removed the others)
//	PreparingRebalance -> Empty           the last member left or expired
//	CompletingRebalance -> Stable         the leader's SyncGroup assignment is committed to the log
//	CompletingRebalance, Stable -> PreparingRebalance   a member joins, leaves, expires or changes its subscription
const (
	Empty               State = "Empty"
	PreparingRebalance  State = "PreparingRebalance"
	CompletingRebalance State = "CompletingRebalance"
	Stable              State = "Stable"
	Dead                State = "Dead"
)

// joinOutcome and syncOutcome answer a waiting JoinGroup or SyncGroup call.
// Their channels have room for one: the coordinator never blocks on a caller
// that gave up.
type joinOutcome struct {
	resp *tapesv1.JoinGroupResponse
	err  error
}

type syncOutcome struct {
	assignment             []byte
	protocolType, protocol string
	err                    error
}

// synced is the outcome of m's SyncGroup in the group's current (Stable)
// generation.
func (g *group) synced(m *member) syncOutcome {
	return syncOutcome{assignment: m.assignment, protocolType: g.protocolType, protocol: g.protocol}
}

// member is one member of a group. Guarded by its shard's mutex.
type member struct {
	id, clientID, host string
	sessionTimeout     time.Duration
	rebalanceTimeout   time.Duration
	// protocols: the protocols the member supports with its (opaque)
	// metadata for each, in order of preference, as it sent them.
	protocols []*tapesv1.JoinGroupProtocol
	// assignment of the current generation, as the leader sent it
	// (opaque; set when the group is Stable, nil while it rebalances).
	assignment []byte
	// deadline: the member is removed when now passes it without a
	// heartbeat, join or sync. Not checked while join != nil (a member
	// waiting in JoinGroup is bounded by the rebalance timeout instead).
	deadline time.Time
	// join is set while the member's JoinGroup call waits for the
	// rebalance to complete; sync while its SyncGroup waits for the
	// leader's assignment.
	join chan joinOutcome
	sync chan syncOutcome
}

// protocol returns the member's entry for protocol name, nil if it does
// not support it.
func (m *member) protocol(name string) *tapesv1.JoinGroupProtocol {
	for _, p := range m.protocols {
		if p.GetName() == name {
			return p
		}
	}
	return nil
}

// metadata returns the member's metadata for protocol name (nil if it does
// not support it).
func (m *member) metadata(name string) []byte { return m.protocol(name).GetMetadata() }

// vote returns the member's vote among candidates: the first protocol in
// its order of preference that is one of them ("" if none is).
func (m *member) vote(candidates map[string]bool) string {
	for _, p := range m.protocols {
		if candidates[p.GetName()] {
			return p.GetName()
		}
	}
	return ""
}

// committed is one committed offset.
type committed struct {
	offset    int64
	metadata  string
	timestamp int64 // ms
}

// group is one consumer group. Guarded by its shard's mutex.
type group struct {
	id    string
	state State
	// protocolType: every member's ("consumer" for consumers; set by the
	// first member of an Empty group). protocol: the one chosen by the vote
	// for the current generation ("" while Empty).
	protocolType string
	protocol     string
	// generation grows by one at every completed join. Invariant: a member
	// that is told generation g was in the group when g completed.
	generation int32
	// leader is the member that computes the assignment ("" when Empty).
	leader  string
	members map[string]*member
	// pending: member ids handed out with MEMBER_ID_REQUIRED and not yet
	// used to join, with when they expire.
	pending map[string]time.Time
	// rebalanceDeadline: in PreparingRebalance, when the join completes with
	// whoever rejoined. notBefore: the initial rebalance delay of a group
	// that was Empty (Kafka's group.initial.rebalance.delay.ms).
	rebalanceDeadline, notBefore time.Time
	offsets                      map[assign.TopicPartition]committed
	// txn: transactional commits pending, by producer id, then partition
	// (txn.go). Invariant: no empty inner map.
	txn map[int64]map[assign.TopicPartition]pendingCommit
}

func newGroup(id string) *group {
	return &group{id: id, state: Empty, members: map[string]*member{}, pending: map[string]time.Time{},
		offsets: map[assign.TopicPartition]committed{}}
}

// describe returns the group as DescribeGroups shows it.
func (g *group) describe(coordinator int32) *tapesv1.GroupDescription {
	d := &tapesv1.GroupDescription{GroupId: g.id, State: string(g.state), ProtocolType: g.protocolType,
		Protocol: g.protocol, GenerationId: g.generation, LeaderId: g.leader, CoordinatorId: coordinator}
	for _, id := range sortedMemberIDs(g.members) {
		m := g.members[id]
		d.Members = append(d.Members, &tapesv1.GroupMember{MemberId: m.id, ClientId: m.clientID, Host: m.host,
			Metadata: m.metadata(g.protocol), Assignment: m.assignment})
	}
	return d
}

// value returns the group record persisting the current generation with
// the given assignments (member id -> the leader's bytes). It holds what a
// new coordinator needs to carry the generation on, as Kafka's
// GroupMetadataValue: protocol type and protocol, generation, leader, and
// per member its timeouts, metadata for the protocol and assignment.
func (g *group) value(assignments map[string][]byte) *tapesv1.GroupValue {
	v := &tapesv1.GroupValue{ProtocolType: g.protocolType, Protocol: g.protocol, GenerationId: g.generation, LeaderId: g.leader}
	for _, id := range sortedMemberIDs(g.members) {
		m := g.members[id]
		v.Members = append(v.Members, &tapesv1.GroupValueMember{MemberId: m.id, ClientId: m.clientID, Host: m.host,
			SessionTimeoutMs: int32(m.sessionTimeout / time.Millisecond), RebalanceTimeoutMs: int32(m.rebalanceTimeout / time.Millisecond),
			Metadata: m.metadata(g.protocol), MemberAssignment: assignments[id]})
	}
	return v
}

// restore sets the group to what a group record says: the members of the
// generation it persisted, each with a fresh session (the new coordinator
// cannot know when they last heartbeated).
func (g *group) restore(v *tapesv1.GroupValue, now time.Time) {
	g.protocolType, g.protocol, g.generation, g.leader = v.ProtocolType, v.Protocol, v.GenerationId, v.LeaderId
	g.members = map[string]*member{}
	for _, vm := range v.Members {
		m := &member{id: vm.MemberId, clientID: vm.ClientId, host: vm.Host,
			sessionTimeout:   time.Duration(vm.SessionTimeoutMs) * time.Millisecond,
			rebalanceTimeout: time.Duration(vm.RebalanceTimeoutMs) * time.Millisecond,
			protocols:        []*tapesv1.JoinGroupProtocol{{Name: v.Protocol, Metadata: vm.Metadata}},
			assignment:       vm.MemberAssignment}
		m.deadline = now.Add(m.sessionTimeout)
		g.members[m.id] = m
	}
	g.state = Empty
	if len(g.members) > 0 {
		g.state = Stable
	}
}

// supportsProtocols reports whether a member offering protocols could join:
// the group is empty, or at least one of them is supported by every member
// (the protocol type is checked by the caller).
func (g *group) supportsProtocols(protocolType string, protocols []*tapesv1.JoinGroupProtocol) bool {
	if len(g.members) == 0 {
		return protocolType != "" && len(protocols) > 0
	}
	for _, p := range protocols {
		if g.allSupport(p.GetName()) {
			return true
		}
	}
	return false
}

func (g *group) allSupport(name string) bool {
	for _, m := range g.members {
		if m.protocol(name) == nil {
			return false
		}
	}
	return true
}

// chooseProtocol picks the protocol of a new generation by Kafka's vote
// (GroupMetadata.selectProtocol): the candidates are the protocols every
// member supports; each member votes for its first candidate in its order
// of preference; the candidate with the most votes wins. Kafka leaves a tie
// to hash-map order; here the tied candidate the leader prefers wins, so
// the choice is deterministic. "" when there is no candidate (join rejects
// a member that would make it so: supportsProtocols).
func (g *group) chooseProtocol() string {
	// Candidates are among any one member's protocols; the leader's order
	// of preference (or, without a leader, the first member's) breaks ties.
	ref := g.members[g.leader]
	if ref == nil {
		ids := sortedMemberIDs(g.members)
		if len(ids) == 0 {
			return ""
		}
		ref = g.members[ids[0]]
	}
	candidates := map[string]bool{}
	for _, p := range ref.protocols {
		if g.allSupport(p.GetName()) {
			candidates[p.GetName()] = true
		}
	}
	votes := map[string]int{}
	for _, m := range g.members {
		if v := m.vote(candidates); v != "" {
			votes[v]++
		}
	}
	best, bestVotes := "", 0
	for _, p := range ref.protocols {
		if n := votes[p.GetName()]; n > bestVotes {
			best, bestVotes = p.GetName(), n
		}
	}
	return best
}

// prepareRebalance moves the group to PreparingRebalance: members waiting in
// SyncGroup are told to rejoin, and the join completes when every member
// rejoined or at the rebalance timeout.
func (g *group) prepareRebalance(now time.Time, initialDelay time.Duration) {
	if g.state == CompletingRebalance {
		for _, m := range g.members {
			if m.sync != nil {
				m.sync <- syncOutcome{err: kerr.New(kerr.RebalanceInProgress, "group %s is rebalancing again: rejoin", g.id)}
				m.sync = nil
			}
		}
	}
	var timeout time.Duration
	for _, m := range g.members {
		timeout = max(timeout, m.rebalanceTimeout)
	}
	if g.state == Empty {
		g.notBefore = now.Add(min(initialDelay, timeout))
	} else {
		g.notBefore = time.Time{}
	}
	g.rebalanceDeadline = now.Add(timeout)
	g.state = PreparingRebalance
	for _, m := range g.members {
		m.assignment = nil
	}
}

// removeMember takes m out of the group, answering its waiting calls with
// err, and moves the group on.
func (g *group) removeMember(m *member, now time.Time, err error, initialDelay time.Duration) {
	delete(g.members, m.id)
	if m.join != nil {
		m.join <- joinOutcome{err: err}
		m.join = nil
	}
	if m.sync != nil {
		m.sync <- syncOutcome{err: err}
		m.sync = nil
	}
	if g.leader == m.id {
		g.leader = ""
		for _, id := range sortedMemberIDs(g.members) {
			g.leader = id
			break
		}
	}
	switch g.state {
	case Stable, CompletingRebalance:
		g.prepareRebalance(now, initialDelay)
	}
}

// readyToCompleteJoin reports whether the join of a PreparingRebalance
// group can complete now: every member rejoined (after the initial delay),
// or the rebalance timeout passed.
func (g *group) readyToCompleteJoin(now time.Time) bool {
	if g.state != PreparingRebalance {
		return false
	}
	if !now.Before(g.rebalanceDeadline) {
		return true
	}
	if now.Before(g.notBefore) {
		return false
	}
	for _, m := range g.members {
		if m.join == nil {
			return false
		}
	}
	return true
}

// completeJoin ends the join phase: members that did not rejoin are
// removed, the generation grows, and every waiting JoinGroup is answered (the
// leader with every member's subscription). It returns whether the group
// became Empty (which must be persisted).
func (g *group) completeJoin(now time.Time) (emptied bool) {
	for _, m := range g.members {
		if m.join == nil {
			delete(g.members, m.id)
		}
	}
	g.generation++
	if len(g.members) == 0 {
		g.state, g.leader, g.protocol = Empty, "", ""
		return true
	}
	if _, ok := g.members[g.leader]; !ok {
		g.leader = sortedMemberIDs(g.members)[0]
	}
	g.protocol = g.chooseProtocol()
	g.state = CompletingRebalance
	for _, m := range g.members {
		m.join <- joinOutcome{resp: g.currentJoin(m)}
		m.join = nil
		m.deadline = now.Add(m.sessionTimeout)
	}
	return false
}

// currentJoin answers a JoinGroup with the current generation: the leader
// gets every member's metadata for the chosen protocol.
func (g *group) currentJoin(m *member) *tapesv1.JoinGroupResponse {
	resp := &tapesv1.JoinGroupResponse{GenerationId: g.generation, ProtocolType: g.protocolType, ProtocolName: g.protocol, LeaderId: g.leader, MemberId: m.id}
	if m.id == g.leader {
		for _, id := range sortedMemberIDs(g.members) {
			o := g.members[id]
			resp.Members = append(resp.Members, &tapesv1.JoinGroupMember{MemberId: o.id, ClientId: o.clientID, Host: o.host, Metadata: o.metadata(g.protocol)})
		}
	}
	return resp
}

// sameProtocols reports whether a rejoining member offers what it offered.
func sameProtocols(a, b []*tapesv1.JoinGroupProtocol) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}
