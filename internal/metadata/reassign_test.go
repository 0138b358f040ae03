package metadata

import (
	"slices"
	"strings"
	"testing"

	"github.com/tapes-dev/tapes/internal/kerr"
)

// reassignFSM returns an FSM with brokers 1-4 and topic "orders" (one
// partition on 1,2,3, min.insync.replicas=2, leader 1 at epoch 3).
func reassignFSM(t *testing.T) (*FSM, TopicID) {
	t.Helper()
	f := NewFSM()
	for id := BrokerID(1); id <= 4; id++ {
		apply(t, f, &Command{Op: OpRegisterBroker, Broker: &Broker{ID: id, Address: "127.0.0.1:1"}})
	}
	topic := &Topic{Name: "orders", Configs: map[string]string{ConfigMinInsyncReplicas: "2"}, Partitions: []PartitionState{{Replicas: []BrokerID{1, 2, 3}}}}
	res := apply(t, f, &Command{Op: OpCreateTopic, Topic: topic})
	if res.Err() != nil {
		t.Fatal(res.Err())
	}
	apply(t, f, &Command{Op: OpUpdatePartition, Name: "orders", TopicID: res.TopicID, Partition: 0, Leader: 1, Epoch: 3, ISR: []BrokerID{1, 2, 3}})
	return f, res.TopicID
}

func partition0(f *FSM) PartitionState { return f.Clone().Topics["orders"].Partitions[0] }

func TestReassignRefusesImpossibleTargets(t *testing.T) {
	f, _ := reassignFSM(t)
	for _, c := range []struct {
		target []BrokerID
		code   kerr.Code
	}{
		{nil, kerr.InvalidReplicaAssignment},
		{[]BrokerID{1, 2, 2}, kerr.InvalidReplicaAssignment},
		{[]BrokerID{1, 2, 9}, kerr.InvalidReplicaAssignment},
		{[]BrokerID{4}, kerr.InvalidReplicationFactor},
	} {
		res := apply(t, f, &Command{Op: OpReassignPartition, Name: "orders", Partition: 0, Target: c.target})
		if !kerr.Is(res.Err(), c.code) {
			t.Errorf("target %v: %v, want %s", c.target, res.Err(), c.code)
		}
	}
	if r := apply(t, f, &Command{Op: OpReassignPartition, Name: "orders", Partition: 5, Target: []BrokerID{1, 2, 4}}); !kerr.Is(r.Err(), kerr.UnknownTopicOrPartition) {
		t.Errorf("partition 5: %v", r.Err())
	}
	if p := partition0(f); p.Reassigning() || !slices.Equal(p.Replicas, []BrokerID{1, 2, 3}) {
		t.Fatalf("a refused target changed the partition: %+v", p)
	}
}

// TestReassignSteps walks 1,2,3 -> 1,2,4 through every command, with a
// snapshot/restore (a controller failover) in the middle and each command
// applied twice (a retried proposal, a second driver after a leader change).
func TestReassignSteps(t *testing.T) {
	f, id := reassignFSM(t)
	start := &Command{Op: OpReassignPartition, Name: "orders", Partition: 0, Target: []BrokerID{1, 2, 4}}
	for range 2 {
		if r := apply(t, f, start); r.Err() != nil {
			t.Fatal(r.Err())
		}
	}
	p := partition0(f)
	if !slices.Equal(p.Replicas, []BrokerID{1, 2, 3, 4}) || !slices.Equal(p.Adding, []BrokerID{4}) || !slices.Equal(p.Removing, []BrokerID{3}) {
		t.Fatalf("after start: %+v, want replicas 1,2,3,4 adding 4 removing 3", p)
	}
	if r := apply(t, f, &Command{Op: OpReassignPartition, Name: "orders", Partition: 0, Target: []BrokerID{1, 2, 3, 4}}); !kerr.Is(r.Err(), kerr.ReassignmentInProgress) {
		t.Fatalf("second target during a reassignment: %v", r.Err())
	}
	// Completion before the voters are the target is refused.
	if r := apply(t, f, &Command{Op: OpCompleteReassignment, Name: "orders", TopicID: id, Epoch: 3, Voters: []BrokerID{1, 2, 3}, Learners: []BrokerID{4}}); !kerr.Is(r.Err(), kerr.InvalidRequest) {
		t.Fatalf("early completion: %v", r.Err())
	}
	for range 2 { // a step reported twice is recorded once
		apply(t, f, &Command{Op: OpReassignProgress, Name: "orders", TopicID: id, Epoch: 3, Voters: []BrokerID{1, 2, 3}, Learners: []BrokerID{4}, Step: "add-learner 4"})
	}
	// Controller failover: a new controller restores the state and resumes.
	g := restored(t, f)
	if p := partition0(g); !p.Reassigning() || !slices.Equal(p.Learners, []BrokerID{4}) {
		t.Fatalf("restored: %+v", p)
	}
	// A partition leader change mid-way: the new leader (epoch 4) reports;
	// the deposed one's late progress (epoch 3) records its step only.
	apply(t, g, &Command{Op: OpUpdatePartition, Name: "orders", TopicID: id, Partition: 0, Leader: 2, Epoch: 4, ISR: []BrokerID{1, 2, 3, 4}})
	apply(t, g, &Command{Op: OpReassignProgress, Name: "orders", TopicID: id, Epoch: 4, Voters: []BrokerID{1, 2, 3, 4}})
	apply(t, g, &Command{Op: OpReassignProgress, Name: "orders", TopicID: id, Epoch: 3, Voters: []BrokerID{1, 2, 3}, Learners: []BrokerID{4}, Step: "transfer-leadership 2"})
	if p := partition0(g); !slices.Equal(p.Voters, []BrokerID{1, 2, 3, 4}) || len(p.Learners) != 0 || !slices.Equal(p.Steps, []string{"add-learner 4", "transfer-leadership 2"}) {
		t.Fatalf("progress after the leader change: %+v", p)
	}
	if r := apply(t, g, &Command{Op: OpCompleteReassignment, Name: "orders", TopicID: id, Epoch: 3, Voters: []BrokerID{4, 1, 2}}); !kerr.Is(r.Err(), kerr.FencedLeaderEpoch) {
		t.Fatalf("completion from a deposed leader: %v", r.Err())
	}
	done := &Command{Op: OpCompleteReassignment, Name: "orders", TopicID: id, Epoch: 4, Voters: []BrokerID{4, 1, 2}}
	for range 2 {
		if r := apply(t, g, done); r.Err() != nil {
			t.Fatal(r.Err())
		}
	}
	p = partition0(g)
	if p.Reassigning() || !slices.Equal(p.Replicas, []BrokerID{1, 2, 4}) || !slices.Equal(p.ISR, []BrokerID{1, 2, 4}) || p.Adding != nil || p.Removing != nil {
		t.Fatalf("after completion: %+v, want replicas and ISR 1,2,4 and nothing pending", p)
	}
	// The same target again moves nothing.
	if r := apply(t, g, &Command{Op: OpReassignPartition, Name: "orders", Partition: 0, Target: []BrokerID{1, 2, 4}}); r.Err() != nil || partition0(g).Reassigning() {
		t.Fatalf("reassign to the current replicas: %v %+v", r.Err(), partition0(g))
	}
}

func TestUnregisterBroker(t *testing.T) {
	f, _ := reassignFSM(t)
	if r := apply(t, f, &Command{Op: OpUnregisterBroker, Leader: 3}); !kerr.Is(r.Err(), kerr.InvalidRequest) || !strings.Contains(r.ErrorMessage, "orders-0") {
		t.Fatalf("unregister a broker hosting orders-0: %v", r.Err())
	}
	for range 2 {
		if r := apply(t, f, &Command{Op: OpUnregisterBroker, Leader: 4}); r.Err() != nil {
			t.Fatalf("unregister broker 4: %v", r.Err())
		}
	}
	s := f.Clone()
	if _, ok := s.Brokers[4]; ok || !s.Removed[4] {
		t.Fatalf("broker 4 still registered or not marked removed: %+v %v", s.Brokers, s.Removed)
	}
	if r := apply(t, f, &Command{Op: OpRegisterBroker, Broker: &Broker{ID: 4, Address: "127.0.0.1:1"}}); !kerr.Is(r.Err(), kerr.InvalidRequest) {
		t.Fatalf("a removed broker registers again: %v", r.Err())
	}
}

// TestReassignThrottle: a negative throttle is refused naming it, with
// nothing recorded; a throttle is recorded with the target, survives a
// controller failover (snapshot/restore) and a partition leader change,
// changes with the same target asked again, and ends with the
// reassignment.
func TestReassignThrottle(t *testing.T) {
	f, id := reassignFSM(t)
	target := []BrokerID{1, 2, 4}
	r := apply(t, f, &Command{Op: OpReassignPartition, Name: "orders", Partition: 0, Target: target, Throttle: -5})
	if !kerr.Is(r.Err(), kerr.InvalidRequest) || !strings.Contains(r.Err().Error(), "-5") {
		t.Fatalf("throttle -5: %v, want INVALID_REQUEST naming -5", r.Err())
	}
	if p := partition0(f); p.Reassigning() || p.Throttle != 0 || !slices.Equal(p.Replicas, []BrokerID{1, 2, 3}) {
		t.Fatalf("a refused throttle changed the partition: %+v", p)
	}
	if r := apply(t, f, &Command{Op: OpReassignPartition, Name: "orders", Partition: 0, Target: target, Throttle: 262144}); r.Err() != nil {
		t.Fatal(r.Err())
	}
	g := restored(t, f)
	apply(t, g, &Command{Op: OpUpdatePartition, Name: "orders", TopicID: id, Partition: 0, Leader: 2, Epoch: 4, ISR: []BrokerID{1, 2, 3}})
	if p := partition0(g); p.Throttle != 262144 || !slices.Equal(p.Adding, []BrokerID{4}) || p.Leader != 2 {
		t.Fatalf("after a controller failover and a leader change: %+v, want throttle 262144 adding 4", p)
	}
	// Asked again: a negative throttle is still refused, another one
	// replaces it.
	if r := apply(t, g, &Command{Op: OpReassignPartition, Name: "orders", Partition: 0, Target: target, Throttle: -1}); !kerr.Is(r.Err(), kerr.InvalidRequest) || partition0(g).Throttle != 262144 {
		t.Fatalf("throttle -1 during the reassignment: %v, throttle %d", r.Err(), partition0(g).Throttle)
	}
	if r := apply(t, g, &Command{Op: OpReassignPartition, Name: "orders", Partition: 0, Target: target, Throttle: 1 << 20}); r.Err() != nil || partition0(g).Throttle != 1<<20 {
		t.Fatalf("a new throttle: %v, throttle %d", r.Err(), partition0(g).Throttle)
	}
	if r := apply(t, g, &Command{Op: OpCompleteReassignment, Name: "orders", TopicID: id, Epoch: 4, Voters: []BrokerID{4, 1, 2}}); r.Err() != nil {
		t.Fatal(r.Err())
	}
	if p := restored(t, g).Clone().Topics["orders"].Partitions[0]; p.Reassigning() || p.Throttle != 0 {
		t.Fatalf("after completion: %+v, want no throttle", p)
	}
}
