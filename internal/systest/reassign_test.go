package systest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// TestReassignUnderLoad: on 4 brokers, a partition of RF 3 moves off its
// leader's broker onto the fourth (`cluster topics reassign`, the voters
// changed one at a time) while an acks=all producer writes; every
// acknowledged record is then read back at its offset, the new broker's
// log is identical to the others', and after the old leader's broker is
// killed (it no longer hosts the partition) the records are still all
// there. Impossible targets are refused first with their Kafka error.
func TestReassignUnderLoad(t *testing.T) {
	e := start(t, 4)
	e.CreateTopic("moving", 1, 3, map[string]string{"min.insync.replicas": "2"})
	pm := e.Partition("moving", 0)
	old := pm.Replicas
	var added int32
	for id := int32(1); id <= 4; id++ {
		if !slices.Contains(old, id) {
			added = id
		}
	}
	leaving := pm.LeaderId
	var target []int32
	for _, id := range old {
		if id != leaving {
			target = append(target, id)
		}
	}
	target = append(target, added)
	ids := idList

	for _, bad := range []struct{ replicas, want string }{
		{"1,2,9", string(kerr.InvalidReplicaAssignment)},
		{ids([]int32{target[0], target[0], target[1]}), string(kerr.InvalidReplicaAssignment)},
		{ids([]int32{added}), string(kerr.InvalidReplicationFactor)},
	} {
		out, err := cli(t, e, "", "topics", "reassign", "moving", "--partition", "0", "--replicas", bad.replicas)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Fatalf("reassign to %s: %v (stdout %q), want %s", bad.replicas, err, out, bad.want)
		}
	}

	// acks=all load for the whole reassignment.
	stopLoad := acksAllLoad(e.Client, "moving", 0)
	time.Sleep(2 * time.Second)
	out, err := cli(t, e, "", "topics", "reassign", "moving", "--partition", "0", "--replicas", ids(target), "--wait-timeout", "120s")
	if err != nil {
		t.Fatalf("reassign: %v\n%s", err, out)
	}
	t.Logf("cluster topics reassign:\n%s", out)
	// Every Raft step, as the leaders reported them. The leader moves off
	// the leaving broker before it is removed: by the driver's own
	// transfer step, or by the preferred-leader hand-over (the target's
	// first replica is the preferred leader during the move), whichever
	// comes first.
	for _, want := range []string{"Reassigning moving-0 from " + ids(old) + " to " + ids(target),
		": add-learner " + fmt.Sprint(added), ": promote " + fmt.Sprint(added), ": remove " + fmt.Sprint(leaving),
		"complete: replicas " + ids(target)} {
		if !strings.Contains(out, want) {
			t.Errorf("reassign output lacks %q", want)
		}
	}
	if tr := strings.Index(out, ": transfer-leadership "); tr >= 0 && tr > strings.Index(out, ": remove ") {
		t.Errorf("the leaving leader was removed before it handed leadership over")
	}
	time.Sleep(2 * time.Second)
	acks := stopLoad()
	n := len(acks)
	if n < 10 {
		t.Fatalf("only %d batches acknowledged under the reassignment", n)
	}
	pm = e.Partition("moving", 0)
	if !slices.Equal(pm.Replicas, target) || len(pm.AddingReplicas)+len(pm.RemovingReplicas) != 0 {
		t.Fatalf("after the reassignment: %+v, want replicas %v", pm, target)
	}
	e.WaitFor(60*time.Second, "the leaving broker to delete its replica", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		dr, err := e.Client.DescribeReplicas(ctx, leaving)
		if err != nil {
			return false
		}
		for _, r := range dr.Replicas {
			if r.Topic == "moving" {
				return false
			}
		}
		return true
	})

	check := func(when string) { checkAcked(t, when, acks, e.ReadAll("moving", 0)) }
	check("after the reassignment")
	if err := e.C.Kill(testcluster.BrokerName(leaving)); err != nil {
		t.Fatal(err)
	}
	check(fmt.Sprintf("with broker %d (the old leader) killed", leaving))
	// And, with the old leader back (the controller quorum of four survives
	// one dead broker, not two), one of the replicas that stayed: the two
	// left need the added broker's vote and copy.
	if err := e.C.Restart(testcluster.BrokerName(leaving)); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(60*time.Second, fmt.Sprintf("broker %d back", leaving), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := e.Client.DescribeReplicas(ctx, leaving)
		return err == nil
	})
	stayed := target[0]
	if err := e.C.Kill(testcluster.BrokerName(stayed)); err != nil {
		t.Fatal(err)
	}
	check(fmt.Sprintf("with broker %d (a replica that stayed) killed", stayed))
	// Last, as it stops every broker: the added broker's log is the others'.
	e.AssertReplicasIdentical("moving", 0, leaving)
	t.Logf("%d acknowledged batches read back from replicas %v", n, target)
}

// idList prints broker ids as the CLI takes them ("1,2,4").
func idList(v []int32) string {
	s := make([]string, len(v))
	for i, id := range v {
		s[i] = fmt.Sprint(id)
	}
	return strings.Join(s, ",")
}
