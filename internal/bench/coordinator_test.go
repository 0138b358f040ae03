package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/group"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// TestBenchCoordinatorFailover prints what compacting __consumer_offsets
// buys a group coordinator's failover: one group commits N offsets (8
// committers, 12 partitions), the coordinator is SIGKILLed, and the time
// until the next coordinator answers OffsetFetch with the last commits is
// measured, with compaction off and at the default threshold.
func TestBenchCoordinatorFailover(t *testing.T) {
	needBench(t)
	commits := setting("TAPES_BENCH_COMMITS", 120_000)
	fmt.Printf("\ngroup coordinator failover after %d offset commits (8 committers, 12 partitions):\n", commits)
	for _, after := range []string{"0", "50000"} {
		e := testcluster.Start(t, binDir, 3, append(brokerArgs(), "--offsets-compact-after", after)...)
		rate, last := commitMany(t, e, "bench", commits)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		coord, err := e.Client.FindCoordinator(ctx, "bench")
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		md := e.Partition(group.OffsetsTopic, offsetsPartition(t, e, "bench"))
		if err := e.C.Kill(testcluster.BrokerName(coord.NodeId)); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			got, err := e.Client.OffsetFetch(ctx, "bench", nil)
			cancel()
			if err == nil && sameOffsets(got, last) {
				break
			}
			if time.Since(killed) > time.Minute {
				t.Fatalf("offsets not answered a minute after the coordinator's kill: err %v, fetched %v, want %v", err, fetchedOffsets(got), last)
			}
		}
		took := time.Since(killed)
		fmt.Printf("  --offsets-compact-after %-6s %8.0f commits/s; partition held %d records; SIGKILL -> offsets answered %.2f s\n",
			after, rate, md.HighWatermark-md.LogStartOffset, took.Seconds())
		e.C.Close()
	}
}

// commitMany commits n offsets of group to "orders" partitions 0..11 as an
// admin (8 at a time) and returns commits/s and the last offset per
// partition. Each partition has one committer (partition p belongs to
// committer p%8), whose commits go one after another with rising offsets,
// so the last offset committed to a partition is the one the group holds:
// two commits of one partition in flight at once could be applied in
// either order (the later one wins, as in Kafka), and the test would then
// want an offset the group rightly does not hold.
func commitMany(t *testing.T, e *testcluster.Env, groupID string, n int) (float64, map[int32]int64) {
	const committers, partitions = 8, 12
	var next atomic.Int64
	var mu sync.Mutex
	last := map[int32]int64{}
	var wg sync.WaitGroup
	start := time.Now()
	for c := range int32(committers) {
		var own []int32
		for p := c; p < partitions; p += committers {
			own = append(own, p)
		}
		wg.Go(func() {
			for k := 0; ; k++ {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				p := own[k%len(own)]
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				err := e.Client.OffsetCommit(ctx, &tapesv1.OffsetCommitRequest{GroupId: groupID, GenerationId: -1,
					Offsets: []*tapesv1.OffsetCommitPartition{{Topic: "orders", Partition: p, Offset: i}}})
				cancel()
				if err != nil {
					t.Errorf("commit %d: %v", i, err)
					return
				}
				mu.Lock()
				last[p] = i
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return float64(n) / time.Since(start).Seconds(), last
}

// offsetsPartition is the __consumer_offsets partition of groupID.
func offsetsPartition(t *testing.T, e *testcluster.Env, groupID string) int32 {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	md, err := e.Client.Metadata(ctx, []string{group.OffsetsTopic}, false)
	if err != nil {
		t.Fatal(err)
	}
	return group.PartitionFor(groupID, int32(len(md.Topics[0].Partitions)))
}

// sameOffsets reports whether fetched holds exactly want.
func sameOffsets(fetched []*tapesv1.CommittedOffset, want map[int32]int64) bool {
	if len(fetched) != len(want) {
		return false
	}
	for _, o := range fetched {
		if want[o.Partition] != o.Offset {
			return false
		}
	}
	return true
}

// fetchedOffsets renders fetched as partition -> offset, for a failure
// message beside the offsets wanted.
func fetchedOffsets(fetched []*tapesv1.CommittedOffset) map[int32]int64 {
	out := map[int32]int64{}
	for _, o := range fetched {
		out[o.Partition] = o.Offset
	}
	return out
}
