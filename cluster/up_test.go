package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/clusterfile"
	poll "github.com/tapes-dev/tapes/internal/eventually"
	"github.com/tapes-dev/tapes/internal/launch"
	"github.com/tapes-dev/tapes/internal/launch/launchtest"
)

// This test binary doubles as a fake brokerd (see launchtest).
func init() { launchtest.MainIfRequested() }

// lockedBuffer is an io.Writer that tests may read while `up` writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// fakeBrokerd makes the children of `up` fake brokers and returns the path to
// give --brokerd.
func fakeBrokerd(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(launchtest.EnvVar, "1")
	t.Setenv("GORACE", "atexit_sleep_ms=0") // a race-enabled child would sleep a second on exit
	return self
}

// eventually waits (internal/eventually, 20 s) for cond, failing with
// what and explain()'s account of the state.
func eventually(t *testing.T, what string, cond func() bool, explain func() string) {
	t.Helper()
	poll.Nil(t, 20*time.Second, what, func() error {
		if cond() {
			return nil
		}
		return errors.New("not yet\n" + explain())
	})
}

func pidAlive(pid int) bool { return pid > 0 && syscall.Kill(pid, 0) == nil }

func TestUpRunsTheDemoClusterUntilInterrupted(t *testing.T) {
	brokerd := fakeBrokerd(t)
	dir := t.TempDir()
	var stdout, stderr lockedBuffer
	show := func() string { return "stdout:\n" + stdout.String() + "\nstderr:\n" + stderr.String() }
	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	done := make(chan error, 1)
	go func() {
		done <- (&upCommand{stdout: &stdout, stderr: &stderr}).Run(ctx,
			[]string{"--brokers", "2", "--dir", dir, "--demo", "--brokerd", brokerd, "--timeout", "20s"})
	}()
	eventually(t, "the cluster to be ready", func() bool {
		select {
		case err := <-done:
			t.Fatalf("up returned early: %v\n%s", err, show())
		default:
		}
		return strings.Contains(stdout.String(), "Supervising")
	}, show)

	f, err := clusterfile.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	brokers := f.Brokers()
	if len(brokers) != 2 {
		t.Fatalf("cluster.json: %+v", f)
	}
	out := stdout.String()
	for _, p := range brokers {
		if !pidAlive(p.PID) || !strings.Contains(out, p.Address) || !strings.Contains(out, p.Log) {
			t.Fatalf("%+v not running or not in the summary:\n%s", p, show())
		}
	}
	for _, want := range []string{
		"topic orders: 3 partitions, replication factor 2, min.insync.replicas=2",
		"bootstrap servers: " + f.Bootstrap,
		"cluster topics describe --dir " + dir,
		"cluster produce --topic orders --dir " + dir,
		"cluster consume --topic orders --from-beginning --dir " + dir,
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("summary lacks %q:\n%s", want, show())
		}
	}
	for _, want := range []string{"starting broker name=broker-1", "waiting for leaders", "creating topic orders"} {
		if !strings.Contains(stderr.String(), want) {
			t.Fatalf("progress lacks %q:\n%s", want, show())
		}
	}
	topics, err := launchtest.ReadTopics(filepath.Join(dir, "fake-topics.json"))
	if err != nil || len(topics) != 1 {
		t.Fatalf("topics created: %v, %v", topics, err)
	}
	if tp := topics[0]; tp.Name != "orders" || tp.Partitions != 3 || tp.ReplicationFactor != 2 || tp.Configs["min.insync.replicas"] != "2" {
		t.Fatalf("demo topic created as %v", tp)
	}

	// A second `up` on the directory refuses at once.
	err = (&upCommand{stdout: io.Discard, stderr: io.Discard}).Run(context.Background(), []string{"--dir", dir, "--brokerd", brokerd})
	if !errors.Is(err, launch.ErrLocked) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("second up = %v", err)
	}

	// A broker killed from outside is reported, not restarted.
	if err := syscall.Kill(brokers[0].PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the crash report", func() bool {
		return strings.Contains(stderr.String(), "broker-1 exited unexpectedly (signal: killed)") &&
			strings.Contains(stderr.String(), "1 of 2 brokers still running")
	}, show)

	interrupt()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("up after interrupt: %v\n%s", err, show())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("up did not return after interrupt\n%s", show())
	}
	if pidAlive(brokers[1].PID) {
		t.Fatalf("broker-2 (pid %d) still running after up returned", brokers[1].PID)
	}
	f, err = clusterfile.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Processes {
		if p.PID != 0 {
			t.Fatalf("cluster.json after up: %+v", p)
		}
	}
	if !strings.Contains(stderr.String(), "stopped; the data stays in "+dir) {
		t.Fatalf("no goodbye:\n%s", show())
	}
}

func TestUpShowsWhyABrokerDied(t *testing.T) {
	brokerd := fakeBrokerd(t)
	var stderr lockedBuffer
	err := (&upCommand{stdout: io.Discard, stderr: &stderr}).Run(context.Background(),
		[]string{"--brokers", "1", "--dir", t.TempDir(), "--brokerd", brokerd, "--broker-arg", "--no-such-flag"})
	if !errors.Is(err, launch.ErrNotRunning) {
		t.Fatalf("up with a broken broker = %v", err)
	}
	if s := stderr.String(); !strings.Contains(s, "flag provided but not defined: -no-such-flag") ||
		!strings.Contains(s, "broker-1 is not running") {
		t.Fatalf("stderr does not show the broker's complaint:\n%s", s)
	}
}

func TestUpRejectsBadCommandLines(t *testing.T) {
	for _, args := range [][]string{{"--brokers", "0"}, {"extra"}, {"--timeout", "0s"}, {"--no-such-flag"}} {
		err := (&upCommand{stdout: io.Discard, stderr: io.Discard}).Run(context.Background(), append(args, "--dir", t.TempDir()))
		if !errors.Is(err, errUsage) {
			t.Errorf("up %v = %v, want a usage error", args, err)
		}
	}
}

// TestUpBinaryStopsBrokersOnCtrlC runs the real `cluster` binary in its own
// process group and interrupts that group, as a terminal's Ctrl-C does: the
// brokers, in groups of their own, must not see the SIGINT; the launcher
// stops them with SIGTERM and exits 0.
func TestUpBinaryStopsBrokersOnCtrlC(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool to build the cluster binary")
	}
	brokerd := fakeBrokerd(t)
	bin := filepath.Join(t.TempDir(), "cluster")
	if out, err := exec.Command(goTool, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dir := t.TempDir()
	cmd := exec.Command(bin, "up", "--brokers", "2", "--dir", dir, "--brokerd", brokerd)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "Supervising") {
				ready <- true
			}
		}
		close(ready)
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatalf("cluster up ended before it was ready:\n%s", stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("cluster up not ready:\n%s", stderr.String())
	}
	f, err := clusterfile.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("cluster up after Ctrl-C: %v\n%s", err, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("cluster up did not exit after Ctrl-C:\n%s", stderr.String())
	}
	for _, p := range f.Brokers() {
		if pidAlive(p.PID) {
			t.Fatalf("%s (pid %d) outlived cluster up", p.Name, p.PID)
		}
		b, _ := os.ReadFile(p.Log)
		if !strings.Contains(string(b), "signal=terminated") || strings.Contains(string(b), "signal=interrupt") {
			t.Fatalf("%s was not stopped by its launcher alone:\n%s", p.Name, b)
		}
	}
}

// TestUpGivesEveryBrokerAKafkaPort: `up` prints the brokers' Kafka
// listeners as a bootstrap list, records them in cluster.json, hands each
// broker its bound socket (a killed broker's port refuses), and a second
// `up` on the directory binds the same ports again.
func TestUpGivesEveryBrokerAKafkaPort(t *testing.T) {
	dir := t.TempDir()
	line := regexp.MustCompile(`(?m)^kafka bootstrap: (127\.0\.0\.1:\d+,127\.0\.0\.1:\d+,127\.0\.0\.1:\d+)$`)
	up := func() (f *clusterfile.File, printed string, stop func()) {
		stdout, stop := runUp(t, "--brokers", "3", "--dir", dir) // later flags win
		m := line.FindStringSubmatch(stdout.String())
		if m == nil {
			stop()
			t.Fatalf("no kafka bootstrap line:\n%s", stdout)
		}
		f, err := clusterfile.Read(dir)
		if err != nil {
			stop()
			t.Fatal(err)
		}
		return f, m[1], stop
	}

	f, printed, stop := up()
	if f.KafkaBootstrap != printed {
		t.Fatalf("cluster.json kafka_bootstrap %q, printed %q", f.KafkaBootstrap, printed)
	}
	brokers := f.Brokers()
	var kafka []string
	for _, p := range brokers {
		if p.KafkaAddress == "" || p.KafkaAddress == p.Address {
			t.Fatalf("broker %s: kafka_address %q beside address %q", p.Name, p.KafkaAddress, p.Address)
		}
		kafka = append(kafka, p.KafkaAddress)
	}
	if got := strings.Join(kafka, ","); got != printed {
		t.Fatalf("brokers' kafka_address %q, bootstrap %q", got, printed)
	}
	// The broker holds the socket it was given: connecting works while it
	// runs, and is refused once it is killed.
	c, err := net.DialTimeout("tcp", brokers[0].KafkaAddress, 10*time.Second)
	if err != nil {
		t.Fatalf("dial broker-1's Kafka port: %v", err)
	}
	c.Close()
	if err := syscall.Kill(brokers[0].PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, "broker-1's Kafka port to refuse", func() bool {
		c, err := net.DialTimeout("tcp", brokers[0].KafkaAddress, 10*time.Second)
		if err == nil {
			c.Close()
		}
		return errors.Is(err, syscall.ECONNREFUSED)
	}, func() string { return brokers[0].KafkaAddress })
	stop()

	f2, printed2, stop2 := up()
	defer stop2()
	if printed2 != printed || f2.KafkaBootstrap != printed {
		t.Fatalf("after a restart: kafka bootstrap %q (cluster.json %q), before %q", printed2, f2.KafkaBootstrap, printed)
	}
}
