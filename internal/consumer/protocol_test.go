package consumer

import (
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
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
	subs, versions, undecodable := decodeMembers(members)
	if undecodable != nil {
		t.Fatal(undecodable)
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
	// A member whose metadata does not decode gets nothing; the others go on.
	subs, _, undecodable = decodeMembers(append(members, &tapesv1.JoinGroupMember{MemberId: "x-broken", Metadata: []byte{1}}))
	if undecodable["x-broken"] == nil || len(undecodable) != 1 || len(subs) != 4 {
		t.Fatalf("undecodable %v, %d subscriptions", undecodable, len(subs))
	}
	out, err = assign.Range{}.Assign(map[string]int32{"orders": 3}, subs)
	if err != nil || len(out["x-broken"]) != 0 || len(out) != 4 {
		t.Fatalf("with a broken member: %v %v", out, err)
	}
}

// joinMembers returns JoinGroup members for metadata by member id, sorted.
func joinMembers(meta map[string][]byte) []*tapesv1.JoinGroupMember {
	var out []*tapesv1.JoinGroupMember
	for id, m := range meta {
		out = append(out, &tapesv1.JoinGroupMember{MemberId: id, Metadata: m})
	}
	slices.SortFunc(out, func(a, b *tapesv1.JoinGroupMember) int { return strings.Compare(a.MemberId, b.MemberId) })
	return out
}

// TestFranzGoMemberUnderConsumerdLeader: franz-go's own cooperative-sticky
// balancer writes a member's metadata (v3, its sticky user data); consumerd
// as leader decodes it, keeps the partition it owns where it is, and franz-go
// parses the assignment consumerd encodes for it.
func TestFranzGoMemberUnderConsumerdLeader(t *testing.T) {
	franz := kgo.CooperativeStickyBalancer()
	c := &Consumer{cfg: Config{Topic: "orders"}, assignor: assign.CooperativeSticky{}}
	subs, versions, undecodable := decodeMembers(joinMembers(map[string][]byte{
		"franz":     franz.JoinGroupMetadata([]string{"orders"}, map[string][]int32{"orders": {3}}, 6),
		"consumerd": c.subscription(joinRequest{owned: []TopicPartition{{Topic: "orders", Partition: 0}}, generation: 6}),
	}))
	if undecodable != nil {
		t.Fatal(undecodable)
	}
	out, err := assign.CooperativeSticky{}.Assign(map[string]int32{"orders": 4}, subs)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]int32{}
	for _, ma := range encodeAssignments(out, versions) {
		if ma.MemberId != "franz" {
			continue
		}
		if got, err = franz.ParseSyncAssignment(ma.Assignment); err != nil {
			t.Fatalf("franz-go cannot parse its assignment: %v", err)
		}
	}
	if !slices.Contains(got["orders"], 3) {
		t.Fatalf("franz-go member got %v; it owned orders/3 and must keep it", got)
	}
	if !slices.Contains(out["consumerd"], TopicPartition{Topic: "orders", Partition: 0}) {
		t.Fatalf("consumerd got %v; it owned orders/0", out["consumerd"])
	}
}

// TestConsumerdMemberUnderFranzGoLeader: franz-go's cooperative-sticky
// balancer, leading, reads consumerd's metadata (owned partitions and
// generation) and consumerd decodes the assignment franz-go writes.
func TestConsumerdMemberUnderFranzGoLeader(t *testing.T) {
	franz := kgo.CooperativeStickyBalancer()
	c := &Consumer{cfg: Config{Topic: "orders"}, assignor: assign.CooperativeSticky{}}
	members := []kmsg.JoinGroupResponseMember{
		{MemberID: "consumerd", ProtocolMetadata: c.subscription(joinRequest{owned: []TopicPartition{{Topic: "orders", Partition: 3}, {Topic: "orders", Partition: 0}}, generation: 9})},
		{MemberID: "franz", ProtocolMetadata: franz.JoinGroupMetadata([]string{"orders"}, map[string][]int32{"orders": {1}}, 9)},
	}
	b, topics, err := franz.MemberBalancer(members)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := topics["orders"]; !ok || len(topics) != 1 {
		t.Fatalf("franz-go read topics %v", topics)
	}
	plan, err := b.(kgo.GroupMemberBalancerOrError).BalanceOrError(map[string]int32{"orders": 4})
	if err != nil {
		t.Fatal(err)
	}
	var mine []TopicPartition
	for _, a := range plan.IntoSyncAssignment() {
		if a.MemberID == "consumerd" {
			decoded, err := consumerproto.DecodeAssignment(a.MemberAssignment)
			if err != nil {
				t.Fatal(err)
			}
			mine = decoded.Partitions
		}
	}
	// Stickiness proves franz-go read the owned partitions: consumerd keeps
	// both (4 partitions over 2 members).
	if want := []TopicPartition{{Topic: "orders", Partition: 0}, {Topic: "orders", Partition: 3}}; !slices.Equal(mine, want) {
		t.Fatalf("consumerd got %v from franz-go, want %v", mine, want)
	}
}
