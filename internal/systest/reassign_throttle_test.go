package systest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// TestReassignThrottled: on 4 real brokers, a partition holding about 4 MiB
// moves one replica onto the fourth broker with `--throttle 262144`. A
// negative throttle is refused first (INVALID_REQUEST naming it, nothing
// recorded). While the new replica catches up, describe shows the throttle
// and the command prints progress lines with the rates the leader sees;
// the move cannot complete before (bytes - burst) / rate, the time that
// many bytes need to pass the leader's bucket (causality, not a speed
// figure: the burst is one second of the rate). Afterwards the throttle is
// gone and the new replica's log is the others'.
func TestReassignThrottled(t *testing.T) {
	const rate = 262144
	e := start(t, 4)
	e.CreateTopic("slow", 1, 3, map[string]string{"min.insync.replicas": "2"})
	e.WaitSettled("slow", 60*time.Second)
	pm := e.Partition("slow", 0)
	old := pm.Replicas
	var added, swapped int32
	for id := int32(1); id <= 4; id++ {
		if !slices.Contains(old, id) {
			added = id
		}
	}
	var target []int32
	for _, id := range old {
		if id != pm.LeaderId && swapped == 0 {
			swapped = id // a follower leaves; the leader stays
			continue
		}
		target = append(target, id)
	}
	target = append(target, added)
	ids := idList

	// About 4 MiB in 512 batches of 8 records of 1 KiB, written by 4
	// producers (acks=all), so that raft's AppendEntries of 64 entries
	// carry 512 KiB each.
	value := strings.Repeat("v", 1<<10)
	var (
		mu    sync.Mutex
		bytes int
		wg    sync.WaitGroup
	)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range 128 {
				recs := make([]*tapesv1.Record, 8)
				n := 0
				for i := range recs {
					recs[i] = &tapesv1.Record{Value: []byte(fmt.Sprintf("w%d-b%03d-r%d-%s", w, b, i, value))}
					n += len(recs[i].Value)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				_, err := e.Client.Produce(ctx, &tapesv1.ProduceRequest{Topic: "slow", Partition: 0, Acks: -1, Records: recs})
				cancel()
				if err != nil {
					t.Errorf("produce: %v", err)
					return
				}
				mu.Lock()
				bytes += n
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	out, err := cli(t, e, "", "topics", "reassign", "slow", "--partition", "0", "--replicas", ids(target), "--throttle", "-1")
	if err == nil || !strings.Contains(err.Error(), string(kerr.InvalidRequest)) || !strings.Contains(err.Error(), "-1") {
		t.Fatalf("--throttle -1: %v (stdout %q), want INVALID_REQUEST naming -1", err, out)
	}
	if pm := e.Partition("slow", 0); len(pm.AddingReplicas) != 0 || !slices.Equal(pm.Replicas, old) {
		t.Fatalf("a refused throttle changed the partition: %+v", pm)
	}

	type result struct {
		out  string
		err  error
		took time.Duration
	}
	done := make(chan result, 1)
	begin := time.Now()
	go func() {
		out, err := cli(t, e, "", "topics", "reassign", "slow", "--partition", "0", "--replicas", ids(target),
			"--throttle", fmt.Sprint(rate), "--wait-timeout", "180s")
		done <- result{out, err, time.Since(begin)}
	}()
	var described string
	var res result
	e.WaitFor(200*time.Second, "the throttled reassignment to complete", func() bool {
		select {
		case res = <-done:
			return true
		default:
		}
		if described == "" {
			if d, err := cli(t, e, "", "topics", "describe", "slow"); err == nil && strings.Contains(d, "Throttle: ") {
				described = d
			}
		}
		return false
	})
	if res.err != nil {
		t.Fatalf("reassign: %v\n%s", res.err, res.out)
	}
	least := time.Duration(float64(bytes-rate) / rate * float64(time.Second))
	t.Logf("cluster topics reassign --throttle %d (%d bytes of values, took %v, at least %v):\n%s", rate, bytes, res.took, least, res.out)
	if res.took < least {
		t.Errorf("the move of %d bytes at %d B/s (burst %d) took %v, less than the %v the throttle allows", bytes, rate, rate, res.took, least)
	}
	for _, want := range []string{
		fmt.Sprintf("Reassigning slow-0 from %s to %s, joining replicas throttled to %d B/s.", ids(old), ids(target), rate),
		fmt.Sprintf("progress: catch-up %d: lag ", added),
		fmt.Sprintf("(throttle %d B/s)", rate),
		": add-learner " + fmt.Sprint(added), ": promote " + fmt.Sprint(added), ": remove " + fmt.Sprint(swapped),
		"complete: replicas " + ids(target),
	} {
		if !strings.Contains(res.out, want) {
			t.Errorf("reassign output lacks %q", want)
		}
	}
	if !strings.Contains(described, fmt.Sprintf("Adding Replicas: %d", added)) || !strings.Contains(described, fmt.Sprintf("Throttle: %d B/s", rate)) {
		t.Errorf("describe during the move does not show the adding replica and its throttle:\n%s", described)
	}
	if d, err := cli(t, e, "", "topics", "describe", "slow"); err != nil || strings.Contains(d, "Throttle") {
		t.Errorf("describe after the move: %v\n%s", err, d)
	}
	// The throttle is off on the leader once the replica is a voter.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	leader := e.Partition("slow", 0).LeaderId
	dr, err := e.Client.DescribeReplicas(ctx, leader)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range dr.Replicas {
		for _, f := range r.Followers {
			if r.Topic == "slow" && f.ThrottleBytesPerSec != 0 {
				t.Errorf("after the move broker %d still throttles broker %d to %d B/s", leader, f.BrokerId, f.ThrottleBytesPerSec)
			}
		}
	}
	e.AssertReplicasIdentical("slow", 0, swapped)
}
