package systest

import (
	"context"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/assign"
	"github.com/tapes-dev/tapes/internal/client"
	"github.com/tapes-dev/tapes/internal/consumerproto"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/group"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// TestCoordinatorSurvivesKill: a member joins, gets an assignment and
// commits; the coordinator's broker is SIGKILLed. The next leader of the
// group's __consumer_offsets partition rebuilds the group from the
// replicated log: the member's heartbeats (same generation) are accepted
// there, its committed offsets are intact, and it keeps committing.
// The brokers compact __consumer_offsets after 100 records, and the member
// commits 150 times first: the new coordinator rebuilds the group from a
// compacted partition (its log start moved past the superseded commits).
func TestCoordinatorSurvivesKill(t *testing.T) {
	e := start(t, 3, "--offsets-compact-after", "100")
	e.CreateTopic("orders", 2, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := e.Client

	coord, err := cl.FindCoordinator(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	join := &tapesv1.JoinGroupRequest{GroupId: "demo", ClientId: "consumer-1", ProtocolType: "consumer",
		Protocols:        []*tapesv1.JoinGroupProtocol{{Name: "range", Metadata: consumerproto.EncodeSubscription(consumerproto.Subscription{Topics: []string{"orders"}, Generation: -1})}},
		SessionTimeoutMs: 10000, RebalanceTimeoutMs: 10000}
	_, err = cl.JoinGroup(ctx, join)
	member, ok := client.MemberIDFrom(err)
	if !ok {
		t.Fatalf("first join: %v; want MEMBER_ID_REQUIRED", err)
	}
	join.MemberId = member
	jr, err := cl.JoinGroup(ctx, join)
	if err != nil || jr.LeaderId != member || jr.GenerationId != 1 {
		t.Fatalf("join: %+v %v", jr, err)
	}
	all := consumerproto.EncodeAssignment([]assign.TopicPartition{{Topic: "orders", Partition: 0}, {Topic: "orders", Partition: 1}}, 3)
	got, err := cl.SyncGroup(ctx, &tapesv1.SyncGroupRequest{GroupId: "demo", GenerationId: 1, MemberId: member,
		Assignments: []*tapesv1.MemberAssignment{{MemberId: member, Assignment: all}}}, time.Second)
	if a, derr := consumerproto.DecodeAssignment(got); err != nil || derr != nil || len(a.Partitions) != 2 {
		t.Fatalf("sync: %v %v", got, err)
	}
	commit := func(o0, o1 int64) error {
		return cl.OffsetCommit(ctx, &tapesv1.OffsetCommitRequest{GroupId: "demo", GenerationId: 1, MemberId: member,
			Offsets: []*tapesv1.OffsetCommitPartition{{Topic: "orders", Partition: 0, Offset: o0}, {Topic: "orders", Partition: 1, Offset: o1}}})
	}
	for i := range 150 {
		if err := commit(int64(100+i), int64(200+i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := commit(5, 7); err != nil { // offsets may go back (a reset)
		t.Fatal(err)
	}
	omd, err := cl.Metadata(ctx, []string{group.OffsetsTopic}, true)
	if err != nil {
		t.Fatal(err)
	}
	offsetsPartition := group.PartitionFor("demo", int32(len(omd.Topics[0].Partitions)))
	e.WaitFor(10*time.Second, "the coordinator to compact "+group.OffsetsTopic, func() bool {
		return e.Partition(group.OffsetsTopic, offsetsPartition).LogStartOffset > 0
	})
	md := e.Partition(group.OffsetsTopic, offsetsPartition)
	t.Logf("%s-%d: log start %d, high watermark %d", group.OffsetsTopic, offsetsPartition, md.LogStartOffset, md.HighWatermark)
	// A stale generation is fenced.
	err = cl.OffsetCommit(ctx, &tapesv1.OffsetCommitRequest{GroupId: "demo", GenerationId: 0, MemberId: member,
		Offsets: []*tapesv1.OffsetCommitPartition{{Topic: "orders", Partition: 0, Offset: 1}}})
	if !kerr.Is(err, kerr.IllegalGeneration) {
		t.Fatalf("stale commit: %v; want ILLEGAL_GENERATION", err)
	}

	t.Logf("killing coordinator broker %d", coord.NodeId)
	if err := e.C.Kill(testcluster.BrokerName(coord.NodeId)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// The client finds the new coordinator by itself (NOT_COORDINATOR and
	// transport errors make it look again).
	if err := cl.Heartbeat(ctx, &tapesv1.HeartbeatRequest{GroupId: "demo", GenerationId: 1, MemberId: member}); err != nil {
		t.Fatalf("heartbeat after the coordinator's kill: %v", err)
	}
	t.Logf("the member's heartbeat was accepted by the new coordinator %v after the kill", time.Since(start).Round(time.Millisecond))
	now, err := cl.FindCoordinator(ctx, "demo")
	if err != nil || now.NodeId == coord.NodeId {
		t.Fatalf("coordinator after the kill: %+v %v", now, err)
	}
	offsets, err := cl.OffsetFetch(ctx, "demo", nil)
	if err != nil || len(offsets) != 2 || offsets[0].Offset != 5 || offsets[1].Offset != 7 {
		t.Fatalf("offsets after failover: %v %v; want orders-0 at 5, orders-1 at 7", offsets, err)
	}
	d, err := cl.DescribeGroup(ctx, "demo")
	if err != nil || d.State != "Stable" || d.GenerationId != 1 || len(d.Members) != 1 || d.CoordinatorId != now.NodeId {
		t.Fatalf("group after failover: %+v %v", d, err)
	}
	if err := commit(6, 8); err != nil {
		t.Fatalf("commit on the new coordinator: %v", err)
	}
	groups, err := cl.ListGroups(ctx)
	if err != nil && len(groups) == 0 {
		t.Fatal(err)
	}
	if len(groups) != 1 || groups[0].GroupId != "demo" {
		t.Fatalf("list groups: %v", groups)
	}
	if err := cl.LeaveGroup(ctx, "demo", member); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(5*time.Second, "the group to be empty", func() bool {
		d, err := cl.DescribeGroup(ctx, "demo")
		return err == nil && d.State == "Empty"
	})
	// Empty now: an admin commit (reset) is accepted.
	if err := cl.OffsetCommit(ctx, &tapesv1.OffsetCommitRequest{GroupId: "demo", GenerationId: -1,
		Offsets: []*tapesv1.OffsetCommitPartition{{Topic: "orders", Partition: 0, Offset: 0}}}); err != nil {
		t.Fatal(err)
	}
}
