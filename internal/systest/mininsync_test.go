package systest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/eventually"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// refusedByLeader sends one acks=all batch to whichever of brokers leads
// topic-0, retrying only "not the leader (yet)" answers, and fails the test
// unless the leader refuses it with NOT_ENOUGH_REPLICAS or
// NOT_ENOUGH_REPLICAS_AFTER_APPEND. It returns the refusal's code. The
// request's own timeout is longer than the lag limit, so a leader that
// waits for a copy the dead broker never sends answers when the ISR shrinks.
func refusedByLeader(t *testing.T, e *testcluster.Env, topic string, brokers []int32, prefix string) kerr.Code {
	t.Helper()
	var code kerr.Code
	var acknowledged error
	err := eventually.Wait(60*time.Second, func() error {
		var last error
		for _, id := range brokers {
			bc, err := e.Client.Broker(context.Background(), id)
			if err != nil {
				last = err
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
			resp, err := bc.Produce(ctx, &tapesv1.ProduceRequest{Topic: topic, Partition: 0, Acks: -1, Records: testcluster.Records(prefix, 0, 1), TimeoutMs: 30000})
			cancel()
			err = kerr.FromStatus(err)
			switch {
			case err == nil:
				acknowledged = fmt.Errorf("acknowledged by broker %d at offset %d", id, resp.BaseOffset)
				return nil // no retry: the promise is already broken
			case kerr.Is(err, kerr.NotEnoughReplicas), kerr.Is(err, kerr.NotEnoughReplicasAfterAppend):
				code = kerr.CodeOf(err)
				t.Logf("%s: broker %d refused acks=all: %v", prefix, id, err)
				return nil
			}
			last = fmt.Errorf("broker %d: %w", id, err)
		}
		return last
	})
	if acknowledged != nil {
		err = acknowledged
	}
	if err != nil {
		t.Fatalf("%s: acks=all with one of three replicas dead and min.insync.replicas=3: %v", prefix, err)
	}
	return code
}

// strict3 starts 3 brokers with a lag limit long enough that the first
// produce after a kill certainly reaches a leader whose ISR still holds the
// dead broker, creates strict3 (RF 3, min.insync.replicas=3) while all are
// up, and checks that acks=all is acknowledged then.
func strict3(t *testing.T) *testcluster.Env {
	e := start(t, 3, "--replica-lag-time-max", "6s")
	e.CreateTopic("strict3", 1, 3, map[string]string{"min.insync.replicas": "3"})
	e.ProduceN("strict3", 0, "all-up", 20)
	return e
}

// TestMinInsyncAfterFollowerKill: with RF 3 and min.insync.replicas=3,
// acks=all is acknowledged while all three replicas are up. Right after a
// follower is SIGKILLed (still in the ISR for the lag limit) the batch
// commits on the Raft majority but is refused, since the dead broker never
// stores it; once the ISR has shrunk it is refused before being appended.
func TestMinInsyncAfterFollowerKill(t *testing.T) {
	e := strict3(t)
	leader, follower := e.FollowerOf("strict3", 0)
	if err := e.C.Kill(testcluster.BrokerName(follower)); err != nil {
		t.Fatal(err)
	}
	if code := refusedByLeader(t, e, "strict3", []int32{leader}, "follower-killed"); code != kerr.NotEnoughReplicasAfterAppend {
		t.Logf("the first batch after the kill was refused before it was appended (%s): the ISR had already shrunk", code)
	}
	if code := refusedByLeader(t, e, "strict3", []int32{leader}, "follower-killed-again"); code != kerr.NotEnoughReplicas {
		t.Fatalf("once the ISR shrank: %s, want %s", code, kerr.NotEnoughReplicas)
	}
	// Back in the ISR by catching up, it makes acks=all succeed again.
	if err := e.C.Restart(testcluster.BrokerName(follower)); err != nil {
		t.Fatal(err)
	}
	e.WaitISR("strict3", 0, []int32{1, 2, 3}, 60*time.Second)
	e.ProduceN("strict3", 0, "all-up-again", 20)
}

// TestMinInsyncAfterLeaderChange: right after the leader of a
// min.insync.replicas=3 partition is SIGKILLed, the new leader keeps the
// dead broker in the ISR (it was in the ISR the controller recorded), and
// acks=all produced to it at once is refused, never acknowledged with two
// copies.
func TestMinInsyncAfterLeaderChange(t *testing.T) {
	e := strict3(t)
	leader := e.Partition("strict3", 0).LeaderId
	if err := e.C.Kill(testcluster.BrokerName(leader)); err != nil {
		t.Fatal(err)
	}
	survivors := testcluster.Others([]int32{1, 2, 3}, leader)
	refusedByLeader(t, e, "strict3", survivors, "leader-killed")
	if pm := e.Partition("strict3", 0); pm.LeaderId == leader {
		t.Fatalf("broker %d still recorded as leader after it was killed", leader)
	}
	refusedByLeader(t, e, "strict3", survivors, "leader-killed-again")
}
