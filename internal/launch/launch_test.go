package launch

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tapes-dev/tapes/internal/clusterfile"
	"github.com/tapes-dev/tapes/internal/eventually"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/launch/launchtest"
)

func TestMain(m *testing.M) {
	launchtest.MainIfRequested()
	runLauncherIfRequested()
	os.Exit(m.Run())
}

// fakeOptions starts n fake brokers (this test binary) in dir.
func fakeOptions(t *testing.T, dir string, n int, args ...string) Options {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return Options{
		Dir:         dir,
		Brokers:     n,
		BrokerdPath: self,
		BrokerArgs:  args,
		// GORACE: a race-enabled child would otherwise sleep a second on exit.
		Env:         []string{launchtest.EnvVar + "=1", "GORACE=atexit_sleep_ms=0"},
		StopTimeout: 5 * time.Second,
		Logger:      slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

func start(t *testing.T, o Options) *Cluster {
	t.Helper()
	c, err := Start(context.Background(), o)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatalf("WaitReady: %v", err)
	}
	return c
}

// metadata calls Metadata on addr with a deadline.
func metadata(addr string, timeout time.Duration) (*tapesv1.MetadataResponse, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return tapesv1.NewBrokerServiceClient(conn).Metadata(ctx, &tapesv1.MetadataRequest{})
}

// starts reads the fake's record of its starts: one "pid=P addr=A" per start.
func starts(t *testing.T, dataDir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, launchtest.StartsFile))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

func readFile(t *testing.T, dir string) *clusterfile.File {
	t.Helper()
	f, err := clusterfile.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func TestStartHandsEachBrokerItsSocketAndRecordsIt(t *testing.T) {
	dir := t.TempDir()
	c := start(t, fakeOptions(t, dir, 3))

	f := readFile(t, dir)
	if got, want := f.Bootstrap, strings.Join(c.Bootstrap(), ","); got != want {
		t.Fatalf("cluster.json bootstrap %q, Bootstrap() %q", got, want)
	}
	brokers := f.Brokers()
	if len(brokers) != 3 {
		t.Fatalf("cluster.json brokers: %+v", brokers)
	}
	for i, p := range brokers {
		name := fmt.Sprintf("broker-%d", i+1)
		if p.Name != name || p.ID != int32(i+1) || p.Kind != "broker" || p.PID == 0 || !alive(p.PID) {
			t.Fatalf("cluster.json entry %d: %+v", i, p)
		}
		if p.DataDir != filepath.Join(dir, name) || p.Log != filepath.Join(dir, "logs", name+".log") {
			t.Fatalf("paths of %s: %+v", name, p)
		}
		// The fake served on the socket it inherited: the address it
		// reports is the one the launcher bound and wrote down.
		if got, want := starts(t, p.DataDir), fmt.Sprintf("pid=%d addr=%s", p.PID, p.Address); len(got) != 1 || got[0] != want {
			t.Fatalf("%s starts: %q, want %q", name, got, want)
		}
		resp, err := metadata(p.Address, 5*time.Second)
		if err != nil {
			t.Fatalf("Metadata on %s: %v", p.Address, err)
		}
		if resp.BrokerId != p.ID {
			t.Fatalf("%s answered as broker %d", p.Address, resp.BrokerId)
		}
		// Every broker got every broker's address in --peers.
		for j, b := range resp.Brokers {
			if b.Id != brokers[j].ID || b.Address != brokers[j].Address {
				t.Fatalf("%s peers %v, cluster.json %+v", name, resp.Brokers, brokers)
			}
		}
		logText, err := os.ReadFile(p.Log)
		if err != nil || !strings.Contains(string(logText), "fake brokerd serving") {
			t.Fatalf("%s log lacks the child's stderr: %q, %v", name, logText, err)
		}
		if got, ok := c.Process(name); !ok || got != p {
			t.Fatalf("Process(%s) = %+v, %v; cluster.json %+v", name, got, ok, p)
		}
	}
	if _, ok := c.Process("broker-9"); ok {
		t.Fatal("Process of an unknown name")
	}
	if err := c.Kill("broker-9"); !errors.Is(err, ErrUnknownProcess) {
		t.Fatalf("Kill(broker-9) = %v", err)
	}
}

func TestKillClosesThePortAndRestartReopensIt(t *testing.T) {
	dir := t.TempDir()
	c := start(t, fakeOptions(t, dir, 2))
	before, _ := c.Process("broker-2")

	if err := c.Kill("broker-2"); err != nil {
		t.Fatal(err)
	}
	if c.Running("broker-2") || alive(before.PID) {
		t.Fatalf("broker-2 (pid %d) still running after Kill", before.PID)
	}
	if _, err := net.DialTimeout("tcp", before.Address, time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial killed broker at %s: %v, want connection refused", before.Address, err)
	}
	if p, _ := readFile(t, dir).Find("broker-2"); p.PID != 0 {
		t.Fatalf("cluster.json still lists pid %d", p.PID)
	}
	if err := c.Kill("broker-2"); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("second Kill = %v", err)
	}

	// While something else holds the port, Restart fails and says why.
	squat, err := net.Listen("tcp", before.Address)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Restart("broker-2"); err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("Restart on a taken port = %v", err)
	}
	squat.Close()

	if err := c.Restart("broker-2"); err != nil {
		t.Fatal(err)
	}
	after, _ := c.Process("broker-2")
	if after.Address != before.Address || after.PID == 0 || after.PID == before.PID {
		t.Fatalf("after Restart %+v, before %+v", after, before)
	}
	resp, err := metadata(after.Address, 5*time.Second)
	if err != nil || resp.BrokerId != 2 {
		t.Fatalf("Metadata after Restart: %v, %v", resp, err)
	}
	if got := starts(t, after.DataDir); len(got) != 2 || got[1] != fmt.Sprintf("pid=%d addr=%s", after.PID, after.Address) {
		t.Fatalf("starts after Restart: %q", got)
	}
	// Restart of a running broker stops it first.
	if err := c.Restart("broker-2"); err != nil {
		t.Fatal(err)
	}
	again, _ := c.Process("broker-2")
	if alive(after.PID) || again.PID == after.PID || again.Address != after.Address {
		t.Fatalf("Restart of a running broker: old pid %d alive=%v, new %+v", after.PID, alive(after.PID), again)
	}
	select {
	case ev := <-c.Exited():
		t.Fatalf("asked-for exits reported as unexpected: %v", ev)
	default:
	}
}

func TestPauseStallsAndResumeAnswersAgain(t *testing.T) {
	c := start(t, fakeOptions(t, t.TempDir(), 1))
	p, _ := c.Process("broker-1")
	if err := c.Pause("broker-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := metadata(p.Address, 300*time.Millisecond); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("Metadata on a paused broker: %v, want DeadlineExceeded", err)
	}
	if !c.Running("broker-1") {
		t.Fatal("a paused broker is still running")
	}
	if err := c.Resume("broker-1"); err != nil {
		t.Fatal(err)
	}
	if resp, err := metadata(p.Address, 5*time.Second); err != nil || resp.BrokerId != 1 {
		t.Fatalf("Metadata after Resume: %v, %v", resp, err)
	}
}

func TestUnexpectedExitIsReported(t *testing.T) {
	dir := t.TempDir()
	c := start(t, fakeOptions(t, dir, 2))
	p, _ := c.Process("broker-1")
	if err := syscall.Kill(p.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-c.Exited():
		if ev.Name != "broker-1" || ev.PID != p.PID || ev.Log != p.Log || ev.State == nil ||
			ev.State.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("exit event %+v (%v)", ev, ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no exit event for a broker killed from outside")
	}
	if q, _ := readFile(t, dir).Find("broker-1"); q.PID != 0 {
		t.Fatalf("cluster.json still lists pid %d", q.PID)
	}
	logText, _ := os.ReadFile(p.Log)
	if !strings.Contains(string(logText), fmt.Sprintf("broker-1 (pid %d) exited unexpectedly: signal: killed", p.PID)) {
		t.Fatalf("log does not record the crash:\n%s", logText)
	}
	// WaitReady does not wait for a broker that is not running.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	began := time.Now()
	if err := c.WaitReady(ctx); !errors.Is(err, ErrNotRunning) || !strings.Contains(err.Error(), p.Log) {
		t.Fatalf("WaitReady with a dead broker = %v", err)
	}
	if time.Since(began) > 2*time.Second {
		t.Fatalf("WaitReady took %v to notice a dead broker", time.Since(began))
	}
}

func TestStopKillsABrokerThatIgnoresSIGTERM(t *testing.T) {
	o := fakeOptions(t, t.TempDir(), 1, "--fake-ignore-term")
	o.StopTimeout = 300 * time.Millisecond
	c := start(t, o)
	p, _ := c.Process("broker-1")
	began := time.Now()
	if err := c.Stop("broker-1"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took < o.StopTimeout {
		t.Fatalf("Stop returned after %v, before the %v grace period", took, o.StopTimeout)
	}
	if alive(p.PID) || c.Running("broker-1") {
		t.Fatalf("pid %d survived Stop", p.PID)
	}
	if err := c.Stop("broker-1"); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("second Stop = %v", err)
	}
}

func TestWaitReadyWaitsForAController(t *testing.T) {
	dir := t.TempDir()
	flagFile := filepath.Join(dir, "controller-elected")
	o := fakeOptions(t, dir, 2, "--fake-controller-file", flagFile)
	c, err := Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	if err := c.WaitReady(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitReady without a controller = %v", err)
	} else if !strings.Contains(err.Error(), "no controller elected") && !strings.Contains(err.Error(), "Metadata") {
		t.Fatalf("WaitReady error does not say what is missing: %v", err)
	}
	if err := os.WriteFile(flagFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel2()
	if err := c.WaitReady(ctx2); err != nil {
		t.Fatalf("WaitReady with a controller: %v", err)
	}
}

// A broker that answers with a retriable Kafka error (not registered yet)
// is on its way: WaitReady says it is starting, not that it fails.
func TestWaitReadyCallsAnUnregisteredBrokerStarting(t *testing.T) {
	dir := t.TempDir()
	o := fakeOptions(t, dir, 1, "--fake-registered-file", filepath.Join(dir, "registered"))
	c, err := Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Each WaitReady ends at its deadline with what its last round found;
	// once the fake serves (it may take a while to start on a loaded
	// machine), that is the unregistered broker, called starting.
	want := "broker-1 is starting (broker 1 has not registered with the controller yet)"
	eventually.Nil(t, 60*time.Second, "WaitReady to call broker-1 starting", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		err := c.WaitReady(ctx)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WaitReady = %v; want the deadline", err)
		}
		if !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "does not answer") {
			return err
		}
		return nil
	})
}

func TestCloseStopsEveryChildAndStartResumesTheCluster(t *testing.T) {
	dir := t.TempDir()
	o := fakeOptions(t, dir, 3)
	c, err := Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	first := readFile(t, dir).Brokers()

	// One launcher per directory.
	if _, err := Start(context.Background(), o); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("second Start on a directory in use = %v", err)
	}
	// Close must also end a paused broker.
	if err := c.Pause("broker-3"); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range first {
		if alive(p.PID) {
			t.Fatalf("%s (pid %d) still running after Close", p.Name, p.PID)
		}
		// Each shut down on SIGTERM, the paused one too (it was continued).
		logText, _ := os.ReadFile(p.Log)
		if want := fmt.Sprintf("%s (pid %d) exited: exit status 0", p.Name, p.PID); !strings.Contains(string(logText), want) {
			t.Fatalf("%s log lacks %q:\n%s", p.Name, want, logText)
		}
	}
	for _, p := range readFile(t, dir).Processes {
		if p.PID != 0 {
			t.Fatalf("cluster.json after Close: %+v", p)
		}
	}
	if _, open := <-c.Exited(); open {
		t.Fatal("Exited still open after Close")
	}
	if err := c.Restart("broker-1"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Restart after Close = %v", err)
	}

	// A directory of 3 brokers is not restarted as 2.
	o.Brokers = 2
	if _, err := Start(context.Background(), o); err == nil || !strings.Contains(err.Error(), "3 brokers") {
		t.Fatalf("Start with another size = %v", err)
	}

	// Started again (size taken from cluster.json), the cluster keeps its
	// ids, data dirs and ports, except a port someone else took meanwhile.
	squat, err := net.Listen("tcp", first[0].Address)
	if err != nil {
		t.Fatal(err)
	}
	defer squat.Close()
	o.Brokers = 0
	c2 := start(t, o)
	second := readFile(t, dir).Brokers()
	if len(second) != 3 {
		t.Fatalf("restarted cluster: %+v", second)
	}
	for i, p := range second {
		if p.ID != first[i].ID || p.DataDir != first[i].DataDir || p.PID == 0 {
			t.Fatalf("restarted %+v, was %+v", p, first[i])
		}
		if moved := p.Address != first[i].Address; moved != (i == 0) {
			t.Fatalf("broker %d address %s, was %s (only broker-1's port was taken)", p.ID, p.Address, first[i].Address)
		}
		if got := starts(t, p.DataDir); len(got) != 2 || got[1] != fmt.Sprintf("pid=%d addr=%s", p.PID, p.Address) {
			t.Fatalf("%s starts: %q", p.Name, got)
		}
	}
	if strings.Join(c2.Bootstrap(), ",") != readFile(t, dir).Bootstrap {
		t.Fatal("bootstrap not updated")
	}
}

func TestStartRefusesWhileAnEarlierBrokerLives(t *testing.T) {
	dir := t.TempDir()
	// cluster.json says broker-1 runs as this very (live) process.
	err := clusterfile.Write(dir, &clusterfile.File{Processes: []clusterfile.Process{
		{Name: "broker-1", Kind: "broker", ID: 1, PID: os.Getpid(), Address: "127.0.0.1:1"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Start(context.Background(), fakeOptions(t, dir, 0)); !errors.Is(err, ErrLocked) ||
		!strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("Start over a live broker = %v", err)
	}
}

func TestFindBinary(t *testing.T) {
	pathDir := t.TempDir()
	t.Setenv("PATH", pathDir)
	name := fmt.Sprintf("tapes-launch-test-%d", os.Getpid())

	_, err := FindBinary(name)
	if !errors.Is(err, ErrBinaryNotFound) || !strings.Contains(err.Error(), "$PATH") {
		t.Fatalf("FindBinary of a missing program = %v", err)
	}
	self, _ := os.Executable()
	if beside := filepath.Join(filepath.Dir(self), name); !strings.Contains(err.Error(), beside) {
		t.Fatalf("error does not name %s: %v", beside, err)
	}

	onPath := filepath.Join(pathDir, name)
	if err := os.WriteFile(onPath, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := FindBinary(name); err != nil || got != onPath {
		t.Fatalf("FindBinary = %q, %v; want %s", got, err, onPath)
	}

	// A program beside the executable wins over $PATH.
	beside := filepath.Join(filepath.Dir(self), name)
	if err := os.WriteFile(beside, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Skipf("cannot write beside the test binary: %v", err)
	}
	defer os.Remove(beside)
	if got, err := FindBinary(name); err != nil || got != beside {
		t.Fatalf("FindBinary = %q, %v; want %s", got, err, beside)
	}
}

// launcherEnv makes this test binary a launcher of fake brokers in the
// directory it names; it prints "ready" and waits to be killed.
const launcherEnv = "TAPES_LAUNCH_TEST_LAUNCHER_DIR"

func runLauncherIfRequested() {
	dir := os.Getenv(launcherEnv)
	if dir == "" {
		return
	}
	self, _ := os.Executable()
	c, err := Start(context.Background(), Options{
		Dir: dir, Brokers: 2, BrokerdPath: self, Env: []string{launcherEnv + "=", launchtest.EnvVar + "=1", "GORACE=atexit_sleep_ms=0"},
	})
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err = c.WaitReady(ctx)
		cancel()
	}
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	select {}
}

func TestKilledLauncherLeavesNoBroker(t *testing.T) {
	dir := t.TempDir()
	self, _ := os.Executable()
	launcher := &os.ProcAttr{
		Env:   append(os.Environ(), launcherEnv+"="+dir, "GORACE=atexit_sleep_ms=0"),
		Files: []*os.File{nil, nil, os.Stderr},
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	launcher.Files[1] = w
	proc, err := os.StartProcess(self, []string{self}, launcher)
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer proc.Kill()
	line, _ := bufio.NewReader(r).ReadString('\n')
	r.Close()
	if strings.TrimSpace(line) != "ready" {
		proc.Kill()
		proc.Wait()
		t.Fatalf("launcher said %q", line)
	}
	brokers := readFile(t, dir).Brokers()
	if err := proc.Kill(); err != nil {
		t.Fatal(err)
	}
	proc.Wait()

	t.Cleanup(func() { // if the test fails, leave no orphan behind either
		for _, p := range brokers {
			if alive(p.PID) {
				syscall.Kill(p.PID, syscall.SIGKILL)
			}
		}
	})
	for _, p := range brokers {
		eventually.True(t, 10*time.Second, fmt.Sprintf("%s (pid %d) to die with its launcher", p.Name, p.PID),
			func() bool { return !alive(p.PID) })
	}
	// The directory is free again: the lock died with the launcher, and the
	// pids it left in cluster.json are gone.
	c := start(t, fakeOptions(t, dir, 0))
	if got := strings.Join(c.Bootstrap(), ","); got != readFile(t, dir).Bootstrap || len(c.Bootstrap()) != 2 {
		t.Fatalf("after the crash: %v", got)
	}
	for i, p := range brokers {
		if c.Bootstrap()[i] != p.Address {
			t.Fatalf("broker %d moved from %s to %s", p.ID, p.Address, c.Bootstrap()[i])
		}
	}
}
