package broker

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"

	"github.com/tapes-dev/tapes/internal/metadata"
	"github.com/tapes-dev/tapes/internal/replication"
)

// trackedReplicas is the order a replica's leader tracks its partition's
// replicas in: the assignment, or during a reassignment the target first
// (its first is then the preferred leader) and the leaving replicas after.
func trackedReplicas(ps metadata.PartitionState) []metadata.BrokerID {
	if !ps.Reassigning() {
		return ps.Replicas
	}
	return append(slices.Clone(ps.Target), ps.Removing...)
}

// driveReassignments runs on reconcileLoop's goroutine after each reconcile:
// every hosted replica learns its partition's replica set, and every replica
// this broker leads whose partition is being reassigned takes one step
// (replication.ReassignStep), reports the Raft configuration it leaves to
// the controller, and proposes the completion once the voters are the
// target. Every hosted replica also learns the reassignment's throttle
// (Replica.SetThrottle: on the joining replicas until their promotion), so
// a new partition leader throttles as the old one did. The steps are decided from the controller's state and the group's
// Raft configuration only, so a new partition leader or a new controller
// resumes a reassignment where it stopped. It may block for a few seconds
// per reassigning partition (a configuration change, a proposal).
func (b *Broker) driveReassignments() {
	for _, r := range b.replicaList() {
		c := r.Config()
		ps := b.partitionState(c.Topic, c.TopicID, c.Partition)
		if len(ps.Replicas) == 0 {
			continue
		}
		r.SetReplicas(trackedReplicas(ps))
		r.SetThrottle(ps.Adding, ps.Throttle) // none outside a reassignment
		if !ps.Reassigning() || r.Raft().State() != raft.Leader {
			continue
		}
		epoch := int64(r.Status().Term) // the term the step is taken in
		step, err := r.ReassignStep(ps.Target, 5*time.Second)
		if err != nil {
			b.log.Info("reassignment step not taken; retried next round", "topic", c.Topic, "partition", c.Partition, "err", err)
			continue
		}
		r.SetReplicas(trackedReplicas(ps))
		b.log.Info("reassignment", "topic", c.Topic, "partition", c.Partition, "step", step.Kind, "broker", step.Broker, "lag", step.Lag,
			"voters", metadata.JoinIDs(step.Voters), "learners", metadata.JoinIDs(step.Learners))
		desc := stepText(step)
		cmd := &metadata.Command{Op: metadata.OpReassignProgress, Name: c.Topic, TopicID: c.TopicID, Partition: c.Partition,
			Epoch: epoch, Voters: step.Voters, Learners: step.Learners, Step: desc}
		if step.Kind == replication.StepDone {
			cmd.Op, cmd.Step = metadata.OpCompleteReassignment, ""
		} else if slices.Equal(ps.Voters, step.Voters) && slices.Equal(ps.Learners, step.Learners) &&
			(step.Kind == replication.StepCatchUp && len(ps.Steps) > 0 && strings.HasPrefix(ps.Steps[len(ps.Steps)-1], string(step.Kind)) ||
				len(ps.Steps) > 0 && ps.Steps[len(ps.Steps)-1] == desc) {
			continue // nothing new: one catch-up line per wait, not one per round
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		res, err := b.propose(ctx, cmd)
		cancel()
		if err == nil {
			err = res.Err()
		}
		if err != nil {
			b.log.Warn("reassignment report failed; resent next round", "topic", c.Topic, "partition", c.Partition, "op", cmd.Op, "err", err)
		}
	}
}

// stepText is how a step is recorded in the metadata and printed.
func stepText(s replication.Step) string {
	switch s.Kind {
	case replication.StepCatchUp:
		return fmt.Sprintf("%s %d (lag %d entries)", s.Kind, s.Broker, s.Lag)
	case replication.StepDone:
		return string(s.Kind)
	}
	return fmt.Sprintf("%s %d", s.Kind, s.Broker)
}

// ReassignPartition records a target replica set for one partition (see
// metadata reassign.go). Refused, with nothing recorded: an unknown topic or
// partition, a target metadata.ValidateReassignment refuses (empty,
// duplicate, unregistered broker, fewer than min.insync.replicas), a
// negative throttle (INVALID_REQUEST naming it), a target broker this
// broker does not see live (INVALID_REPLICA_ASSIGNMENT naming it), another
// reassignment of the partition in progress. The same target again with
// another throttle changes the throttle. It answers once
// this broker's copy of the metadata holds the target.
func (a *api) ReassignPartition(ctx context.Context, req *tapesv1.ReassignPartitionRequest) (*tapesv1.ReassignPartitionResponse, error) {
	b := a.b
	if why := b.notReady(); why != "" {
		return nil, kerr.ToStatus(kerr.New(kerr.BrokerNotAvailable, "broker %d %s", b.cfg.ID, why))
	}
	target := make([]metadata.BrokerID, len(req.Replicas))
	for i, id := range req.Replicas {
		target[i] = metadata.BrokerID(id)
	}
	var err error
	b.meta.View(func(s *metadata.State) {
		t, ok := s.Topics[req.Topic]
		if !ok {
			err = kerr.New(kerr.UnknownTopicOrPartition, "topic %q does not exist", req.Topic)
			return
		}
		err = s.ValidateReassignment(t, req.Partition, target)
		if err == nil {
			err = metadata.ValidateThrottle(req.Topic, req.Partition, req.ThrottleBytesPerSec)
		}
	})
	if err == nil {
		for _, id := range target {
			if !b.alive(id) {
				err = kerr.New(kerr.InvalidReplicaAssignment, "%s-%d: broker %d is not live", req.Topic, req.Partition, id)
				break
			}
		}
	}
	if err == nil {
		var res *metadata.Result
		res, err = b.propose(ctx, &metadata.Command{Op: metadata.OpReassignPartition, Name: req.Topic, Partition: req.Partition, Target: target,
			Throttle: req.ThrottleBytesPerSec})
		if err == nil {
			err = res.Err()
		}
		if err == nil {
			b.waitMeta(ctx, func(s *metadata.State) bool { return s.Index >= res.Index })
			b.nudgeReconcile()
		}
	}
	if err != nil {
		if _, ok := kerr.As(err); !ok {
			return nil, kerr.ToStatus(err)
		}
		return &tapesv1.ReassignPartitionResponse{Error: asDetail(err)}, nil
	}
	return &tapesv1.ReassignPartitionResponse{}, nil
}

// UnregisterBroker removes a broker that no longer hosts a replica (the
// state machine refuses otherwise, naming a partition). The controller
// leader then drops its vote (removeControllerVoters).
func (a *api) UnregisterBroker(ctx context.Context, req *tapesv1.UnregisterBrokerRequest) (*tapesv1.UnregisterBrokerResponse, error) {
	res, err := a.b.propose(ctx, &metadata.Command{Op: metadata.OpUnregisterBroker, Leader: metadata.BrokerID(req.BrokerId)})
	if err == nil {
		err = res.Err()
	}
	if err != nil {
		if _, ok := kerr.As(err); !ok {
			return nil, kerr.ToStatus(err)
		}
		return &tapesv1.UnregisterBrokerResponse{Error: asDetail(err)}, nil
	}
	a.b.waitMeta(ctx, func(s *metadata.State) bool { return s.Index >= res.Index })
	return &tapesv1.UnregisterBrokerResponse{}, nil
}

// removeControllerVoters runs on reconcileLoop's goroutine: on the
// controller quorum's leader, every unregistered broker still in the
// quorum's configuration is removed from it, so a removed broker's vote no
// longer counts toward the quorum's majority. Blocks for at most a few
// seconds per removal.
func (b *Broker) removeControllerVoters() {
	if b.ctrlRaft.State() != raft.Leader {
		return
	}
	var removed []metadata.BrokerID
	b.meta.View(func(s *metadata.State) {
		for id := range s.Removed {
			removed = append(removed, id)
		}
	})
	if len(removed) == 0 {
		return
	}
	f := b.ctrlRaft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	for _, srv := range f.Configuration().Servers {
		id := replication.BrokerOf(srv.ID)
		if !slices.Contains(removed, id) || id == b.cfg.ID {
			continue
		}
		if err := b.ctrlRaft.RemoveServer(srv.ID, 0, 5*time.Second).Error(); err != nil {
			b.log.Warn("removing an unregistered broker from the controller quorum; retried next round", "broker", id, "err", err)
		} else {
			b.log.Info("removed an unregistered broker from the controller quorum", "broker", id)
		}
	}
}
