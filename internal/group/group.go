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
	assignment []*tapesv1.TopicPartitions
	err        error
}

// member is one member of a group. Guarded by its shard's mutex.
type member struct {
	id, clientID, host string
	sessionTimeout     time.Duration
	rebalanceTimeout   time.Duration
	// protocols: the assignors the member supports with its subscription
	// for each, in order of preference.
	protocols []*tapesv1.JoinGroupProtocol
	// assignment of the current generation (set when the group is Stable).
	assignment []*tapesv1.TopicPartitions
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

// subscription returns the member's subscription for protocol name, nil if
// it does not support it.
func (m *member) subscription(name string) *tapesv1.Subscription {
	for _, p := range m.protocols {
		if p.GetName() == name {
			return p.GetSubscription()
		}
	}
	return nil
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
	// protocolType and protocol: "consumer" and the assignor chosen for the
	// current generation.
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
			Subscription: m.subscription(g.protocol), Assignment: m.assignment})
	}
	return d
}

// value returns the group record persisting the current generation with
// the given assignments (member id -> partitions).
func (g *group) value(assignments map[string][]*tapesv1.TopicPartitions) *tapesv1.GroupValue {
	v := &tapesv1.GroupValue{ProtocolType: g.protocolType, Protocol: g.protocol, GenerationId: g.generation, LeaderId: g.leader}
	for _, id := range sortedMemberIDs(g.members) {
		m := g.members[id]
		v.Members = append(v.Members, &tapesv1.GroupValueMember{MemberId: m.id, ClientId: m.clientID, Host: m.host,
			SessionTimeoutMs: int32(m.sessionTimeout / time.Millisecond), RebalanceTimeoutMs: int32(m.rebalanceTimeout / time.Millisecond),
			Subscription: m.subscription(g.protocol), Assignment: assignments[id]})
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
			protocols:        []*tapesv1.JoinGroupProtocol{{Name: v.Protocol, Subscription: vm.Subscription}},
			assignment:       vm.Assignment}
		m.deadline = now.Add(m.sessionTimeout)
		g.members[m.id] = m
	}
	g.state = Empty
	if len(g.members) > 0 {
		g.state = Stable
	}
}

// supportsProtocols reports whether a member offering protocols could join:
// the group is empty, or at least one of them is supported by every member.
func (g *group) supportsProtocols(protocolType string, protocols []*tapesv1.JoinGroupProtocol) bool {
	if len(g.members) == 0 {
		return protocolType != "" && len(protocols) > 0
	}
	if protocolType != g.protocolType {
		return false
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
		if m.subscription(name) == nil {
			return false
		}
	}
	return true
}

// chooseProtocol picks the assignor of a new generation: the first in the
// leader's order of preference that every member supports.
func (g *group) chooseProtocol() string {
	if l, ok := g.members[g.leader]; ok {
		for _, p := range l.protocols {
			if g.allSupport(p.GetName()) {
				return p.GetName()
			}
		}
	}
	return ""
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
	var all []*tapesv1.JoinGroupMember
	for _, id := range sortedMemberIDs(g.members) {
		m := g.members[id]
		all = append(all, &tapesv1.JoinGroupMember{MemberId: m.id, ClientId: m.clientID, Host: m.host, Subscription: m.subscription(g.protocol)})
	}
	for _, m := range g.members {
		resp := &tapesv1.JoinGroupResponse{GenerationId: g.generation, ProtocolName: g.protocol, LeaderId: g.leader, MemberId: m.id}
		if m.id == g.leader {
			resp.Members = all
		}
		m.join <- joinOutcome{resp: resp}
		m.join = nil
		m.deadline = now.Add(m.sessionTimeout)
	}
	return false
}

// currentJoin answers a JoinGroup that changes nothing with the current
// generation.
func (g *group) currentJoin(m *member) *tapesv1.JoinGroupResponse {
	resp := &tapesv1.JoinGroupResponse{GenerationId: g.generation, ProtocolName: g.protocol, LeaderId: g.leader, MemberId: m.id}
	if m.id == g.leader {
		for _, id := range sortedMemberIDs(g.members) {
			o := g.members[id]
			resp.Members = append(resp.Members, &tapesv1.JoinGroupMember{MemberId: o.id, ClientId: o.clientID, Host: o.host, Subscription: o.subscription(g.protocol)})
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
