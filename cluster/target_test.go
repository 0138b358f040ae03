package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/client"
	"github.com/tapes-dev/tapes/internal/clusterfile"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/launch"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// The waiting lines: the first at once, then at most one per interval,
// each saying what is waited for and when the command gives up.
func TestRetryNoticesAreRateLimited(t *testing.T) {
	var out bytes.Buffer
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	n := &retryNotices{w: &out, limit: client.RateLimit{Every: 2 * time.Second}, now: func() time.Time { return now }, deadline: now.Add(30 * time.Second)}
	notBroker := kerr.New(kerr.InvalidReplicationFactor, "replication factor 3 is larger than the 0 available brokers")
	n.notice(client.Retry{Op: "create topics", Attempt: 1, Err: notBroker})
	now = now.Add(time.Second)
	n.notice(client.Retry{Op: "create topics", Attempt: 2, Err: notBroker})
	now = now.Add(1500 * time.Millisecond)
	n.notice(client.Retry{Op: "metadata", Attempt: 3, Unreachable: []string{"127.0.0.1:1", "127.0.0.1:2"}})
	want := "waiting: create topics: INVALID_REPLICATION_FACTOR: replication factor 3 is larger than the 0 available brokers; retrying, giving up in 30s\n" +
		"waiting: no broker answers at 127.0.0.1:1, 127.0.0.1:2 yet (metadata)\n"
	if out.String() != want {
		t.Fatalf("notices:\n%s\nwant:\n%s", out.String(), want)
	}
}

// writeCluster writes a cluster.json in dir naming one broker at addr.
func writeCluster(t *testing.T, dir, addr string) {
	t.Helper()
	if err := clusterfile.Write(dir, &clusterfile.File{Bootstrap: addr, Processes: []clusterfile.Process{
		{Name: "broker-1", Kind: "broker", ID: 1, Address: addr}}}); err != nil {
		t.Fatal(err)
	}
}

// A cluster directory whose launcher is gone is said at once; one whose
// brokers refuse connections is said within seconds, not after --timeout.
func TestOperatorCommandsSayTheClusterIsNotThere(t *testing.T) {
	addr := testcluster.ClosedPort(t)

	gone := t.TempDir()
	writeCluster(t, gone, addr)
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skipf("cannot run true: %v", err)
	}
	lock := filepath.Join(gone, launch.LockName)
	if err := os.WriteFile(lock, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := runTopicsDir(t, gone, "list")
	if want := "launcher (pid " + strconv.Itoa(cmd.Process.Pid) + ") is gone: start it again with `cluster up --dir " + gone + "`"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("killed launcher: err = %v; want %q", err, want)
	}
	if err := os.WriteFile(lock, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runTopicsDir(t, gone, "list"); err == nil || !strings.Contains(err.Error(), "is stopped (its launcher exited)") {
		t.Fatalf("stopped launcher: err = %v", err)
	}

	refused := t.TempDir()
	writeCluster(t, refused, addr)
	start := time.Now()
	_, _, err = runTopicsDir(t, refused, "list", "--timeout", "2m")
	want := "no broker answers at " + addr + ": is the cluster running? `cluster up --dir " + refused + "`"
	if !errors.Is(err, client.ErrUnreachable) || !strings.Contains(err.Error(), want) {
		t.Fatalf("refused: err = %v; want %q", err, want)
	}
	if took := time.Since(start); took > time.Minute {
		t.Fatalf("took %v: the answer waited for --timeout", took)
	}
}

// runTopicsDir runs `cluster topics ARGS --dir dir`.
func runTopicsDir(t *testing.T, dir string, args ...string) (string, string, error) {
	t.Helper()
	return runTopicsFlags(t, append(args, "--dir", dir)...)
}

// The summary's "Try, in another terminal" lines must run as typed: from a
// checkout that is bin/cluster, not a `cluster` that is not on $PATH.
func TestSelfCommandRunsAsTyped(t *testing.T) {
	for _, c := range []struct{ argv0, wd, want string }{
		{"cluster", "/src/tapes", "cluster"},
		{"/src/tapes/bin/cluster", "/src/tapes", "bin/cluster"},
		{"bin/cluster", "/", "bin/cluster"},
		{"/src/tapes/cluster", "/src/tapes", "./cluster"},
		{"/opt/tapes/bin/cluster", "/home/me", "/opt/tapes/bin/cluster"},
		{"/my dir/cluster", "/home/me", "'/my dir/cluster'"},
	} {
		if got := selfCommand(c.argv0, c.wd); got != c.want {
			t.Errorf("selfCommand(%q, %q) = %q, want %q", c.argv0, c.wd, got, c.want)
		}
	}
}
