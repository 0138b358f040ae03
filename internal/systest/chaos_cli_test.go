package systest

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/client"
	"github.com/tapes-dev/tapes/internal/clusterfile"
	"github.com/tapes-dev/tapes/internal/eventually"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// chaosCmd runs the chaos binary and returns its exit code and output.
func chaosCmd(t *testing.T, dir string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "chaos"), append(args, "--dir", dir)...)
	if i := indexOf(args, "--"); i >= 0 { // flags for the started process stay last
		cmd = exec.Command(filepath.Join(binDir, "chaos"), append(append(append([]string{}, args[:i]...), "--dir", dir), args[i:]...)...)
	}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	case err != nil:
		t.Fatalf("chaos %v: %v", args, err)
	}
	return 0, string(out)
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// clusterUp starts a real `cluster up --demo` (startClusterUp) in a new
// directory and returns the directory.
func clusterUp(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	startClusterUp(t, dir)
	return dir
}

// TestChaosCLI drives a real `cluster up` (with its links) through the
// chaos commands: status, isolate --leader-of (a new leader is elected
// elsewhere), heal, pause --for, kill, restart, start a producer under the
// cluster, and a clear error for an unknown name.
func TestChaosCLI(t *testing.T) {
	dir := clusterUp(t)

	code, out := chaosCmd(t, dir, "status")
	if code != 0 || !strings.Contains(out, "broker-3") || !strings.Contains(out, "6 links, all healthy") {
		t.Fatalf("status: %d\n%s", code, out)
	}
	f, err := clusterfile.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(client.Config{Bootstrap: strings.Split(f.Bootstrap, ","), MetadataMaxAge: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	leaderOf := func() int32 { return highestEpochLeader(cl, "orders", 0) }
	old := leaderOf()
	code, out = chaosCmd(t, dir, "isolate", "--leader-of", "orders/0")
	if code != 0 || !strings.Contains(out, "isolated broker-") {
		t.Fatalf("isolate: %d\n%s", code, out)
	}
	eventually.True(t, 20*time.Second, "orders-0 led by another broker than the isolated one", func() bool {
		l := leaderOf()
		return l != old && l >= 0
	})
	if code, out = chaosCmd(t, dir, "status"); !strings.Contains(out, "4 with faults") {
		t.Fatalf("status after isolate: %d\n%s", code, out)
	}
	if code, out = chaosCmd(t, dir, "heal"); code != 0 {
		t.Fatalf("heal: %d %s", code, out)
	}
	if code, out = chaosCmd(t, dir, "pause", "broker-3", "--for", "1s"); code != 0 || !strings.Contains(out, "broker-3: paused") {
		t.Fatalf("pause: %d %s", code, out)
	}
	time.Sleep(1500 * time.Millisecond)
	if _, out = chaosCmd(t, dir, "status"); !strings.Contains(out, "running") || strings.Contains(out, "paused") {
		t.Fatalf("broker-3 not resumed after --for 1s:\n%s", out)
	}
	if code, out = chaosCmd(t, dir, "kill", "broker-2"); code != 0 || !strings.Contains(out, "signal: killed") {
		t.Fatalf("kill: %d %s", code, out)
	}
	if code, out = chaosCmd(t, dir, "restart", "broker-2"); code != 0 || !strings.Contains(out, "broker-2: running") {
		t.Fatalf("restart: %d %s", code, out)
	}
	if code, out = chaosCmd(t, dir, "start", "producer-1", "--", "--topic", "orders", "--count", "20"); code != 0 {
		t.Fatalf("start: %d %s", code, out)
	}
	if _, out = chaosCmd(t, dir, "status"); !strings.Contains(out, "producer-1") || !strings.Contains(out, "9 links") {
		t.Fatalf("status after start (the producer gets a link to each broker):\n%s", out)
	}
	if code, out = chaosCmd(t, dir, "kill", "broker-9"); code != 2 || !strings.Contains(out, `no process "broker-9"`) {
		t.Fatalf("unknown name: %d %s", code, out)
	}
}

// highestEpochLeader asks every broker of a 3-broker cluster for the
// leader of topic-p and believes the highest epoch: an isolated broker
// still answers with what it last knew. -1 when none answers.
func highestEpochLeader(cl *client.Client, topic string, p int32) int32 {
	leader, epoch := int32(-1), int64(-1)
	for id := int32(1); id <= 3; id++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		bc, err := cl.Broker(ctx, id)
		var md *tapesv1.MetadataResponse
		if err == nil {
			md, err = bc.Metadata(ctx, &tapesv1.MetadataRequest{Topics: []string{topic}})
		}
		cancel()
		if err != nil || len(md.Topics) != 1 || int(p) >= len(md.Topics[0].Partitions) {
			continue
		}
		if pm := md.Topics[0].Partitions[p]; pm.LeaderEpoch > epoch {
			leader, epoch = pm.LeaderId, pm.LeaderEpoch
		}
	}
	return leader
}

// startClusterUp starts `cluster up --brokers 3 --demo` on dir with the
// fast timings (and extra flags), waits until it prints its control
// endpoint, and stops it with SIGINT (Ctrl-C) at the end of the test. The
// channel is closed once it has exited.
func startClusterUp(t *testing.T, dir string, extra ...string) <-chan struct{} {
	t.Helper()
	up := exec.Command(filepath.Join(binDir, "cluster"), append([]string{"up", "--dir", dir, "--brokers", "3", "--demo"}, extra...)...)
	for i := 0; i+1 < len(testcluster.FastBrokerArgs); i += 2 {
		up.Args = append(up.Args, "--broker-arg="+testcluster.FastBrokerArgs[i]+"="+testcluster.FastBrokerArgs[i+1])
	}
	stdout, err := up.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { up.Wait(); close(exited) }()
	t.Cleanup(func() {
		up.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			up.Process.Kill()
			<-exited
		}
	})
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "control endpoint:") {
				close(ready)
				break
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	select {
	case <-ready:
	case <-exited:
		t.Fatal("cluster up exited before it was ready")
	case <-time.After(60 * time.Second):
		t.Fatal("cluster up not ready after 60s")
	}
	return exited
}
