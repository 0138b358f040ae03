package metadata

import (
	"slices"
	"sort"
	"strings"

	"github.com/tapes-dev/tapes/internal/kerr"
)

// BrokerID identifies a broker; ids are positive.
type BrokerID int32

// TopicID identifies one incarnation of a topic: a topic deleted and created
// again under the same name gets a new id, so stale replicas never mix in.
type TopicID uint64

// Broker is a registered broker.
type Broker struct {
	ID BrokerID `json:"id"`
	// Address is the address clients dial (the broker's --advertise).
	Address string `json:"address"`
	// KafkaAddress is the HOST:PORT Kafka clients dial (the broker's
	// --kafka-advertise); "" when the broker serves no Kafka listener, and
	// in state written before brokers registered one.
	KafkaAddress string `json:"kafka_address,omitempty"`
}

// PartitionState is the controller's view of one partition.
type PartitionState struct {
	// Replicas is the assignment; Replicas[0] is the preferred leader.
	// During a reassignment it is the union of the replicas before and
	// Target (what every broker hosts meanwhile, as Kafka's controller
	// does); it becomes Target when the reassignment completes.
	Replicas []BrokerID `json:"replicas"`
	// Target is the replica set a reassignment moves to, nil when none is
	// in progress. Invariant: non-empty, no duplicates, every id registered
	// when recorded; Adding and Removing are set exactly while it is.
	Target []BrokerID `json:"target,omitempty"`
	// Adding lists the replicas of Target that were not replicas before
	// (Kafka's adding_replicas): their brokers open the replica without
	// bootstrapping the Raft group and wait for the leader to add them.
	// Removing lists the replicas leaving (Kafka's removing_replicas).
	// Invariant: Adding ⊆ Target, Removing ∩ Target = ∅, both ⊆ Replicas.
	Adding   []BrokerID `json:"adding,omitempty"`
	Removing []BrokerID `json:"removing,omitempty"`
	// Voters and Learners are the partition's Raft configuration as its
	// leader last reported it during a reassignment (progress for
	// `cluster topics describe`); nil outside one.
	Voters   []BrokerID `json:"voters,omitempty"`
	Learners []BrokerID `json:"learners,omitempty"`
	// Steps lists the Raft steps the leaders took in the last reassignment,
	// oldest first, as they reported them ("add-learner 4", "promote 4");
	// at most MaxReassignSteps, kept after it completes (what `cluster
	// topics reassign` prints), cleared when the next one starts.
	Steps []string `json:"steps,omitempty"`
	// Throttle is the rate, in bytes per second, the partition's leader
	// sends each replica of Adding its catch-up traffic at while it is a
	// non-voter (0: unthrottled). Invariant: >= 0; 0 outside a
	// reassignment.
	Throttle int64 `json:"throttle,omitempty"`
	// Leader is -1 until a leader reports. Invariant: Leader is -1 or in Replicas.
	Leader BrokerID `json:"leader"`
	// Epoch is the Raft term of Leader's group. Invariant: it never decreases;
	// a report with a lower epoch is ignored (a deposed leader cannot
	// overwrite its successor).
	Epoch int64 `json:"epoch"`
	// ISR as last reported by Leader. Invariant: a subset of Replicas that
	// contains Leader when Leader is not -1.
	ISR []BrokerID `json:"isr"`
}

// Topic is one topic with its partitions.
type Topic struct {
	Name       string            `json:"name"`
	ID         TopicID           `json:"id"`
	Configs    map[string]string `json:"configs"`
	Partitions []PartitionState  `json:"partitions"`
}

// Config returns the topic's typed configuration (defaults for unset keys).
func (t *Topic) Config() TopicConfig {
	c, _ := ParseTopicConfig(t.Configs)
	return c
}

// State is the whole replicated metadata. Readers get copies (Snapshot);
// only the FSM mutates it.
type State struct {
	Brokers     map[BrokerID]Broker `json:"brokers"`
	Topics      map[string]*Topic   `json:"topics"`
	NextTopicID TopicID             `json:"next_topic_id"`
	// NextProducerID is the next id InitProducerId hands out.
	NextProducerID int64 `json:"next_producer_id"`
	// Index is the Raft index of the last command applied (set by the FSM,
	// kept in snapshots), so a broker can tell whether its copy includes a
	// given command (see Result.Index).
	Index uint64 `json:"index"`
	// Requests holds the results of the last MaxRememberedRequests commands
	// that carried a RequestID, by id; RequestOrder lists those ids oldest
	// first. Invariant: the keys of Requests are exactly RequestOrder. A
	// command applied again under the same id (a proposal retried after an
	// answer was lost) gets the remembered result and changes nothing.
	Requests     map[string]Result `json:"requests,omitempty"`
	RequestOrder []string          `json:"request_order,omitempty"`
	// Removed holds the brokers unregistered by cluster brokers remove.
	// Invariant: disjoint from Brokers; a removed id never registers
	// again, and the controller leader removes it from the controller
	// quorum's voters (broker controller.go).
	Removed map[BrokerID]bool `json:"removed,omitempty"`
}

// MaxRememberedRequests bounds State.Requests. A broker retries a proposal
// for at most its request's deadline (seconds), during which far fewer
// commands than this commit.
const MaxRememberedRequests = 1024

func newState() *State {
	return &State{Brokers: map[BrokerID]Broker{}, Topics: map[string]*Topic{}, NextTopicID: 1, NextProducerID: 1000, Requests: map[string]Result{}, Removed: map[BrokerID]bool{}}
}

// clone returns a deep copy.
func (s *State) clone() *State {
	c := &State{Brokers: make(map[BrokerID]Broker, len(s.Brokers)), Topics: make(map[string]*Topic, len(s.Topics)),
		NextTopicID: s.NextTopicID, NextProducerID: s.NextProducerID, Index: s.Index,
		Requests: make(map[string]Result, len(s.Requests)), RequestOrder: slices.Clone(s.RequestOrder), Removed: make(map[BrokerID]bool, len(s.Removed))}
	for id := range s.Removed {
		c.Removed[id] = true
	}
	for id, r := range s.Requests {
		c.Requests[id] = r
	}
	for id, b := range s.Brokers {
		c.Brokers[id] = b
	}
	for n, t := range s.Topics {
		ct := &Topic{Name: t.Name, ID: t.ID, Configs: make(map[string]string, len(t.Configs)), Partitions: make([]PartitionState, len(t.Partitions))}
		for k, v := range t.Configs {
			ct.Configs[k] = v
		}
		for i, p := range t.Partitions {
			ct.Partitions[i] = p.clone()
		}
		c.Topics[n] = ct
	}
	return c
}

// MaxReassignSteps bounds PartitionState.Steps.
const MaxReassignSteps = 32

// clone returns a deep copy.
func (p PartitionState) clone() PartitionState {
	return PartitionState{Replicas: slices.Clone(p.Replicas), Leader: p.Leader, Epoch: p.Epoch, ISR: slices.Clone(p.ISR),
		Target: slices.Clone(p.Target), Adding: slices.Clone(p.Adding), Removing: slices.Clone(p.Removing),
		Voters: slices.Clone(p.Voters), Learners: slices.Clone(p.Learners), Steps: slices.Clone(p.Steps), Throttle: p.Throttle}
}

// Reassigning reports whether a reassignment of the partition is in progress.
func (p PartitionState) Reassigning() bool { return len(p.Target) > 0 }

// BrokerIDs returns the registered broker ids in ascending order.
func (s *State) BrokerIDs() []BrokerID {
	ids := make([]BrokerID, 0, len(s.Brokers))
	for id := range s.Brokers {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// TopicNames returns the topic names in ascending order.
func (s *State) TopicNames() []string {
	names := make([]string, 0, len(s.Topics))
	for n := range s.Topics {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ReplicaCounts returns how many partition replicas each broker holds,
// internal topics included, and the total.
func (s *State) ReplicaCounts() (map[BrokerID]int, int) {
	per := map[BrokerID]int{}
	total := 0
	for _, t := range s.Topics {
		for _, p := range t.Partitions {
			for _, r := range p.Replicas {
				per[r]++
				total++
			}
		}
	}
	return per, total
}

// CheckBudget refuses, with POLICY_VIOLATION naming the limit and the
// current count, a new topic whose replicas (assignment) would take the
// cluster over maxPerBroker times its registered brokers, or any broker over
// maxPerBroker. maxPerBroker <= 0 checks nothing (commands written before
// the budget existed).
func (s *State) CheckBudget(name string, assignment [][]BrokerID, maxPerBroker int) error {
	if maxPerBroker <= 0 {
		return nil
	}
	per, total := s.ReplicaCounts()
	adding := 0
	add := map[BrokerID]int{}
	for _, rs := range assignment {
		adding += len(rs)
		for _, r := range rs {
			add[r]++
		}
	}
	limit := maxPerBroker * len(s.Brokers)
	if total+adding > limit {
		return kerr.New(kerr.PolicyViolation, "topic %q needs %d partition replicas; the cluster holds %d of its limit of %d (%d brokers x --max-partitions-per-broker %d)",
			name, adding, total, limit, len(s.Brokers), maxPerBroker)
	}
	ids := make([]BrokerID, 0, len(add))
	for id := range add {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if per[id]+add[id] > maxPerBroker {
			return kerr.New(kerr.PolicyViolation, "topic %q would put %d partition replicas on broker %d, which holds %d of its limit of %d (--max-partitions-per-broker)",
				name, add[id], id, per[id], maxPerBroker)
		}
	}
	return nil
}

// CollidingTopic returns an existing topic whose name differs from name
// only by '.' versus '_' (both become '_' in metric names, so Kafka refuses
// the second), or "".
func (s *State) CollidingTopic(name string) string {
	key := metricName(name)
	for n := range s.Topics {
		if n != name && metricName(n) == key {
			return n
		}
	}
	return ""
}

func metricName(topic string) string { return strings.ReplaceAll(topic, ".", "_") }
