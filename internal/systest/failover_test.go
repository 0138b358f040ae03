package systest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/client"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// TestAcksAllSurvivesLeaderKill: 2,000 records with acks=all while the
// partition leader is SIGKILLed mid-stream. The producer retries only
// failures that guarantee nothing was appended, so an acknowledged value was
// sent in exactly one acknowledged request. Every acknowledged record must be
// read back exactly once, at the offset it was given, in send order, and the
// surviving replicas must hold identical logs.
func TestAcksAllSurvivesLeaderKill(t *testing.T) {
	e := startCluster(t, 3)
	e.createTopic("orders", 1, 3, map[string]string{"min.insync.replicas": "2"})
	leader := e.partition("orders", 0).LeaderId

	const total, perBatch = 2000, 20
	acked := map[string]int64{} // value -> offset
	var order []string          // acknowledged values in send order
	unknown := 0
	killed := false
	for sent := 0; sent < total; sent += perBatch {
		if !killed && sent >= total/4 {
			if err := e.c.Kill(brokerName(leader)); err != nil {
				t.Fatalf("kill leader: %v", err)
			}
			killed = true
			t.Logf("SIGKILLed broker-%d (leader) after %d records", leader, sent)
		}
		batch := records("v", sent, perBatch)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		resp, err := e.cl.ProduceWith(ctx, &tapesv1.ProduceRequest{Topic: "orders", Partition: 0, Acks: -1, Records: batch, TimeoutMs: 5000},
			client.ProduceOptions{RetryUnknownOutcome: false})
		cancel()
		if err != nil {
			// Unknown outcome: not acknowledged; the values are never resent.
			unknown++
			t.Logf("batch at %d not acknowledged: %v", sent, err)
			if !kerr.Is(err, kerr.RequestTimedOut) && kerr.CodeOf(err) == "" && !errors.Is(err, context.DeadlineExceeded) {
				t.Logf("(transport error)")
			}
			continue
		}
		for i, r := range batch {
			acked[string(r.Value)] = resp.BaseOffset + int64(i)
			order = append(order, string(r.Value))
		}
	}
	if len(acked) < total/2 {
		t.Fatalf("only %d of %d records acknowledged", len(acked), total)
	}
	t.Logf("%d records acknowledged, %d batches with unknown outcome", len(acked), unknown)

	got := e.readAll("orders", 0)
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
	e.assertReplicasIdentical("orders", 0, leader)
}

// assertReplicasIdentical waits until every running replica of topic/p has
// applied the leader's high watermark, then compares their logs record by
// record through each broker's own copy (DescribeReplicas for the bounds,
// the files after a clean stop for the bytes).
func (e *env) assertReplicasIdentical(topic string, p int32, skip int32) {
	e.t.Helper()
	hw := e.partition(topic, p).HighWatermark
	e.waitFor(20*time.Second, fmt.Sprintf("replicas of %s-%d to reach %d", topic, p, hw), func() bool {
		for _, b := range e.brokers() {
			if b.ID == skip || !e.c.Running(b.Name) {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			resp, err := e.cl.DescribeReplicas(ctx, b.ID)
			cancel()
			if err != nil {
				return false
			}
			for _, r := range resp.Replicas {
				if r.Topic == topic && r.Partition == p && r.HighWatermark < hw {
					return false
				}
			}
		}
		return true
	})
	e.compareLogFiles(topic, p, skip, hw)
}
