package systest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/client"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/metadata"
	"github.com/tapes-dev/tapes/internal/replication"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// TestAcksAllSurvivesLeaderKill: 2,000 records with acks=all while the
// partition leader is SIGKILLed mid-stream. The producer retries only
// failures that guarantee nothing was appended, so an acknowledged value was
// sent in exactly one acknowledged request. Every acknowledged record must be
// read back exactly once, at the offset it was given, in send order, and the
// surviving replicas must hold identical logs.
func TestAcksAllSurvivesLeaderKill(t *testing.T) {
	e := start(t, 3)
	e.CreateTopic("orders", 1, 3, map[string]string{"min.insync.replicas": "2"})
	leader := e.Partition("orders", 0).LeaderId

	const total, perBatch = 2000, 20
	acked := map[string]int64{} // value -> offset
	var order []string          // acknowledged values in send order
	unknown := 0
	// The kill comes from another goroutine as soon as a quarter of the
	// records are acknowledged, so it lands while a request is in flight.
	var ackedCount atomic.Int64
	killed := make(chan int64, 1)
	go func() {
		for ackedCount.Load() < total/4 {
			time.Sleep(time.Millisecond)
		}
		if err := e.C.Kill(testcluster.BrokerName(leader)); err != nil {
			t.Errorf("kill leader: %v", err)
		}
		killed <- ackedCount.Load()
	}()
	ackedAfterKill, killedAt := 0, int64(-1)
	for sent := 0; sent < total; sent += perBatch {
		batch := testcluster.Records("v", sent, perBatch)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		resp, err := e.Client.ProduceWith(ctx, &tapesv1.ProduceRequest{Topic: "orders", Partition: 0, Acks: -1, Records: batch, TimeoutMs: 5000},
			client.ProduceOptions{RetryUnknownOutcome: false})
		cancel()
		if err != nil {
			// Unknown outcome: not acknowledged; the values are never resent.
			unknown++
			t.Logf("batch at %d not acknowledged: %v", sent, err)
			continue
		}
		for i, r := range batch {
			acked[string(r.Value)] = resp.BaseOffset + int64(i)
			order = append(order, string(r.Value))
		}
		ackedCount.Add(perBatch)
		select {
		case n := <-killed:
			t.Logf("SIGKILLed broker-%d (leader) after %d acknowledged records", leader, n)
			killedAt = n
		default:
		}
		if killedAt >= 0 {
			ackedAfterKill += perBatch
		}
	}
	if ackedAfterKill == 0 {
		t.Fatalf("nothing was acknowledged after the leader was killed")
	}
	if got := e.Partition("orders", 0).LeaderId; got == leader {
		t.Fatalf("broker-%d still leads after it was killed", leader)
	}
	// The killed leader's port refuses connections, so the replica chosen
	// to stand did not wait for Raft's heartbeat timeout.
	stand := testcluster.BrokerName(int32(replication.StandFor(ids(e.Partition("orders", 0).Replicas), metadata.BrokerID(leader))))
	if !e.LogContains(stand, "standing for election") {
		t.Errorf("%s did not stand for election after the leader's crash", stand)
	}
	if len(acked) < total/2 {
		t.Fatalf("only %d of %d records acknowledged", len(acked), total)
	}
	t.Logf("%d records acknowledged, %d batches with unknown outcome", len(acked), unknown)

	got := e.ReadAll("orders", 0)
	seen := map[string]int{}
	pos := map[string]int64{}
	for _, r := range got {
		seen[string(r.Value)]++
		pos[string(r.Value)] = r.Offset
	}
	for v, off := range acked {
		if seen[v] != 1 {
			t.Errorf("acknowledged %s read %d times", v, seen[v])
		} else if pos[v] != off {
			t.Errorf("acknowledged %s at offset %d, read at %d", v, off, pos[v])
		}
	}
	for i := 1; i < len(order); i++ {
		if acked[order[i]] <= acked[order[i-1]] {
			t.Fatalf("acknowledged order broken: %s@%d after %s@%d", order[i], acked[order[i]], order[i-1], acked[order[i-1]])
		}
	}
	e.AssertReplicasIdentical("orders", 0, leader)
}

//END

func ids(in []int32) []metadata.BrokerID {
	out := make([]metadata.BrokerID, len(in))
	for i, id := range in {
		out[i] = metadata.BrokerID(id)
	}
	return out
}
