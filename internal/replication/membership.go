package replication

import (
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/metadata"
)

// Reassignment: the partition's leader changes its Raft group's voters one
// at a time toward a target replica set (see ARCHITECTURE "Reassignment and
// membership"). The broker's reconcile goroutine calls SetReplicas and
// ReassignStep; nothing here holds lead.mu across a Raft call.

// StepKind names what one ReassignStep did.
type StepKind string

// The steps, in the order a reassignment takes them.
const (
	StepAddLearner StepKind = "add-learner"         // a target replica joined the group as a non-voter
	StepCatchUp    StepKind = "catch-up"            // waiting: a non-voter's match is behind the commit index
	StepPromote    StepKind = "promote"             // a caught-up non-voter became a voter
	StepTransfer   StepKind = "transfer-leadership" // the leader is leaving: leadership handed to a target voter
	StepRemove     StepKind = "remove"              // a leaving replica left the group
	StepDone       StepKind = "done"                // the voters are exactly the target
)

// Step is the outcome of one ReassignStep.
type Step struct {
	Kind   StepKind
	Broker metadata.BrokerID // the replica the step concerned (0 for done)
	// Lag is, for catch-up and promote, the commit index minus the
	// non-voter's match index.
	Lag uint64
	// Voters and Learners are the Raft configuration after the step.
	Voters, Learners []metadata.BrokerID
}

// Membership returns the voters and non-voters of the group's latest Raft
// configuration (committed or not). Cheap: raft keeps it in an atomic.
func (r *Replica) Membership() (voters, learners []metadata.BrokerID) {
	f := r.raft.GetConfiguration()
	if f.Error() != nil {
		return nil, nil
	}
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			voters = append(voters, BrokerOf(s.ID))
		} else {
			learners = append(learners, BrokerOf(s.ID))
		}
	}
	return voters, learners
}

// membersLocked returns the replica set the leader tracks: the last
// SetReplicas, or Config.Replicas before any. Caller holds lead.mu.
func (r *Replica) membersLocked() []metadata.BrokerID {
	if r.lead.members != nil {
		return r.lead.members
	}
	return r.cfg.Replicas
}

// voters returns the group's voters, or the assignment before Raft has a
// configuration.
func (r *Replica) voters() []metadata.BrokerID {
	if v, _ := r.Membership(); len(v) > 0 {
		return v
	}
	return r.cfg.Replicas
}

// SetReplicas sets the replica set the leader tracks (ISR candidates, in
// this order; the first is the preferred leader). Ids missing from the
// group's Raft configuration are left out: a replica not yet added, or one
// a reassignment already removed, is in no ISR. Called by the broker on
// every metadata change.
func (r *Replica) SetReplicas(ids []metadata.BrokerID) {
	voters, learners := r.Membership()
	members := make([]metadata.BrokerID, 0, len(ids))
	for _, id := range ids {
		if len(voters) == 0 || slices.Contains(voters, id) || slices.Contains(learners, id) {
			members = append(members, id)
		}
	}
	r.lead.mu.Lock()
	defer r.lead.mu.Unlock()
	if slices.Equal(members, r.membersLocked()) {
		return
	}
	r.lead.members = members
	if r.lead.followers != nil {
		for id := range r.lead.followers {
			if !slices.Contains(members, id) {
				delete(r.lead.followers, id)
			}
		}
		for _, id := range members {
			if _, ok := r.lead.followers[id]; !ok && id != r.cfg.LocalID {
				r.lead.followers[id] = &followerProgress{} // enters the ISR only by catching up
			}
		}
	}
	r.signalLocked()
}

// ReassignStep takes the next step toward target as this group's ready
// leader, or reports what it waits for. Steps, one per call: add a target
// replica missing from the group as a non-voter; promote a non-voter whose
// match index has reached the commit index; remove a leaving voter (the
// others first); when this leader is leaving, hand leadership to a
// caught-up target voter. Each step is decided from the Raft configuration
// alone, so a new leader after a failover resumes where the old one
// stopped. It blocks for at most timeout (one configuration change) and
// answers NOT_LEADER_OR_FOLLOWER when this replica is not the ready leader.
func (r *Replica) ReassignStep(target []metadata.BrokerID, timeout time.Duration) (Step, error) {
	r.lead.mu.Lock()
	ready := r.lead.readyTerm != 0
	r.lead.mu.Unlock()
	if !ready || r.raft.State() != raft.Leader {
		return Step{}, kerr.New(kerr.NotLeaderOrFollower, "broker %d does not lead %s-%d", r.cfg.LocalID, r.cfg.Topic, r.cfg.Partition)
	}
	voters, learners := r.Membership()
	done := func(kind StepKind, id metadata.BrokerID, lag uint64, err error) (Step, error) {
		if err != nil {
			return Step{}, fmt.Errorf("%s-%d: %s broker %d: %w", r.cfg.Topic, r.cfg.Partition, kind, id, err)
		}
		v, l := r.Membership()
		return Step{Kind: kind, Broker: id, Lag: lag, Voters: v, Learners: l}, nil
	}
	addr := func(id metadata.BrokerID) (raft.ServerID, raft.ServerAddress) {
		return ServerID(id), raft.ServerAddress(ServerID(id))
	}
	for _, id := range target {
		if !slices.Contains(voters, id) && !slices.Contains(learners, id) {
			sid, sa := addr(id)
			return done(StepAddLearner, id, 0, r.raft.AddNonvoter(sid, sa, 0, timeout).Error())
		}
	}
	for _, id := range target {
		if !slices.Contains(learners, id) {
			continue
		}
		commit := r.raft.CommitIndex()
		match := r.matchOf(id)
		if match < commit {
			return done(StepCatchUp, id, commit-match, nil)
		}
		sid, sa := addr(id)
		err := r.raft.AddVoter(sid, sa, 0, timeout).Error()
		r.applyThrottle() // a voter now: its throttle ends
		return done(StepPromote, id, 0, err)
	}
	leaving := func(id metadata.BrokerID) bool { return !slices.Contains(target, id) }
	for _, id := range append(slices.Clone(learners), voters...) {
		if leaving(id) && id != r.cfg.LocalID {
			sid, _ := addr(id)
			return done(StepRemove, id, 0, r.raft.RemoveServer(sid, 0, timeout).Error())
		}
	}
	if leaving(r.cfg.LocalID) {
		last := r.raft.LastIndex()
		for _, id := range target {
			if m := r.matchOf(id); m >= last || m >= r.raft.CommitIndex() {
				sid, sa := addr(id)
				return done(StepTransfer, id, 0, r.raft.LeadershipTransferToServer(sid, sa).Error())
			}
		}
		return done(StepCatchUp, target[0], r.raft.CommitIndex()-r.matchOf(target[0]), nil)
	}
	return done(StepDone, 0, 0, nil)
}

// catchUpThrottle is a reassignment's throttle: rate bytes per second for
// each of adding (the joining replicas) until it is a voter.
type catchUpThrottle struct {
	adding []metadata.BrokerID
	rate   int64
	// applied: the ids the transport throttles now.
	applied []metadata.BrokerID
}

// SetThrottle throttles the catch-up traffic this replica sends, as the
// group's leader, to each of adding (a reassignment's joining replicas,
// metadata PartitionState.Adding) while the Raft configuration does not
// have it as a voter (so from before ReassignStep adds it as a non-voter):
// rate bytes per second (PartitionState.Throttle; 0 none). A
// joining replica's throttle ends once it is a voter (ReassignStep's
// promote), and every throttle with SetThrottle(nil, 0) once the
// reassignment completes. The broker calls it on every reconcile round, on
// every replica, so a new leader throttles as its predecessor did; a
// follower sends no catch-up traffic, so it throttles nothing in effect.
func (r *Replica) SetThrottle(adding []metadata.BrokerID, rate int64) {
	r.throttleMu.Lock()
	r.throttle.adding, r.throttle.rate = slices.Clone(adding), rate
	r.throttleMu.Unlock()
	r.applyThrottle()
}

// applyThrottle sets the transport's throttles from the last SetThrottle
// and the group's current Raft configuration.
func (r *Replica) applyThrottle() {
	voters, _ := r.Membership()
	r.throttleMu.Lock()
	defer r.throttleMu.Unlock()
	th := &r.throttle
	var now []metadata.BrokerID
	if th.rate > 0 {
		for _, id := range th.adding {
			if !slices.Contains(voters, id) && id != r.cfg.LocalID {
				now = append(now, id)
			}
		}
	}
	for _, id := range th.applied {
		if !slices.Contains(now, id) {
			r.cfg.Transport.SetThrottle(raft.ServerAddress(ServerID(id)), 0)
		}
	}
	for _, id := range now {
		if r.cfg.Transport.Throttle(raft.ServerAddress(ServerID(id))) != th.rate {
			r.cfg.Transport.SetThrottle(raft.ServerAddress(ServerID(id)), th.rate)
		}
	}
	th.applied = now
}

// matchOf returns a follower's match index in this leader's term (0 if not
// tracked).
func (r *Replica) matchOf(id metadata.BrokerID) uint64 {
	r.lead.mu.Lock()
	defer r.lead.mu.Unlock()
	if f := r.lead.followers[id]; f != nil {
		return f.match
	}
	return 0
}
