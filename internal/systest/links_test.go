package systest

import (
	"context"
	"slices"
	"testing"
	"time"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/netfault"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// replicaState returns broker b's view of orders-0 (nil if it did not
// answer).
func replicaState(e *testcluster.Env, b int32, topic string) *tapesv1.ReplicaStatus {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := e.Client.DescribeReplicas(ctx, b)
	if err != nil {
		return nil
	}
	for _, r := range resp.Replicas {
		if r.Topic == topic && r.Partition == 0 {
			return r
		}
	}
	return nil
}

// isolate sets every link between broker `name` and the others to mode.
func isolate(t *testing.T, e *testcluster.Env, id int32, mode netfault.Mode) {
	t.Helper()
	name := testcluster.BrokerName(id)
	for _, b := range e.Brokers() {
		if b.ID == id {
			continue
		}
		for _, pair := range [][2]string{{name, b.Name}, {b.Name, name}} {
			if err := e.C.SetLink(pair[0], pair[1], mode, 0, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestCutLinkReallyCuts: the partition leader is cut off from the other
// brokers by the launcher's links alone (the process is never told). Its
// followers stop hearing from it and elect a new leader on the majority
// side; the old leader still takes acks=1 writes that no follower gets.
// After the heal the old leader follows the new one and truncates those
// writes: every replica holds the same log, without them.
func TestCutLinkReallyCuts(t *testing.T) {
	e := testcluster.StartLinked(t, binDir, 3, testcluster.FastBrokerArgs...)
	e.CreateTopic("orders", 1, 3, nil)
	e.ProduceN("orders", 0, "before", 100)
	old := e.Partition("orders", 0)
	leader := old.LeaderId
	t.Logf("orders-0 led by broker %d in epoch %d; cutting it off", leader, old.LeaderEpoch)
	isolate(t, e, leader, netfault.Blackhole)

	// Writes the isolated leader accepts with acks=1 while it still thinks
	// it leads (the test's client reaches it directly).
	bc, err := e.Client.Broker(context.Background(), leader)
	if err != nil {
		t.Fatal(err)
	}
	var orphans []string
	for i := 0; i < 20; i++ {
		recs := testcluster.Records("orphan", i, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := bc.Produce(ctx, &tapesv1.ProduceRequest{Topic: "orders", Partition: 0, Acks: 1, Records: recs})
		cancel()
		if err != nil {
			break // it stepped down (leader lease) or was replaced
		}
		orphans = append(orphans, string(recs[0].Value))
	}
	t.Logf("the isolated leader acknowledged %d acks=1 records", len(orphans))

	var newLeader int32
	e.WaitFor(20*time.Second, "a new leader on the majority side", func() bool {
		for _, b := range testcluster.Others([]int32{1, 2, 3}, leader) {
			if r := replicaState(e, b, "orders"); r != nil && r.RaftState == "Leader" && r.Term > old.LeaderEpoch {
				newLeader = b
				return true
			}
		}
		return false
	})
	t.Logf("broker %d was elected leader on the majority side", newLeader)
	// The followers stopped hearing from the old leader: neither follows it.
	for _, b := range testcluster.Others([]int32{1, 2, 3}, leader) {
		if r := replicaState(e, b, "orders"); r == nil || r.LeaderId == leader {
			t.Fatalf("broker %d still follows the isolated broker %d: %+v", b, leader, r)
		}
	}
	e.WaitFor(20*time.Second, "acks=all writes on the new leader", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := e.Client.Produce(ctx, &tapesv1.ProduceRequest{Topic: "orders", Partition: 0, Acks: -1, Records: testcluster.Records("after", 0, 50)})
		return err == nil
	})

	isolate(t, e, leader, netfault.Pass)
	e.WaitFor(20*time.Second, "the old leader to follow the new one", func() bool {
		r := replicaState(e, leader, "orders")
		return r != nil && r.RaftState == "Follower" && r.LeaderId == newLeader
	})
	values := testcluster.Values(e.ReadAll("orders", 0))
	for _, o := range orphans {
		if slices.Contains(values, o) {
			t.Fatalf("acks=1 record %s written to the isolated leader survived the heal", o)
		}
	}
	if len(values) != 150 {
		t.Fatalf("log holds %d records, want the 100 before and the 50 after the cut", len(values))
	}
	// Last: it stops the brokers to compare their segment files, the old
	// leader's included (truncated to the new leader's log).
	e.AssertReplicasIdentical("orders", 0, -1)
}
