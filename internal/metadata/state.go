package metadata

import (
	"slices"
	"sort"
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
}

// PartitionState is the controller's view of one partition.
type PartitionState struct {
	// Replicas is the assignment; Replicas[0] is the preferred leader. It
	// never changes after creation (no reassignment yet).
	Replicas []BrokerID `json:"replicas"`
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
}

func newState() *State {
	return &State{Brokers: map[BrokerID]Broker{}, Topics: map[string]*Topic{}, NextTopicID: 1, NextProducerID: 1000}
}

// clone returns a deep copy.
func (s *State) clone() *State {
	c := &State{Brokers: make(map[BrokerID]Broker, len(s.Brokers)), Topics: make(map[string]*Topic, len(s.Topics)),
		NextTopicID: s.NextTopicID, NextProducerID: s.NextProducerID}
	for id, b := range s.Brokers {
		c.Brokers[id] = b
	}
	for n, t := range s.Topics {
		ct := &Topic{Name: t.Name, ID: t.ID, Configs: make(map[string]string, len(t.Configs)), Partitions: make([]PartitionState, len(t.Partitions))}
		for k, v := range t.Configs {
			ct.Configs[k] = v
		}
		for i, p := range t.Partitions {
			ct.Partitions[i] = PartitionState{Replicas: slices.Clone(p.Replicas), Leader: p.Leader, Epoch: p.Epoch, ISR: slices.Clone(p.ISR)}
		}
		c.Topics[n] = ct
	}
	return c
}

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
