// Package consumerproto encodes and decodes Kafka's consumer protocol: the
// member metadata a consumer sends in JoinGroup under protocol type
// "consumer" (ConsumerProtocolSubscription, versions 0-3) and the assignment
// the group's leader hands each member in SyncGroup
// (ConsumerProtocolAssignment, versions 0-3), through franz-go's kmsg.
//
// The group coordinator never calls this package: to it metadata and
// assignments are opaque bytes. consumerd's member (package consumer)
// encodes its subscription and, as leader, decodes every member's (whatever
// client sent it); `cluster groups describe` and the live page decode for
// display. Everything here is pure and safe from any goroutine.
package consumerproto

import (
	"encoding/binary"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tapes-dev/tapes/internal/assign"
)

// ProtocolType is the protocol type of consumer groups.
const ProtocolType = "consumer"

// SubscriptionVersion is the ConsumerProtocolSubscription version Encode
// writes: v3 carries topics, user data, owned partitions (v1), generation
// (v2) and rack (v3).
const SubscriptionVersion = 3

// AssignmentVersion is the highest ConsumerProtocolAssignment version
// EncodeAssignment writes (v1-v3 have the same fields as v0; the version
// follows the subscription's so that every client reads it).
const AssignmentVersion = 3

// Subscription is a consumer's member metadata.
type Subscription struct {
	// Version as decoded (Encode always writes SubscriptionVersion).
	Version  int16
	Topics   []string
	UserData []byte
	// Owned: the partitions the member owns now (v1+; empty under eager
	// assignors and in v0).
	Owned []assign.TopicPartition
	// Generation in which it was given them; -1 when unknown (v0, v1) or
	// owning nothing.
	Generation int32
	// Rack: the member's client.rack (v3+), "" when unset.
	Rack string
}

// Assignment is a member's part of the leader's assignment.
type Assignment struct {
	Version    int16
	Partitions []assign.TopicPartition
	UserData   []byte
}

// EncodeSubscription encodes s as ConsumerProtocolSubscription v3.
func EncodeSubscription(s Subscription) []byte {
	m := kmsg.NewConsumerMemberMetadata()
	m.Version = SubscriptionVersion
	m.Topics = s.Topics
	if m.Topics == nil {
		m.Topics = []string{}
	}
	m.UserData = s.UserData
	for _, t := range groupByTopic(s.Owned) {
		m.OwnedPartitions = append(m.OwnedPartitions, kmsg.ConsumerMemberMetadataOwnedPartition{Topic: t.topic, Partitions: t.partitions})
	}
	m.Generation = s.Generation
	if s.Rack != "" {
		m.Rack = &s.Rack
	}
	return m.AppendTo(nil)
}

// DecodeSubscription decodes member metadata of any version 0-3 (a later
// version is read as v3, as Kafka's clients do: fields are only appended).
func DecodeSubscription(b []byte) (Subscription, error) {
	var m kmsg.ConsumerMemberMetadata
	m.Default()
	if err := m.ReadFrom(b); err != nil {
		return Subscription{}, fmt.Errorf("consumer protocol subscription (%d bytes): %w", len(b), err)
	}
	if m.Version < 0 {
		return Subscription{}, fmt.Errorf("consumer protocol subscription: version %d", m.Version)
	}
	s := Subscription{Version: m.Version, Topics: m.Topics, UserData: m.UserData, Generation: -1}
	for _, o := range m.OwnedPartitions {
		for _, p := range o.Partitions {
			s.Owned = append(s.Owned, assign.TopicPartition{Topic: o.Topic, Partition: p})
		}
	}
	assign.SortPartitions(s.Owned)
	if m.Version >= 2 {
		s.Generation = m.Generation
	}
	if m.Rack != nil {
		s.Rack = *m.Rack
	}
	return s, nil
}

// EncodeAssignment encodes tps as ConsumerProtocolAssignment of version
// min(version, AssignmentVersion) (pass the member's subscription version,
// so that a client only gets a version it sent).
func EncodeAssignment(tps []assign.TopicPartition, version int16) []byte {
	m := kmsg.NewConsumerMemberAssignment()
	m.Version = max(0, min(version, AssignmentVersion))
	m.Topics = []kmsg.ConsumerMemberAssignmentTopic{}
	for _, t := range groupByTopic(tps) {
		m.Topics = append(m.Topics, kmsg.ConsumerMemberAssignmentTopic{Topic: t.topic, Partitions: t.partitions})
	}
	return m.AppendTo(nil)
}

// DecodeAssignment decodes an assignment of any version; empty bytes (what
// the coordinator hands a member the leader gave nothing) are an empty
// assignment. The partitions come back sorted.
func DecodeAssignment(b []byte) (Assignment, error) {
	if len(b) == 0 {
		return Assignment{}, nil
	}
	var m kmsg.ConsumerMemberAssignment
	m.Default()
	if err := m.ReadFrom(b); err != nil {
		return Assignment{}, fmt.Errorf("consumer protocol assignment (%d bytes): %w", len(b), err)
	}
	a := Assignment{Version: m.Version, UserData: m.UserData}
	for _, t := range m.Topics {
		for _, p := range t.Partitions {
			a.Partitions = append(a.Partitions, assign.TopicPartition{Topic: t.Topic, Partition: p})
		}
	}
	assign.SortPartitions(a.Partitions)
	return a, nil
}

// CooperativeUserData is the user data Java's CooperativeStickyAssignor
// sends (its generation as one big-endian int32), so that a leader reading
// generations from user data (clients older than subscription v2) finds it.
func CooperativeUserData(generation int32) []byte {
	return binary.BigEndian.AppendUint32(nil, uint32(generation))
}

type topicPartitions struct {
	topic      string
	partitions []int32
}

// groupByTopic groups tps by topic, topics and partitions sorted.
func groupByTopic(tps []assign.TopicPartition) []topicPartitions {
	sorted := append([]assign.TopicPartition(nil), tps...)
	assign.SortPartitions(sorted)
	var out []topicPartitions
	for _, tp := range sorted {
		if len(out) == 0 || out[len(out)-1].topic != tp.Topic {
			out = append(out, topicPartitions{topic: tp.Topic})
		}
		last := &out[len(out)-1]
		last.partitions = append(last.partitions, tp.Partition)
	}
	return out
}
