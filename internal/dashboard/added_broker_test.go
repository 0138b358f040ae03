package dashboard

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/testcluster"
)

// TestLivePageShowsAddedBroker: a broker the launcher adds to the running
// cluster (cluster brokers add) shows on the live page, and once a
// partition is reassigned onto it the page reads its replica too (its log
// end among the partition's replica ends), with the chaos links on.
func TestLivePageShowsAddedBroker(t *testing.T) {
	bin := buildCluster(t)
	e := testcluster.StartLinked(t, bin, 3, testcluster.FastBrokerArgs...)
	e.CreateTopic("grow", 1, 3, map[string]string{"min.insync.replicas": "2"})
	base, _ := servePage(t, e, Config{})
	waitState(t, base, "3 brokers", 20*time.Second, func(s *Snapshot) bool { return len(s.Brokers) == 3 })
	if _, err := e.C.AddBroker(4); err != nil {
		t.Fatal(err)
	}
	waitState(t, base, "broker-4 running on the page", 30*time.Second, func(s *Snapshot) bool {
		return len(s.Brokers) == 4 && s.Brokers[3].Name == "broker-4" && s.Brokers[3].State == "running"
	})
	target := append(slices.Clone(e.Partition("grow", 0).Replicas[:2]), 4)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Retried: broker 4 may not be registered and seen alive yet.
	for {
		err := e.Client.ReassignPartition(ctx, "grow", 0, target)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("reassign grow-0 to %v: %v", target, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	waitState(t, base, "broker 4's replica of grow-0 on the page", 60*time.Second, func(s *Snapshot) bool {
		if len(s.Topics) != 1 || len(s.Topics[0].Partitions) != 1 {
			return false
		}
		_, ok := s.Topics[0].Partitions[0].ReplicaEnds[4]
		return ok
	})
}
