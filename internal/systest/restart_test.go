package systest

import (
	"context"
	"slices"
	"testing"
	"time"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
)

// produceN writes n records in batches of 50 with acks=all and fails the
// test on any error.
func (e *env) produceN(topic string, p int32, prefix string, n int) {
	e.t.Helper()
	for i := 0; i < n; i += 50 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, err := e.cl.Produce(ctx, &tapesv1.ProduceRequest{Topic: topic, Partition: p, Acks: -1, Records: records(prefix, i, min(50, n-i))})
		cancel()
		if err != nil {
			e.t.Fatalf("produce %s at %d: %v", prefix, i, err)
		}
	}
}

// followerOf returns a replica of topic/p that is not its leader.
func (e *env) followerOf(topic string, p int32) (leader, follower int32) {
	pm := e.partition(topic, p)
	for _, r := range pm.Replicas {
		if r != pm.LeaderId {
			return pm.LeaderId, r
		}
	}
	e.t.Fatalf("%s-%d has no follower", topic, p)
	return 0, 0
}

// waitISR waits until the ISR of topic/p equals want (as sets).
func (e *env) waitISR(topic string, p int32, want []int32, d time.Duration) {
	e.t.Helper()
	want = slices.Clone(want)
	slices.Sort(want)
	e.waitFor(d, "ISR to become "+fmtIDs(want), func() bool {
		isr := slices.Clone(e.partition(topic, p).Isr)
		slices.Sort(isr)
		return slices.Equal(isr, want)
	})
}

// TestRestartedFollowerCatchesUp: a follower SIGKILLed while records keep
// coming restarts on its data dir, catches up, rejoins the ISR and holds the
// leader's log.
func TestRestartedFollowerCatchesUp(t *testing.T) {
	e := startCluster(t, 3)
	e.createTopic("orders", 1, 3, nil)
	leader, follower := e.followerOf("orders", 0)
	e.produceN("orders", 0, "before", 300)
	if err := e.c.Kill(brokerName(follower)); err != nil {
		t.Fatal(err)
	}
	e.produceN("orders", 0, "during", 600)
	e.waitISR("orders", 0, others([]int32{1, 2, 3}, follower), 15*time.Second)
	if err := e.c.Restart(brokerName(follower)); err != nil {
		t.Fatal(err)
	}
	e.waitISR("orders", 0, []int32{1, 2, 3}, 30*time.Second)
	if got := e.partition("orders", 0).LeaderId; got != leader {
		t.Logf("leader moved from %d to %d meanwhile", leader, got)
	}
	if n := len(e.readAll("orders", 0)); n != 900 {
		t.Fatalf("read %d records, want 900", n)
	}
	e.assertReplicasIdentical("orders", 0, -1)
}

// TestFollowerRebuiltBySnapshot: with a tiny Raft snapshot threshold, the
// leader compacts its Raft log past a stopped follower; on restart the
// follower can only catch up through InstallSnapshot, which carries the
// partition's data.
func TestFollowerRebuiltBySnapshot(t *testing.T) {
	e := startCluster(t, 3, "--raft-snapshot-threshold", "16", "--raft-trailing-logs", "4", "--raft-snapshot-interval", "200ms")
	e.createTopic("orders", 1, 3, nil)
	_, follower := e.followerOf("orders", 0)
	e.produceN("orders", 0, "before", 200)
	if err := e.c.Kill(brokerName(follower)); err != nil {
		t.Fatal(err)
	}
	e.produceN("orders", 0, "during", 3000) // 60 entries: several snapshots, log compacted
	time.Sleep(time.Second)                 // let the leader's snapshot loop compact
	if err := e.c.Restart(brokerName(follower)); err != nil {
		t.Fatal(err)
	}
	e.waitISR("orders", 0, []int32{1, 2, 3}, 30*time.Second)
	e.waitFor(20*time.Second, "the follower to log a snapshot restore", func() bool {
		return e.logContains(brokerName(follower), "partition log restored from snapshot")
	})
	if n := len(e.readAll("orders", 0)); n != 3200 {
		t.Fatalf("read %d records, want 3200", n)
	}
	e.assertReplicasIdentical("orders", 0, -1)
}

func others(all []int32, drop int32) []int32 {
	var out []int32
	for _, id := range all {
		if id != drop {
			out = append(out, id)
		}
	}
	return out
}

func fmtIDs(ids []int32) string {
	s := "["
	for i, id := range ids {
		if i > 0 {
			s += ","
		}
		s += string(rune('0' + id))
	}
	return s + "]"
}
