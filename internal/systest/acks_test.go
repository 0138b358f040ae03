package systest

import (
	"context"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/client"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// TestMinInsyncReplicas: with min.insync.replicas=3 and one broker stopped,
// acks=all is refused with NOT_ENOUGH_REPLICAS and nothing is appended;
// acks=1 is accepted.
func TestMinInsyncReplicas(t *testing.T) {
	e := start(t, 3)
	e.CreateTopic("strict", 1, 3, map[string]string{"min.insync.replicas": "3"})
	e.ProduceN("strict", 0, "ok", 10)
	_, follower := e.FollowerOf("strict", 0)
	if err := e.C.Stop(testcluster.BrokerName(follower)); err != nil {
		t.Fatal(err)
	}
	e.WaitISR("strict", 0, testcluster.Others([]int32{1, 2, 3}, follower), 15*time.Second)
	before := e.Partition("strict", 0).HighWatermark

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := e.Client.ProduceWith(ctx, &tapesv1.ProduceRequest{Topic: "strict", Partition: 0, Acks: -1, Records: testcluster.Records("all", 0, 5)},
		client.ProduceOptions{RetryUnknownOutcome: false})
	// The client retries NOT_ENOUGH_REPLICAS (it is retriable) until ctx ends.
	if !kerr.Is(err, kerr.NotEnoughReplicas) {
		t.Fatalf("acks=all with ISR below min.insync.replicas: %v, want %s", err, kerr.NotEnoughReplicas)
	}
	if hw := e.Partition("strict", 0).HighWatermark; hw != before {
		t.Fatalf("high watermark moved from %d to %d: a refused batch was appended", before, hw)
	}
	resp, err := e.Client.Produce(context.Background(), &tapesv1.ProduceRequest{Topic: "strict", Partition: 0, Acks: 1, Records: testcluster.Records("one", 0, 5)})
	if err != nil {
		t.Fatalf("acks=1 with one broker down: %v", err)
	}
	if resp.BaseOffset != before {
		t.Fatalf("acks=1 offset %d, want %d", resp.BaseOffset, before)
	}
}

// TestAcks1AnswersBeforeFollowers: with both followers SIGSTOPped, acks=1
// is answered (the record is only in the leader's log), the high watermark
// does not cover it and no fetch returns it; acks=all does not complete
// until the followers resume. A long leader lease keeps the leader from
// stepping down while its followers are paused.
func TestAcks1AnswersBeforeFollowers(t *testing.T) {
	e := start(t, 3, "--raft-heartbeat-timeout", "6s", "--raft-election-timeout", "6s", "--raft-leader-lease", "6s", "--replica-lag-time-max", "20s")
	e.CreateTopic("orders", 1, 3, map[string]string{"min.insync.replicas": "2"})
	e.ProduceN("orders", 0, "committed", 10)
	pm := e.Partition("orders", 0)
	hw := pm.HighWatermark
	for _, r := range pm.Replicas {
		if r != pm.LeaderId {
			if err := e.C.Pause(testcluster.BrokerName(r)); err != nil {
				t.Fatal(err)
			}
		}
	}
	resumed := false
	resume := func() {
		if resumed {
			return
		}
		resumed = true
		for _, r := range pm.Replicas {
			if r != pm.LeaderId {
				e.C.Resume(testcluster.BrokerName(r))
			}
		}
	}
	defer resume()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	resp, err := e.Client.Produce(ctx, &tapesv1.ProduceRequest{Topic: "orders", Partition: 0, Acks: 1, Records: testcluster.Records("leader-only", 0, 1)})
	cancel()
	if err != nil {
		t.Fatalf("acks=1 with followers paused: %v", err)
	}
	if resp.BaseOffset != hw {
		t.Fatalf("acks=1 offset %d, want %d", resp.BaseOffset, hw)
	}
	// Not committed: the high watermark stays, a fetch at it returns nothing.
	bc, err := e.Client.Broker(context.Background(), pm.LeaderId)
	if err != nil {
		t.Fatal(err)
	}
	f, err := bc.Fetch(context.Background(), &tapesv1.FetchRequest{Topic: "orders", Partition: 0, Offset: hw, MaxWaitMs: 300})
	if err != nil {
		t.Fatalf("fetch at the high watermark: %v", err)
	}
	if len(f.Records) != 0 || f.HighWatermark != hw {
		t.Fatalf("fetch returned %d records, high watermark %d; want none and %d", len(f.Records), f.HighWatermark, hw)
	}

	done := make(chan error, 1)
	go func() {
		_, err := bc.Produce(context.Background(), &tapesv1.ProduceRequest{Topic: "orders", Partition: 0, Acks: -1, Records: testcluster.Records("all", 0, 1), TimeoutMs: 20000})
		done <- kerr.FromStatus(err)
	}()
	select {
	case err := <-done:
		t.Fatalf("acks=all completed (%v) while both followers were paused", err)
	case <-time.After(1500 * time.Millisecond):
	}
	resume()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("acks=all after the followers resumed: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("acks=all did not complete after the followers resumed")
	}
	if got := e.Partition("orders", 0).HighWatermark; got != hw+2 {
		t.Fatalf("high watermark %d, want %d (the acks=1 record and the acks=all record)", got, hw+2)
	}
}
