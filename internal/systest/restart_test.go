package systest

import (
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/testcluster"
)

// TestRestartedFollowerCatchesUp: a follower SIGKILLed while records keep
// coming restarts on its data dir, catches up, rejoins the ISR and holds the
// leader's log.
func TestRestartedFollowerCatchesUp(t *testing.T) {
	e := start(t, 3)
	e.CreateTopic("orders", 1, 3, nil)
	leader, follower := e.FollowerOf("orders", 0)
	e.ProduceN("orders", 0, "before", 300)
	if err := e.C.Kill(testcluster.BrokerName(follower)); err != nil {
		t.Fatal(err)
	}
	e.ProduceN("orders", 0, "during", 600)
	e.WaitISR("orders", 0, testcluster.Others([]int32{1, 2, 3}, follower), 15*time.Second)
	if err := e.C.Restart(testcluster.BrokerName(follower)); err != nil {
		t.Fatal(err)
	}
	e.WaitISR("orders", 0, []int32{1, 2, 3}, 30*time.Second)
	if got := e.Partition("orders", 0).LeaderId; got != leader {
		t.Logf("leader moved from %d to %d meanwhile", leader, got)
	}
	if n := len(e.ReadAll("orders", 0)); n != 900 {
		t.Fatalf("read %d records, want 900", n)
	}
	e.AssertReplicasIdentical("orders", 0, -1)
}

// TestFollowerRebuiltBySnapshot: with a tiny Raft snapshot threshold, the
// leader compacts its Raft log past a stopped follower; on restart the
// follower can only catch up through InstallSnapshot, which carries the
// partition's data.
func TestFollowerRebuiltBySnapshot(t *testing.T) {
	e := start(t, 3, "--raft-snapshot-threshold", "16", "--raft-trailing-logs", "4", "--raft-snapshot-interval", "200ms")
	e.CreateTopic("orders", 1, 3, nil)
	_, follower := e.FollowerOf("orders", 0)
	e.ProduceN("orders", 0, "before", 200)
	if err := e.C.Kill(testcluster.BrokerName(follower)); err != nil {
		t.Fatal(err)
	}
	e.ProduceN("orders", 0, "during", 3000) // 60 entries: several snapshots, log compacted
	time.Sleep(time.Second)                 // let the leader's snapshot loop compact
	if err := e.C.Restart(testcluster.BrokerName(follower)); err != nil {
		t.Fatal(err)
	}
	e.WaitISR("orders", 0, []int32{1, 2, 3}, 30*time.Second)
	e.WaitFor(20*time.Second, "the follower to log a snapshot restore", func() bool {
		return e.LogContains(testcluster.BrokerName(follower), "partition log restored from snapshot")
	})
	if n := len(e.ReadAll("orders", 0)); n != 3200 {
		t.Fatalf("read %d records, want 3200", n)
	}
	e.AssertReplicasIdentical("orders", 0, -1)
}
