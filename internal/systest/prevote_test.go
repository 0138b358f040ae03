package systest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/eventually"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// TestResumedFollowerDeposesNobody (issue 15, point 3): a broker that leads
// nothing is SIGSTOPped for several election timeouts, long enough to
// leave the ISR of every partition, and SIGCONTed. Its Raft replicas stand
// for election as soon as they run again, but pre-vote (raftnet's
// RequestPreVote) makes their peers refuse while they have a leader: no
// partition changes leader or epoch, as every broker reports them, the
// controller stays where it was, and the broker rejoins every ISR. Without
// pre-vote the resumed broker raised its terms and deposed leaders (orders-0
// epoch 5 -> 23 in the issue).
//
// Timings: Raft's timeouts at 1 s, twice the default, so that a loaded
// machine does not change leaders on its own; no preferred-leader
// rebalancing, so that a broker restarted once keeps leading nothing.
func TestResumedFollowerDeposesNobody(t *testing.T) {
	const (
		topic      = "orders"
		partitions = 6
		pause      = 8 * time.Second // 8 election timeouts, 4 ISR lag limits
	)
	e := start(t, 3, "--raft-heartbeat-timeout", "1s", "--raft-election-timeout", "1s",
		"--raft-leader-lease", "500ms", "--preferred-leader-delay", "0")
	e.CreateTopic(topic, partitions, 3, nil)

	// A broker that is not the controller leads its preferred partitions;
	// restarted, it leads nothing (the others took over, and nothing hands
	// leadership back).
	ctrl := controllerID(t, e)
	away := int32(1)
	for away == ctrl {
		away++
	}
	if err := e.C.Restart(testcluster.BrokerName(away)); err != nil {
		t.Fatal(err)
	}
	// Settled: every replica in every ISR, and every broker agreeing on
	// leaders and epochs.
	var before map[string]string
	eventually.Nil(t, 60*time.Second, fmt.Sprintf("broker-%d back in every ISR, leading nothing, all brokers agreeing", away), func() error {
		var err error
		before, err = leadership(e, topic, partitions, away)
		return err
	})
	if got := controllerID(t, e); got == away {
		t.Fatalf("broker-%d became the controller again; the test needs it to lead nothing", away)
	}
	for p := range int32(partitions) {
		e.ProduceN(topic, p, "before", 50)
	}

	name := testcluster.BrokerName(away)
	if err := e.C.Pause(name); err != nil {
		t.Fatal(err)
	}
	pausedAt := time.Now()
	resumed := false
	defer func() {
		if !resumed {
			_ = e.C.Resume(name)
		}
	}()
	// The leaders noticed: the paused broker left every ISR.
	eventually.True(t, 60*time.Second, fmt.Sprintf("broker-%d out of every ISR", away), func() bool {
		md, err := e.Client.Metadata(context.Background(), []string{topic}, false)
		if err != nil || len(md.Topics) != 1 {
			return false
		}
		for _, p := range md.Topics[0].Partitions {
			if slices.Contains(p.Isr, away) {
				return false
			}
		}
		return true
	})
	for p := range int32(partitions) {
		e.ProduceN(topic, p, "while-paused", 50)
	}
	time.Sleep(time.Until(pausedAt.Add(pause)))
	if err := e.C.Resume(name); err != nil {
		t.Fatal(err)
	}
	resumed = true
	t.Logf("broker-%d paused for %v, resumed", away, time.Since(pausedAt).Round(100*time.Millisecond))

	var after map[string]string
	eventually.Nil(t, 60*time.Second, fmt.Sprintf("broker-%d back in every ISR, all brokers agreeing", away), func() error {
		var err error
		after, err = leadership(e, topic, partitions, 0)
		return err
	})
	var changed []string
	for _, k := range slices.Sorted(maps.Keys(before)) {
		if after[k] != before[k] {
			changed = append(changed, fmt.Sprintf("%s: %s -> %s", k, before[k], after[k]))
		}
	}
	if len(changed) > 0 {
		t.Errorf("leadership changed after broker-%d resumed:\n%s", away, strings.Join(changed, "\n"))
	}
	if got := controllerID(t, e); got != ctrl {
		t.Errorf("controller moved from broker-%d to broker-%d", ctrl, got)
	}
	// And it replicates again: every replica, the resumed one included,
	// applies what is written now.
	hw := make(map[int32]int64)
	for p := range int32(partitions) {
		e.ProduceN(topic, p, "after", 50)
		hw[p] = e.Partition(topic, p).HighWatermark
	}
	eventually.True(t, 60*time.Second, "every replica to apply the records written after the resume", func() bool {
		return e.EveryReplica(topic, -1, 0, func(r *tapesv1.ReplicaStatus) bool { return r.HighWatermark >= hw[r.Partition] })
	})
}

// leadership asks every broker for the metadata of topic and for its own
// replicas, and returns, per partition, "leader L epoch E" (the same from
// every broker) and, per replica, its Raft term and the leader it follows.
// It fails unless every replica is in the ISR of its partition, the
// brokers agree, and notLeader (0: any) leads no partition.
func leadership(e *testcluster.Env, topic string, partitions int, notLeader int32) (map[string]string, error) {
	out := make(map[string]string)
	for _, b := range e.Brokers() {
		if err := brokerLeadership(e, b.ID, topic, partitions, notLeader, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// brokerLeadership adds what broker id reports to out (see leadership).
func brokerLeadership(e *testcluster.Env, id int32, topic string, partitions int, notLeader int32, out map[string]string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	bc, err := e.Client.Broker(ctx, id)
	if err != nil {
		return err
	}
	md, err := bc.Metadata(ctx, &tapesv1.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return fmt.Errorf("metadata from broker-%d: %w", id, err)
	}
	if len(md.Topics) != 1 || len(md.Topics[0].Partitions) != partitions {
		return fmt.Errorf("broker-%d does not describe %d partitions of %s", id, partitions, topic)
	}
	for _, p := range md.Topics[0].Partitions {
		if len(p.Isr) != len(p.Replicas) {
			return fmt.Errorf("broker-%d: %s-%d ISR %v of replicas %v", id, topic, p.Partition, p.Isr, p.Replicas)
		}
		if p.LeaderId == notLeader {
			return fmt.Errorf("broker-%d: %s-%d led by broker-%d", id, topic, p.Partition, notLeader)
		}
		v := fmt.Sprintf("leader %d epoch %d", p.LeaderId, p.LeaderEpoch)
		k := fmt.Sprintf("%s-%d", topic, p.Partition)
		if seen, ok := out[k]; ok && seen != v {
			return fmt.Errorf("%s: broker-%d says %s, another broker %s", k, id, v, seen)
		}
		out[k] = v
	}
	reps, err := e.Client.DescribeReplicas(ctx, id)
	if err != nil {
		return fmt.Errorf("describe replicas of broker-%d: %w", id, err)
	}
	for _, r := range reps.Replicas {
		if r.Topic != topic {
			continue
		}
		if r.RaftState != "Leader" && r.RaftState != "Follower" || r.LeaderId <= 0 {
			return fmt.Errorf("broker-%d: %s-%d is %s, following %d", id, topic, r.Partition, r.RaftState, r.LeaderId)
		}
		out[fmt.Sprintf("%s-%d on broker-%d", topic, r.Partition, id)] = fmt.Sprintf("%s term %d leader %d", r.RaftState, r.Term, r.LeaderId)
	}
	return nil
}

// controllerID is the controller quorum's leader as the cluster reports it.
func controllerID(t *testing.T, e *testcluster.Env) int32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	md, err := e.Client.Metadata(ctx, nil, false)
	if err != nil {
		t.Fatalf("metadata: %v", err)
	}
	return md.ControllerId
}
