package bench

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/consumer"
	"github.com/tapes-dev/tapes/internal/consumerproto"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// TestBenchRebalance prints, for cooperative-sticky and range, what scaling a
// group from 3 to 4 consumers on 12 partitions costs while a producer
// writes: the time from the fourth member's start until every partition is
// owned again, how many partitions changed hands, and the partition-seconds
// during which a partition had no owner (from its old owner's revoke to its
// new owner's assignment, read from the consumers' histories).
func TestBenchRebalance(t *testing.T) {
	needBench(t)
	e := testcluster.Start(t, binDir, 3, append(testcluster.FastBrokerArgs, brokerArgs()...)...)
	e.CreateTopic("orders", 12, 3, nil)
	prod := exec.Command(filepath.Join(binDir, "producerd"), "--dir", e.Dir, "--topic", "orders", "--rate", "1000", "--duration", "10m", "--control-listen", "")
	if err := prod.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prod.Process.Kill(); prod.Wait() })
	const heartbeat = time.Second
	for _, assignor := range []string{"cooperative-sticky", "range"} {
		dir := t.TempDir()
		group := "bench-" + assignor
		var procs []*exec.Cmd
		startOne := func(name string) {
			cmd := exec.Command(filepath.Join(binDir, "consumerd"), "--dir", e.Dir, "--group", group, "--topic", "orders", "--name", name,
				"--assignor", assignor, "--history", filepath.Join(dir, name+".jsonl"), "--control-listen", "",
				"--session-timeout", "3s", "--heartbeat-interval", heartbeat.String(), "--process-time", "1ms")
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			procs = append(procs, cmd)
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		}
		for i := 1; i <= 3; i++ {
			startOne(fmt.Sprintf("consumer-%d", i))
		}
		waitMembers(t, e, group, 3)
		time.Sleep(2 * time.Second)
		joinAt := time.Now()
		startOne("consumer-4")
		waitMembers(t, e, group, 4)
		settled := time.Since(joinAt)
		time.Sleep(2 * time.Second)
		for _, p := range procs {
			p.Process.Signal(syscall.SIGTERM)
			p.Wait()
		}
		var lines []consumer.HistoryLine
		for i := 1; i <= 4; i++ {
			h, err := consumer.ReadHistory(filepath.Join(dir, fmt.Sprintf("consumer-%d.jsonl", i)))
			if err != nil {
				t.Fatal(err)
			}
			lines = append(lines, h...)
		}
		moved, unowned, worst, lastAssign := consumer.Unowned(lines, joinAt)
		fmt.Printf("rebalance %-18s 3 -> 4 consumers, 12 partitions, heartbeat %v: all partitions owned again %.2f s after the join (group Stable after %.2f s); %d partitions changed hands; unowned %.2f partition-seconds (worst partition %.2f s)\n",
			assignor, heartbeat, lastAssign.Sub(joinAt).Seconds(), settled.Seconds(), moved, unowned.Seconds(), worst.Seconds())
	}
}

// waitMembers waits until group is Stable with n members owning 12
// partitions.
func waitMembers(t *testing.T, e *testcluster.Env, group string, n int) {
	t.Helper()
	e.WaitFor(60*time.Second, fmt.Sprintf("%d members in %s", n, group), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		d, err := e.Client.DescribeGroup(ctx, group)
		if err != nil || d.State != "Stable" || len(d.Members) != n {
			return false
		}
		total := 0
		for _, m := range d.Members {
			a, err := consumerproto.DecodeAssignment(m.Assignment)
			if err != nil {
				t.Fatalf("member %s: %v", m.MemberId, err)
			}
			total += len(a.Partitions)
		}
		return total == 12
	})
}
