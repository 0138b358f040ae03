package systest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/eventually"
)

// startupIterationsEnv sets how many times TestStartupScriptNeverRaces runs
// the script (default defaultStartupIterations; make bench runs 20).
const (
	startupIterationsEnv     = "TAPES_STARTUP_ITERATIONS"
	defaultStartupIterations = 3
)

// TestStartupScriptNeverRaces runs what a script (or CI) does, with the
// binaries built once: start `cluster up --brokers 3 --dir D` in the
// background, poll `cluster topics list --dir D` until it answers, then
// `cluster topics create t1 --partitions 1 --replication-factor 3`. The
// create must succeed every time: the first requests race the brokers'
// registration, and what that race answers ("0 available brokers", a broker
// not registered yet) is retriable, which the CLI retries within --timeout.
func TestStartupScriptNeverRaces(t *testing.T) {
	n := defaultStartupIterations
	if s := os.Getenv(startupIterationsEnv); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("$%s=%q: want a positive count", startupIterationsEnv, s)
		}
		n = v
	}
	bin := filepath.Join(binDir, "cluster")
	for i := 1; i <= n; i++ {
		dir := t.TempDir()
		var upOut bytes.Buffer
		up := exec.Command(bin, "up", "--brokers", "3", "--dir", dir)
		up.Stdout, up.Stderr = &upOut, &upOut
		if err := up.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- up.Wait() }()
		stop := func() {
			_ = up.Process.Signal(syscall.SIGINT)
			select {
			case <-done:
			case <-time.After(60 * time.Second):
				_ = up.Process.Kill()
				<-done
				t.Errorf("iteration %d: cluster up did not stop within 60 s of SIGINT", i)
			}
		}
		start := time.Now()
		var polls int
		err := eventually.Wait(2*time.Minute, func() error {
			polls++
			out, err := exec.Command(bin, "topics", "list", "--dir", dir).CombinedOutput()
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		})
		if err != nil {
			stop()
			t.Fatalf("iteration %d: topics list never answered: %v\ncluster up said:\n%s", i, err, upOut.String())
		}
		answered := time.Since(start)
		out, err := exec.Command(bin, "topics", "create", "t1", "--partitions", "1", "--replication-factor", "3", "--dir", dir).CombinedOutput()
		created := time.Since(start)
		stop()
		if err != nil || !bytes.Contains(out, []byte("Created topic t1.")) {
			t.Fatalf("iteration %d of %d: topics create right after the first answer: %v: %s\ncluster up said:\n%s", i, n, err, out, upOut.String())
		}
		t.Logf("iteration %d: list answered after %v (%d polls), created after %v", i, answered.Round(time.Millisecond), polls, created.Round(time.Millisecond))
	}
}
