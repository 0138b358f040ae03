package metadata

import (
	"slices"

	"github.com/tapes-dev/tapes/internal/kerr"
)

// A reassignment moves one partition to a new replica set in three kinds of
// controller commands, each idempotent so that whoever drives it after a
// failover (a new controller leader, a new partition leader) resumes from
// the state alone:
//
//  1. OpReassignPartition (an operator, `cluster topics reassign`) records
//     Target; Replicas becomes the union of the old replicas and Target, so
//     the added brokers open the replica (without bootstrapping: Adding).
//  2. The partition's Raft leader changes its group's voters one at a time
//     (broker reassign.go) and reports each step and configuration with
//     OpReassignProgress (Steps, Voters, Learners: shown by describe and
//     printed by the reassign command).
//  3. Once the voters are exactly Target, the leader proposes
//     OpCompleteReassignment: Replicas becomes Target and the leaving
//     brokers delete their replicas.

// ValidateReassignment checks a target replica set for partition p of topic
// t against the registered brokers: non-empty, no duplicate, every id
// registered, at least min.insync.replicas replicas. It returns
// INVALID_REPLICA_ASSIGNMENT or INVALID_REPLICATION_FACTOR naming the
// offending value. Liveness is not replicated: the proposing broker checks
// it before (broker reassign.go).
func (s *State) ValidateReassignment(t *Topic, p int32, target []BrokerID) error {
	if p < 0 || int(p) >= len(t.Partitions) {
		return kerr.New(kerr.UnknownTopicOrPartition, "topic %q has no partition %d (it has %d)", t.Name, p, len(t.Partitions))
	}
	if len(target) == 0 {
		return kerr.New(kerr.InvalidReplicaAssignment, "%s-%d: the target replica set is empty", t.Name, p)
	}
	for i, id := range target {
		if slices.Contains(target[:i], id) {
			return kerr.New(kerr.InvalidReplicaAssignment, "%s-%d: broker %d appears twice in the target replicas %s", t.Name, p, id, JoinIDs(target))
		}
		if _, ok := s.Brokers[id]; !ok {
			return kerr.New(kerr.InvalidReplicaAssignment, "%s-%d: broker %d is not a registered broker (registered: %s)", t.Name, p, id, JoinIDs(s.BrokerIDs()))
		}
	}
	if min := t.Config().MinInsyncReplicas; len(target) < min {
		return kerr.New(kerr.InvalidReplicationFactor, "%s-%d: %d target replicas are fewer than min.insync.replicas=%d", t.Name, p, len(target), min)
	}
	return nil
}

// ValidateThrottle checks a reassignment's throttle (bytes per second):
// negative is INVALID_REQUEST naming it.
func ValidateThrottle(topic string, p int32, throttle int64) error {
	if throttle < 0 {
		return kerr.New(kerr.InvalidRequest, "%s-%d: throttle %d bytes/s is negative (0 means unthrottled)", topic, p, throttle)
	}
	return nil
}

// applyReassign applies the three reassignment commands; the caller holds
// the FSM's lock.
func (s *State) applyReassign(cmd *Command) (*Result, bool) {
	t, ok := s.Topics[cmd.Name]
	if !ok || (cmd.TopicID != 0 && t.ID != cmd.TopicID) || cmd.Partition < 0 || int(cmd.Partition) >= len(t.Partitions) {
		return refuse(kerr.New(kerr.UnknownTopicOrPartition, "partition %s-%d (topic id %d) does not exist", cmd.Name, cmd.Partition, cmd.TopicID)), false
	}
	p := &t.Partitions[cmd.Partition]
	switch cmd.Op {
	case OpReassignPartition:
		if err := s.ValidateReassignment(t, cmd.Partition, cmd.Target); err != nil {
			return refuse(err), false
		}
		if err := ValidateThrottle(t.Name, cmd.Partition, cmd.Throttle); err != nil {
			return refuse(err), false
		}
		if p.Reassigning() {
			if slices.Equal(p.Target, cmd.Target) {
				// The same request again; with another throttle, the
				// throttle changes (as Kafka's --throttle on a running
				// reassignment).
				if p.Throttle != cmd.Throttle {
					p.Throttle = cmd.Throttle
					return &Result{TopicID: t.ID}, true
				}
				return &Result{TopicID: t.ID}, false
			}
			return refuse(kerr.New(kerr.ReassignmentInProgress, "%s-%d is already being reassigned from %s to %s", t.Name, cmd.Partition, JoinIDs(p.Replicas), JoinIDs(p.Target))), false
		}
		if slices.Equal(p.Replicas, cmd.Target) {
			return &Result{TopicID: t.ID}, false // nothing to move
		}
		replicas := slices.Clone(p.Replicas)
		var adding, removing []BrokerID
		for _, id := range cmd.Target {
			if !slices.Contains(replicas, id) {
				replicas = append(replicas, id)
				adding = append(adding, id)
			}
		}
		for _, id := range p.Replicas {
			if !slices.Contains(cmd.Target, id) {
				removing = append(removing, id)
			}
		}
		p.Replicas, p.Target, p.Adding, p.Removing = replicas, slices.Clone(cmd.Target), adding, removing
		p.Voters, p.Learners, p.Steps, p.Throttle = nil, nil, nil, cmd.Throttle
		return &Result{TopicID: t.ID}, true
	case OpReassignProgress:
		if !p.Reassigning() {
			return &Result{}, false // late: ignored, not an error
		}
		// A deposed leader's report still records the step it took (a
		// leadership transfer is reported once its successor leads), but
		// not its view of the configuration.
		current := cmd.Epoch >= p.Epoch
		newStep := cmd.Step != "" && (len(p.Steps) == 0 || p.Steps[len(p.Steps)-1] != cmd.Step)
		if (!current || slices.Equal(p.Voters, cmd.Voters) && slices.Equal(p.Learners, cmd.Learners)) && !newStep {
			return &Result{}, false
		}
		if current {
			p.Voters, p.Learners = slices.Clone(cmd.Voters), slices.Clone(cmd.Learners)
		}
		if newStep {
			p.Steps = append(p.Steps, cmd.Step)
			if len(p.Steps) > MaxReassignSteps {
				p.Steps = p.Steps[len(p.Steps)-MaxReassignSteps:]
			}
		}
		return &Result{}, true
	case OpCompleteReassignment:
		if !p.Reassigning() {
			if sameSet(p.Replicas, cmd.Voters) {
				return &Result{}, false // completed already (a retry)
			}
			return refuse(kerr.New(kerr.InvalidRequest, "%s-%d is not being reassigned", t.Name, cmd.Partition)), false
		}
		if cmd.Epoch < p.Epoch {
			return refuse(kerr.New(kerr.FencedLeaderEpoch, "%s-%d: completion from epoch %d, the partition is at epoch %d", t.Name, cmd.Partition, cmd.Epoch, p.Epoch)), false
		}
		if !sameSet(p.Target, cmd.Voters) || len(cmd.Learners) > 0 {
			return refuse(kerr.New(kerr.InvalidRequest, "%s-%d: the Raft voters %s (non-voters %s) are not the target %s yet",
				t.Name, cmd.Partition, JoinIDs(cmd.Voters), JoinIDs(cmd.Learners), JoinIDs(p.Target))), false
		}
		isr := make([]BrokerID, 0, len(p.ISR))
		for _, id := range p.Target {
			if slices.Contains(p.ISR, id) {
				isr = append(isr, id)
			}
		}
		p.Replicas, p.ISR = p.Target, isr
		p.Target, p.Adding, p.Removing, p.Voters, p.Learners, p.Throttle = nil, nil, nil, nil, nil, 0
		return &Result{}, true
	}
	return refuse(kerr.New(kerr.InvalidRequest, "unknown controller command %q", cmd.Op)), false
}

// sameSet reports whether a and b hold the same ids, in any order.
func sameSet(a, b []BrokerID) bool {
	if len(a) != len(b) {
		return false
	}
	for _, id := range a {
		if !slices.Contains(b, id) {
			return false
		}
	}
	return true
}

// applyUnregister removes broker id (OpUnregisterBroker, whose Leader field
// names it): refused with INVALID_REQUEST naming a partition while one
// still has it among its replicas. Unregistering a removed broker again is a
// no-op.
func (s *State) applyUnregister(id BrokerID) (*Result, bool) {
	if s.Removed[id] {
		return &Result{}, false
	}
	if _, ok := s.Brokers[id]; !ok {
		return refuse(kerr.New(kerr.InvalidRequest, "broker %d is not registered (registered: %s)", id, JoinIDs(s.BrokerIDs()))), false
	}
	for _, name := range s.TopicNames() {
		for p, ps := range s.Topics[name].Partitions {
			if slices.Contains(ps.Replicas, id) {
				return refuse(kerr.New(kerr.InvalidRequest, "broker %d still hosts a replica of %s-%d (replicas %s): move it away first", id, name, p, JoinIDs(ps.Replicas))), false
			}
		}
	}
	delete(s.Brokers, id)
	s.Removed[id] = true
	return &Result{}, true
}
