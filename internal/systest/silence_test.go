package systest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/eventually"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// runBin runs one of the built binaries with a generous bound and returns
// its combined output, its error, and how long it took.
func runBin(t *testing.T, within time.Duration, name string, args ...string) (string, error, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, name), args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %s still running after %v (hung in silence?): %s", name, strings.Join(args, " "), within, out.String())
	}
	return out.String(), err, time.Since(start)
}

// A second brokerd on a live broker's data directory fails at once, naming
// the broker that holds it, instead of blocking in the storage's file lock.
func TestSecondBrokerdOnALiveDataDirFails(t *testing.T) {
	e := start(t, 1)
	b := e.Brokers()[0]
	out, err, _ := runBin(t, 60*time.Second, "brokerd", "--id", "1", "--data-dir", b.DataDir,
		"--listen", "127.0.0.1:0", "--peers", fmt.Sprintf("1=%s", b.Address))
	want := fmt.Sprintf("data dir %s is in use by pid %d", b.DataDir, b.PID)
	if err == nil || !strings.Contains(out, want) {
		t.Fatalf("second brokerd: %v: %q; want it to fail with %q", err, out, want)
	}
}

// startBin starts one of the built binaries; its combined output collects
// in the returned buffer. It is killed at the end of the test.
func startBin(t *testing.T, name string, args ...string) (*exec.Cmd, *lockedBuffer, <-chan error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, name), args...)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	return cmd, out, done
}

// consumerd against a port nobody listens on: a clear warning at once and
// retries (not "processed 0" forever); with --exit-on-error, exit 1.
func TestConsumerdWithoutClusterSaysSo(t *testing.T) {
	addr := testcluster.ClosedPort(t)
	_, out, done := startBin(t, "consumerd", "--bootstrap-server", addr, "--group", "g", "--topic", "orders", "--control-listen", "")
	want := "no broker answers at " + addr + "; retrying"
	eventually.True(t, 30*time.Second, "consumerd's warning", func() bool { return strings.Contains(out.String(), want) })
	select {
	case err := <-done:
		t.Fatalf("consumerd exited without --exit-on-error: %v: %s", err, out.String())
	default:
	}

	got, err, _ := runBin(t, 60*time.Second, "consumerd", "--bootstrap-server", addr, "--group", "g", "--topic", "orders",
		"--control-listen", "", "--exit-on-error")
	if code := exitCode(err); code != 1 || !strings.Contains(got, "no broker answers at "+addr+": is the cluster running?") {
		t.Fatalf("--exit-on-error: exit %d: %s", code, got)
	}
}

// consumerd on a topic that does not exist: a warning at once, then it
// waits for the topic without rebalancing in a loop, and consumes it once
// created; with --exit-on-error, exit 1 naming the topic.
func TestConsumerdOnAMissingTopicWaitsQuietly(t *testing.T) {
	e := start(t, 1)
	_, out, done := startBin(t, "consumerd", "--dir", e.Dir, "--group", "g", "--topic", "nosuch", "--control-listen", "")
	eventually.True(t, 30*time.Second, "the missing-topic warning", func() bool {
		return strings.Contains(out.String(), "topic does not exist; waiting for it to be created") && strings.Contains(out.String(), "topic=nosuch")
	})
	e.CreateTopic("nosuch", 1, 1, nil)
	e.ProduceN("nosuch", 0, "r", 3)
	eventually.True(t, 60*time.Second, "consumerd assigned nosuch-0", func() bool { return strings.Contains(out.String(), "assigned") })
	if n := strings.Count(out.String(), "could not compute the assignment"); n > 0 {
		t.Fatalf("the group rebalanced %d times for a topic that did not exist:\n%s", n, out.String())
	}
	select {
	case err := <-done:
		t.Fatalf("consumerd exited: %v: %s", err, out.String())
	default:
	}

	got, err, _ := runBin(t, 60*time.Second, "consumerd", "--dir", e.Dir, "--group", "g2", "--topic", "nosuch2",
		"--control-listen", "", "--exit-on-error")
	if code := exitCode(err); code != 1 || !strings.Contains(got, "--topic nosuch2 does not exist") || !strings.Contains(got, "UNKNOWN_TOPIC_OR_PARTITION") {
		t.Fatalf("--exit-on-error: exit %d: %s", code, got)
	}
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// producerd against a port nobody listens on says so at once, then keeps
// retrying (the cluster may be starting).
func TestProducerdWithoutClusterSaysSo(t *testing.T) {
	addr := testcluster.ClosedPort(t)
	_, out, done := startBin(t, "producerd", "--bootstrap-server", addr, "--topic", "orders", "--control-listen", "")
	want := "no broker answers at " + addr + "; retrying"
	eventually.True(t, 30*time.Second, "producerd's warning", func() bool { return strings.Contains(out.String(), want) })
	select {
	case err := <-done:
		if !strings.Contains(out.String(), want) {
			t.Fatalf("producerd exited without the warning: %v: %s", err, out.String())
		}
	default:
	}
}
