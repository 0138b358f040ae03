package broker

import (
	"math"
	"slices"
	"testing"

	fkerr "github.com/twmb/franz-go/pkg/kerr"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/group"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// TestKafkaMetadataResponse: how the broker's view becomes Kafka's answer.
// Only live brokers with a Kafka address are listed; a partition whose
// leader is not listed has leader -1 and LEADER_NOT_AVAILABLE; replicas on
// brokers not live are offline; the Raft term is the int32 leader epoch
// (-1 while unknown); a missing topic keeps UNKNOWN_TOPIC_OR_PARTITION.
func TestKafkaMetadataResponse(t *testing.T) {
	view := &tapesv1.MetadataResponse{ControllerId: 2, Brokers: []*tapesv1.BrokerInfo{
		{Id: 1, KafkaAddress: "127.0.0.1:9001", Alive: true},
		{Id: 2, KafkaAddress: "h2:9002", Alive: true},
		{Id: 3, KafkaAddress: "127.0.0.1:9003", Alive: false},
		{Id: 4, KafkaAddress: "", Alive: true}, // no Kafka listener
	}, Topics: []*tapesv1.TopicMetadata{
		{Name: "orders", TopicId: 7, Partitions: []*tapesv1.PartitionMetadata{
			{Partition: 0, LeaderId: 1, LeaderEpoch: 5, Replicas: []int32{1, 3, 2}, Isr: []int32{1, 2}},
			{Partition: 1, LeaderId: 3, LeaderEpoch: 4, Replicas: []int32{3, 1, 2}, Isr: []int32{3}},
			{Partition: 2, LeaderId: -1, Replicas: []int32{2, 4}, Isr: []int32{}, Error: kerr.New(kerr.LeaderNotAvailable, "none").Detail},
			{Partition: 3, LeaderId: 4, LeaderEpoch: math.MaxInt32 + 9, Replicas: []int32{4}, Isr: []int32{4}},
		}},
		{Name: "gone", Error: kerr.New(kerr.UnknownTopicOrPartition, "gone").Detail},
		{Name: group.OffsetsTopic, TopicId: 8},
	}}
	resp := kafkaMetadataResponse(view)
	if resp.ControllerID != 2 || len(resp.Brokers) != 2 ||
		resp.Brokers[0].NodeID != 1 || resp.Brokers[0].Host != "127.0.0.1" || resp.Brokers[0].Port != 9001 ||
		resp.Brokers[1].NodeID != 2 || resp.Brokers[1].Host != "h2" || resp.Brokers[1].Port != 9002 {
		t.Fatalf("brokers %+v, controller %d", resp.Brokers, resp.ControllerID)
	}
	if len(resp.Topics) != 3 {
		t.Fatalf("topics %+v", resp.Topics)
	}
	orders := resp.Topics[0]
	if *orders.Topic != "orders" || orders.ErrorCode != 0 || orders.IsInternal || orders.TopicID != kafkaTopicID(7) || orders.TopicID == [16]byte{} {
		t.Fatalf("orders %+v", orders)
	}
	type want struct {
		leader, epoch int32
		code          int16
		offline       []int32
	}
	for i, w := range []want{
		{1, 5, 0, []int32{3}},
		{-1, 4, fkerr.LeaderNotAvailable.Code, []int32{3}},
		{-1, -1, fkerr.LeaderNotAvailable.Code, []int32{}},
		{-1, math.MaxInt32, fkerr.LeaderNotAvailable.Code, []int32{}},
	} {
		p := orders.Partitions[i]
		if p.Partition != int32(i) || p.Leader != w.leader || p.LeaderEpoch != w.epoch || p.ErrorCode != w.code ||
			!slices.Equal(p.OfflineReplicas, w.offline) || !slices.Equal(p.Replicas, view.Topics[0].Partitions[i].Replicas) ||
			!slices.Equal(p.ISR, view.Topics[0].Partitions[i].Isr) {
			t.Errorf("orders-%d = %+v, want %+v", i, p, w)
		}
	}
	if gone := resp.Topics[1]; *gone.Topic != "gone" || fkerr.ErrorForCode(gone.ErrorCode) != fkerr.UnknownTopicOrPartition || len(gone.Partitions) != 0 {
		t.Errorf("gone = %+v", gone)
	}
	if !resp.Topics[2].IsInternal {
		t.Errorf("%s not internal", group.OffsetsTopic)
	}
}
