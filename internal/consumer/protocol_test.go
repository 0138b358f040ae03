package consumer

import (
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tapes-dev/tapes/internal/assign"
	"github.com/tapes-dev/tapes/internal/consumerproto"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
)

// TestLeaderDecodesEveryClientsMetadata: as leader, consumerd decodes a
// mixed group's metadata (a v0 member, a v1 member owning a partition, and
// its own v3), runs the assignor and encodes each member's part at the
// version it sent; the parts read back through kmsg.
func TestLeaderDecodesEveryClientsMetadata(t *testing.T) {
	v0 := kmsg.NewConsumerMemberMetadata()
	v0.Topics = []string{"orders"}
	v1 := kmsg.NewConsumerMemberMetadata()
	v1.Version, v1.Topics = 1, []string{"orders"}
	v1.OwnedPartitions = []kmsg.ConsumerMemberMetadataOwnedPartition{{Topic: "orders", Partitions: []int32{1}}}
	c := &Consumer{cfg: Config{Topic: "orders"}, assignor: assign.CooperativeSticky{}}
	own := c.subscription(joinRequest{owned: []TopicPartition{{Topic: "orders", Partition: 0}}, generation: 4})
	members := []*tapesv1.JoinGroupMember{
		{MemberId: "a-old", Metadata: v0.AppendTo(nil)},
		{MemberId: "b-librdkafka", Metadata: v1.AppendTo(nil)},
		{MemberId: "c-consumerd", Metadata: own},
	}
	subs, versions, err := decodeMembers(members)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[assign.MemberID]assign.Subscription{}
	for _, s := range subs {
		byID[s.Member] = s
	}
	if s := byID["b-librdkafka"]; !slices.Equal(s.Owned, []TopicPartition{{Topic: "orders", Partition: 1}}) || s.Generation != -1 {
		t.Fatalf("v1 member: %+v", s)
	}
	if s := byID["c-consumerd"]; !slices.Equal(s.Owned, []TopicPartition{{Topic: "orders", Partition: 0}}) || s.Generation != 4 {
		t.Fatalf("own subscription: %+v", s)
	}
	if versions["a-old"] != 0 || versions["b-librdkafka"] != 1 || versions["c-consumerd"] != 3 {
		t.Fatalf("versions %v", versions)
	}
	out, err := assign.Range{}.Assign(map[string]int32{"orders": 3}, subs)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, ma := range encodeAssignments(out, versions) {
		var m kmsg.ConsumerMemberAssignment
		if err := m.ReadFrom(ma.Assignment); err != nil {
			t.Fatal(err)
		}
		if m.Version != versions[assign.MemberID(ma.MemberId)] {
			t.Errorf("member %s gets version %d", ma.MemberId, m.Version)
		}
		a, err := consumerproto.DecodeAssignment(ma.Assignment)
		if err != nil || !slices.Equal(a.Partitions, out[assign.MemberID(ma.MemberId)]) {
			t.Errorf("member %s: %v %v, want %v", ma.MemberId, a.Partitions, err, out[assign.MemberID(ma.MemberId)])
		}
		total += len(a.Partitions)
	}
	if total != 3 {
		t.Fatalf("%d partitions assigned, want 3", total)
	}
	if _, _, err := decodeMembers([]*tapesv1.JoinGroupMember{{MemberId: "x", Metadata: []byte{1}}}); err == nil {
		t.Fatal("undecodable metadata accepted")
	}
}
