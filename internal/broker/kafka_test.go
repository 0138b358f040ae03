package broker

import (
	"math"
	"slices"
	"testing"

	fkerr "github.com/twmb/franz-go/pkg/kerr"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/group"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/metadata"
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

// TestUseLocalLeader: the leader a broker's own replica knows replaces the
// controller's only with an ISR holding it, as Kafka's Metadata never names
// a leader outside the ISR. The first case is what kcat -L showed in `make
// compat` on a just-created topic (leader 2, ISR empty, where `cluster
// topics describe` had 2,3,1): a follower knows leader 2 of term 2 before
// the controller has leader 2's report.
func TestUseLocalLeader(t *testing.T) {
	fresh := func() *tapesv1.PartitionMetadata {
		return &tapesv1.PartitionMetadata{LeaderId: -1, Replicas: []int32{2, 3, 1}, Isr: []int32{},
			Error: kerr.New(kerr.LeaderNotAvailable, "no leader yet").Detail}
	}
	type want struct {
		leader int32
		epoch  int64
		isr    []int32
		code   bool // LEADER_NOT_AVAILABLE kept
	}
	for _, c := range []struct {
		name   string
		p      *tapesv1.PartitionMetadata
		leader metadata.BrokerID
		term   int64
		own    []metadata.BrokerID
		want   want
	}{
		{"a follower of a just-created partition: the controller's answer stands", fresh(), 2, 2, nil, want{-1, 0, []int32{}, true}},
		{"the ready leader itself: its own ISR", fresh(), 2, 2, []metadata.BrokerID{2, 3, 1}, want{2, 2, []int32{2, 3, 1}, false}},
		{"the leader not ready yet: the controller's answer stands", fresh(), 2, 2, nil, want{-1, 0, []int32{}, true}},
		{"a failover the controller has not recorded: its ISR holds the new leader",
			&tapesv1.PartitionMetadata{LeaderId: 1, LeaderEpoch: 2, Replicas: []int32{1, 2, 3}, Isr: []int32{1, 2, 3}},
			2, 3, nil, want{2, 3, []int32{1, 2, 3}, false}},
		{"an older term than the controller's: ignored",
			&tapesv1.PartitionMetadata{LeaderId: 1, LeaderEpoch: 4, Replicas: []int32{1, 2, 3}, Isr: []int32{1, 3}},
			2, 3, nil, want{1, 4, []int32{1, 3}, false}},
	} {
		useLocalLeader(c.p, c.leader, c.term, c.own)
		if c.p.LeaderId != c.want.leader || c.p.LeaderEpoch != c.want.epoch || !slices.Equal(c.p.Isr, c.want.isr) || (c.p.Error != nil) != c.want.code {
			t.Errorf("%s: leader %d epoch %d isr %v error %v, want %+v", c.name, c.p.LeaderId, c.p.LeaderEpoch, c.p.Isr, c.p.Error, c.want)
		}
		// Whatever is answered, Kafka's invariant: a named leader is in the ISR.
		if c.p.LeaderId >= 0 && !slices.Contains(c.p.Isr, c.p.LeaderId) {
			t.Errorf("%s: leader %d outside the ISR %v", c.name, c.p.LeaderId, c.p.Isr)
		}
	}
}
