package main

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/clusterfile"
	"github.com/tapes-dev/tapes/internal/launch"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// controlCommands are the commands that talk to the control endpoint,
// with the arguments each needs besides --dir.
var controlCommands = map[string][]string{
	"kill": {"broker-1"}, "pause": {"broker-1"}, "resume": {"broker-1"}, "restart": {"broker-1"}, "stop": {"broker-1"},
	"partition": {"broker-1", "--from", "broker-2"}, "isolate": {"broker-2"}, "delay": {"broker-3", "--ms", "10"},
	"heal": nil, "status": nil, "start": {"consumer-1", "--", "--topic", "orders"},
}

// clusterDir writes a cluster.json naming control as the control
// endpoint and, with launcherPID > 0, a lock file naming that launcher.
func clusterDir(t *testing.T, control string, launcherPID int) string {
	t.Helper()
	dir := t.TempDir()
	f := &clusterfile.File{Bootstrap: "127.0.0.1:1", Control: control,
		Processes: []clusterfile.Process{{Name: "broker-1", Kind: "broker", ID: 1, PID: 1, Address: "127.0.0.1:1"}}}
	if err := clusterfile.Write(dir, f); err != nil {
		t.Fatal(err)
	}
	if launcherPID > 0 {
		if err := os.WriteFile(filepath.Join(dir, launch.LockName), []byte(strconv.Itoa(launcherPID)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// deadPID returns the PID of a process that has exited.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// runEveryControlCommand runs each control command against dir and checks
// that it fails with errNoControl, its message containing want, well
// before the commands' own RPC deadlines (30 s and more).
func runEveryControlCommand(t *testing.T, dir, want string) {
	t.Helper()
	for name, args := range controlCommands {
		cmd, ok := commands[name]
		if !ok {
			t.Fatalf("no chaos command %q", name)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := cmd.run(ctx, append([]string{"--dir", dir}, args...))
		cancel()
		if !errors.Is(err, errNoControl) || !strings.Contains(err.Error(), want) {
			t.Errorf("chaos %s: %v; want errNoControl saying %q", name, err, want)
		}
	}
}

// TestControlCommandsSayTheLauncherIsGone (issue 15.4): with a
// cluster.json whose launcher's pid is dead and whose control address
// refuses connections, every control command says that the launcher is not
// running and how to start it.
func TestControlCommandsSayTheLauncherIsGone(t *testing.T) {
	pid := deadPID(t)
	dir := clusterDir(t, testcluster.ClosedPort(t), pid)
	runEveryControlCommand(t, dir, "the launcher of "+dir+" (pid "+strconv.Itoa(pid)+") is not running: start it with `cluster up --dir "+dir+"`")
}

// TestControlCommandsSayNothingAnswers (issue 15.4): a control address
// that refuses connections (a closed loopback port) and one that accepts
// TCP but never speaks gRPC are each reported as "no control endpoint
// answers at ADDR", not waited for.
func TestControlCommandsSayNothingAnswers(t *testing.T) {
	addr := testcluster.ClosedPort(t)
	runEveryControlCommand(t, clusterDir(t, addr, 0), "no control endpoint answers at "+addr)

	silent, err := net.Listen("tcp", "127.0.0.1:0") // never accepts: the kernel completes the handshake, no one answers
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	defer func(d time.Duration) { controlConnectTimeout = d }(controlConnectTimeout)
	controlConnectTimeout = 100 * time.Millisecond
	// The test's own process stands for a launcher that runs but is stopped.
	dir := clusterDir(t, silent.Addr().String(), os.Getpid())
	runEveryControlCommand(t, dir, "no control endpoint answers at "+silent.Addr().String())
}
