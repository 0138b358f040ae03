package clitext

import (
	"strings"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/assign"
	"github.com/tapes-dev/tapes/internal/consumerproto"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
)

func TestLagTime(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second:                          "0s",
		0:                                     "0s",
		350 * time.Millisecond:                "350ms",
		12340 * time.Millisecond:              "12.3s",
		time.Hour + 2*time.Minute + 5:         "1h2m0s",
		3*time.Minute + 1600*time.Millisecond: "3m2s",
	} {
		if got := LagTime(d); got != want {
			t.Errorf("LagTime(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestAssignment(t *testing.T) {
	got := Assignment([]*tapesv1.TopicPartitions{{Topic: "pay", Partitions: []int32{2}}, {Topic: "orders", Partitions: []int32{1, 0}}, {Topic: "none"}})
	if got != "orders(0,1),pay(2)" {
		t.Fatalf("Assignment = %q", got)
	}
	if got := Assignment(nil); got != "-" {
		t.Fatalf("Assignment(nil) = %q", got)
	}
}

// TestMemberAssignmentCells: a consumer group's assignment bytes (Kafka's
// consumer protocol, from whichever client led) decode for display; another
// protocol type's, or undecodable bytes, say what they are.
func TestMemberAssignmentCells(t *testing.T) {
	consumer := &tapesv1.GroupDescription{GroupId: "g", ProtocolType: "consumer"}
	encoded := consumerproto.EncodeAssignment([]assign.TopicPartition{{Topic: "pay", Partition: 2}, {Topic: "orders", Partition: 1}, {Topic: "orders", Partition: 0}}, 1)
	connect := &tapesv1.GroupDescription{GroupId: "c", ProtocolType: "connect"}
	for _, c := range []struct {
		d           *tapesv1.GroupDescription
		assignment  []byte
		count, cell string
	}{
		{consumer, encoded, "3", "orders(0,1),pay(2)"},
		{consumer, nil, "0", "-"},
		{consumer, []byte{0, 1, 0, 0}, "?", "(4 undecodable bytes)"},
		{connect, []byte("{}"), "-", "(2 bytes, protocol type connect)"},
		{connect, nil, "0", "-"},
	} {
		m := &tapesv1.GroupMember{MemberId: "m", Assignment: c.assignment}
		if count, cell := PartitionCountCell(c.d, m), AssignmentCell(c.d, m); count != c.count || cell != c.cell {
			t.Errorf("%s %x: %q %q, want %q %q", c.d.ProtocolType, c.assignment, count, cell, c.count, c.cell)
		}
	}
	d := &tapesv1.GroupDescription{GroupId: "g", ProtocolType: "consumer", Members: []*tapesv1.GroupMember{{MemberId: "m", Assignment: encoded}}}
	g := NewGroupOffsets(d, nil)
	if r := g.rows[TP{"orders", 1}]; r == nil || r.Owner.GetMemberId() != "m" || len(g.rows) != 3 {
		t.Fatalf("offset rows %v", g.rows)
	}
}

// TestWriteTopicReassigning: describe shows a partition being reassigned
// with its adding and removing replicas, the Raft configuration, and its
// catch-up throttle when it has one.
func TestWriteTopicReassigning(t *testing.T) {
	p := &tapesv1.PartitionMetadata{Partition: 0, LeaderId: 1, Replicas: []int32{1, 2, 3, 4}, Isr: []int32{1, 2, 3}, LeaderEpoch: 3,
		AddingReplicas: []int32{4}, RemovingReplicas: []int32{3}, RaftVoters: []int32{1, 2, 3}, RaftLearners: []int32{4}, ThrottleBytesPerSec: 262144}
	tm := &tapesv1.TopicMetadata{Name: "orders", TopicId: 1, Partitions: []*tapesv1.PartitionMetadata{p}}
	var b strings.Builder
	WriteTopic(&b, tm)
	want := "  Topic: orders  Partition: 0  Leader: 1  Replicas: 1,2,3,4  Isr: 1,2,3  Epoch: 3  LogStart: 0  HighWatermark: 0" +
		"  Adding Replicas: 4  Removing Replicas: 3  Voters: 1,2,3  NonVoters: 4  Throttle: 262144 B/s\n"
	if !strings.HasSuffix(b.String(), want) {
		t.Fatalf("describe =\n%s\nwant it to end with\n%s", b.String(), want)
	}
	p.ThrottleBytesPerSec = 0
	b.Reset()
	WriteTopic(&b, tm)
	if strings.Contains(b.String(), "Throttle") {
		t.Fatalf("unthrottled, describe shows a throttle:\n%s", b.String())
	}
}
