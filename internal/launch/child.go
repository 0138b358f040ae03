package launch

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tapes-dev/tapes/internal/clusterfile"
	"github.com/tapes-dev/tapes/internal/netns"
)

// child is one process of the cluster (a broker, or a producer or consumer
// started with StartProcess), across its restarts.
type child struct {
	// op serialises the operations that change the process: Kill, Stop,
	// Pause, Resume, Restart and Close.
	op sync.Mutex

	// Fixed once the child is created.
	kind    string // "broker", "producer", "consumer"
	id      int32  // brokers only
	name    string
	dataDir string // DIR/NAME (brokers only)
	log     string // DIR/logs/NAME.log
	addr    string // the address clients dial (brokers only)
	listen  string // HOST:PORT the launcher binds for it (brokers only)
	// kafkaAddr and kafkaListen are the same for its Kafka listener.
	kafkaAddr, kafkaListen string
	// host is the broker's own host (Options.Network), nil on the
	// launcher's.
	host *netns.Host
	// join: a broker AddBroker added to the running cluster; it runs
	// with --join (the other brokers' addresses) instead of --peers.
	join bool
	// path, args and env run a non-broker child; env adds to the
	// launcher's environment.
	path string
	args []string
	env  []string

	// Guarded by Cluster.mu.
	proc clusterfile.Process // as cluster.json shows it
	run  *run                // the latest process; nil before the first start
}

// run is one process of a child, from start to exit.
type run struct {
	cmd  *exec.Cmd
	pid  int
	done chan struct{} // closed once the process has exited and been reaped

	// Guarded by Cluster.mu.
	expected bool // the launcher asked it to end
	paused   bool
	state    *os.ProcessState
}

// liveLocked returns the running process, or nil. Cluster.mu held.
func (ch *child) liveLocked() *run {
	if ch.run == nil {
		return nil
	}
	select {
	case <-ch.run.done:
		return nil
	default:
		return ch.run
	}
}

// commandLine is the program and arguments of the child.
func (c *Cluster) commandLine(ch *child) (string, []string) {
	if ch.kind != "broker" {
		return ch.path, ch.args
	}
	if ch.host != nil {
		return c.network.Command(*ch.host, c.brokerd, append([]string{
			"--id", strconv.Itoa(int(ch.id)),
			"--data-dir", ch.dataDir,
			"--listen", ch.listen,
			"--kafka-listen", ch.kafkaListen,
			"--peers", c.peersOf(ch),
		}, c.brokerArgs...)...)
	}
	args := []string{
		"--id", strconv.Itoa(int(ch.id)),
		"--data-dir", ch.dataDir,
		"--listen-fd", "3",
		"--kafka-listen-fd", "4",
	}
	if ch.join {
		args = append(args, "--join", c.joinOf(ch))
	} else {
		args = append(args, "--peers", c.peersOf(ch))
	}
	if ch.listen != ch.addr {
		args = append(args, "--advertise", ch.addr)
	}
	if ch.kafkaListen != ch.kafkaAddr {
		args = append(args, "--kafka-advertise", ch.kafkaAddr)
	}
	return c.brokerd, append(args, c.brokerArgs...)
}

// brokerListeners are the sockets the launcher binds for one broker before
// it starts, so that every port is known (and kept across restarts) before
// any broker runs.
type brokerListeners struct {
	grpc, kafka *net.TCPListener
}

// close closes the launcher's copies; a nil *brokerListeners is none.
func (l *brokerListeners) close() {
	if l != nil {
		l.grpc.Close()
		l.kafka.Close()
	}
}

// bindBroker binds ch's gRPC and Kafka listeners again at the addresses
// they had (Restart).
func bindBroker(ch *child) (*brokerListeners, error) {
	g, _, err := bind(ch.listen)
	if err != nil {
		return nil, err
	}
	k, _, err := bind(ch.kafkaListen)
	if err != nil {
		g.Close()
		return nil, fmt.Errorf("Kafka listener: %w", err)
	}
	return &brokerListeners{grpc: g, kafka: k}, nil
}

// spawn starts the child: a broker serving on ls, which it hands over as
// file descriptors 3 (gRPC) and 4 (Kafka) (the launcher's copies of the
// sockets are closed whatever happens, so that once the child is gone
// nothing accepts on the ports), or another process (ls nil).
func (c *Cluster) spawn(ch *child, ls *brokerListeners) error {
	var extra []*os.File
	if ls != nil {
		defer ls.close()
		for _, ln := range []*net.TCPListener{ls.grpc, ls.kafka} {
			lf, err := ln.File()
			if err != nil {
				return fmt.Errorf("launch: %s: pass the listener: %w", ch.name, err)
			}
			defer lf.Close()
			extra = append(extra, lf)
		}
	}
	if ch.dataDir != "" {
		if err := os.MkdirAll(ch.dataDir, 0o755); err != nil {
			return fmt.Errorf("launch: %s: %w", ch.name, err)
		}
	}
	logf, err := os.OpenFile(ch.log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("launch: %s: open log: %w", ch.name, err)
	}
	defer logf.Close()

	path, args := c.commandLine(ch)
	c.log.Info("starting "+ch.kind, "name", ch.name, "address", ch.addr, "kafka_address", ch.kafkaAddr)
	fmt.Fprintf(logf, "%s launcher: starting %s: %s %s\n", stamp(), ch.name, path, strings.Join(args, " "))
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = extra
	cmd.Env = append(append(os.Environ(), c.env...), ch.env...)
	if ch.kind == "broker" {
		// The brokers of one launcher share this machine's cores: each gets
		// its share, at least one. On 2 cores and 3 brokers that is one,
		// which cut idle CPU by a quarter and cost no throughput (bench).
		cmd.Env = c.defaultEnv(cmd.Env, "GOMAXPROCS", strconv.Itoa(max(1, runtime.NumCPU()/len(c.children))))
		// An idle broker's live heap is small (7 MB at 100 partitions), so
		// at GOGC=100 its heartbeats' garbage started a collection every
		// few seconds: 7% of its idle CPU (TestBenchIdleCPU, ARCHITECTURE
		// "Idle cost").
		cmd.Env = c.defaultEnv(cmd.Env, "GOGC", strconv.Itoa(brokerGOGC))
	}
	cmd.SysProcAttr = childAttrs()
	start := cmd.Start
	if ch.kind == "broker" {
		start = func() error { return startWithTimerSlack(cmd, BrokerTimerSlack) }
	}
	if err := start(); err != nil {
		fmt.Fprintf(logf, "%s launcher: %s did not start: %v\n", stamp(), ch.name, err)
		return fmt.Errorf("launch: start %s: %w", ch.name, err)
	}
	r := &run{cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{})}
	c.log.Debug(ch.kind+" started", "name", ch.name, "pid", r.pid)
	c.mu.Lock()
	ch.run = r
	ch.proc.PID = r.pid
	if err := c.writeFileLocked(); err != nil {
		c.log.Error("cannot record the new pid", "name", ch.name, "err", err)
	}
	c.mu.Unlock()
	go c.reap(ch, r)
	return nil
}

// reap waits for r to exit, records it (cluster.json, the child's log) and,
// if nobody asked it to end, reports it on Exited.
func (c *Cluster) reap(ch *child, r *run) {
	_ = r.cmd.Wait() // the outcome is in ProcessState
	st := r.cmd.ProcessState
	c.mu.Lock()
	defer c.mu.Unlock()
	r.state, r.paused = st, false
	expected := r.expected || c.closed
	if ch.run == r {
		ch.proc.PID = 0
		if err := c.writeFileLocked(); err != nil {
			c.log.Error("cannot record an exit", "name", ch.name, "err", err)
		}
	}
	how := "exited"
	if !expected {
		how = "exited unexpectedly"
	}
	if err := appendLine(ch.log, fmt.Sprintf("%s launcher: %s (pid %d) %s: %s", stamp(), ch.name, r.pid, how, describeState(st))); err != nil {
		c.log.Warn("cannot note an exit in the broker's log", "name", ch.name, "err", err)
	}
	c.log.Debug(ch.kind+" "+how, "name", ch.name, "pid", r.pid, "status", describeState(st))
	if !expected {
		ev := ExitEvent{Name: ch.name, PID: r.pid, State: st, Log: ch.log, Time: time.Now()}
		select {
		case c.events <- ev:
		default:
			c.log.Warn("exit event dropped: nobody reads Exited", "event", ev.String())
		}
	}
	close(r.done)
}

// child returns the named child.
func (c *Cluster) child(name string) (*child, error) {
	c.mu.Lock()
	ch, ok := c.byName[name]
	c.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("launch: %q (have %s): %w", name, strings.Join(c.Names(), ", "), ErrUnknownProcess)
	}
	return ch, nil
}

// operate runs fn on the named child with its operation lock held, so that
// operations on one process (kill, stop, pause, restart) never interleave.
func (c *Cluster) operate(name string, fn func(ch *child) error) error {
	ch, err := c.child(name)
	if err != nil {
		return err
	}
	ch.op.Lock()
	defer ch.op.Unlock()
	return fn(ch)
}

// live returns the child's running process, marked as expected to end when
// ending is what the caller is about to ask. ch.op held.
func (c *Cluster) live(ch *child, ending bool) (*run, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	r := ch.liveLocked()
	if r == nil {
		why := "never started"
		if ch.run != nil {
			why = describeState(ch.run.state)
		}
		return nil, fmt.Errorf("launch: %s (%s): %w", ch.name, why, ErrNotRunning)
	}
	if ending {
		r.expected = true
	}
	return r, nil
}

// Kill sends SIGKILL to the named process (a crash) and waits until it has exited.
func (c *Cluster) Kill(name string) error {
	return c.operate(name, func(ch *child) error {
		r, err := c.live(ch, true)
		if err != nil {
			return err
		}
		if err := signal(r, syscall.SIGKILL); err != nil {
			return fmt.Errorf("launch: kill %s: %w", name, err)
		}
		<-r.done
		return nil
	})
}

// Stop asks the named process to shut down (SIGTERM) and waits; after
// StopTimeout it sends SIGKILL.
func (c *Cluster) Stop(name string) error {
	return c.operate(name, func(ch *child) error {
		r, err := c.live(ch, true)
		if err != nil {
			return err
		}
		return c.stopRun(name, r)
	})
}

// stopRun ends r: SIGCONT (a stopped process cannot handle SIGTERM), SIGTERM,
// and SIGKILL if it has not exited after the stop timeout.
func (c *Cluster) stopRun(name string, r *run) error {
	if err := signal(r, syscall.SIGCONT); err != nil {
		return fmt.Errorf("launch: stop %s: %w", name, err)
	}
	if err := signal(r, syscall.SIGTERM); err != nil {
		return fmt.Errorf("launch: stop %s: %w", name, err)
	}
	t := time.NewTimer(c.stopTimeout)
	defer t.Stop()
	select {
	case <-r.done:
		return nil
	case <-t.C:
	}
	c.log.Warn("process ignored SIGTERM; killing it", "name", name, "pid", r.pid, "waited", c.stopTimeout)
	if err := signal(r, syscall.SIGKILL); err != nil {
		return fmt.Errorf("launch: stop %s: %w", name, err)
	}
	<-r.done
	return nil
}

// Pause stops the named process with SIGSTOP: it keeps its sockets and
// state but answers nothing, as a stalled host would.
func (c *Cluster) Pause(name string) error {
	return c.jobControl(name, syscall.SIGSTOP, true)
}

// Resume continues a paused process with SIGCONT.
func (c *Cluster) Resume(name string) error {
	return c.jobControl(name, syscall.SIGCONT, false)
}

func (c *Cluster) jobControl(name string, sig syscall.Signal, paused bool) error {
	return c.operate(name, func(ch *child) error {
		r, err := c.live(ch, false)
		if err != nil {
			return err
		}
		if err := signal(r, sig); err != nil {
			return fmt.Errorf("launch: %s %s: %w", sig, name, err)
		}
		c.mu.Lock()
		r.paused = paused
		c.mu.Unlock()
		return nil
	})
}

// Restart starts the named process again on the same data dir and address,
// stopping it first (as Stop does) if it is running. It fails if the port
// cannot be bound again: the other brokers know the broker by that address.
func (c *Cluster) Restart(name string) error {
	return c.operate(name, func(ch *child) error {
		r, err := c.live(ch, true)
		switch {
		case errors.Is(err, ErrNotRunning):
		case err != nil:
			return err
		default:
			if err := c.stopRun(name, r); err != nil {
				return err
			}
		}
		var ls *brokerListeners
		if ch.kind == "broker" && ch.host == nil {
			if ls, err = bindBroker(ch); err != nil {
				return fmt.Errorf("launch: restart %s: bind its address again: %w", name, err)
			}
		}
		c.mu.Lock()
		closed := c.closed
		c.mu.Unlock()
		if closed {
			ls.close()
			return ErrClosed
		}
		return c.spawn(ch, ls)
	})
}

// signal sends sig to r's process; a process that has already exited is no error.
func signal(r *run, sig syscall.Signal) error {
	if err := r.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

// appendLine adds a line of the launcher's own to a child's log file.
func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	_, werr := fmt.Fprintln(f, line)
	return errors.Join(werr, f.Close())
}

func stamp() string { return time.Now().Format(time.RFC3339Nano) }

// brokerGOGC is the GOGC a broker gets unless the launcher's environment
// or Options.Env sets one.
const brokerGOGC = 400

// BrokerTimerSlack is the timer slack (Linux, prctl PR_SET_TIMERSLACK) the
// launcher starts brokers with: the kernel may fire a broker's timers up
// to this much late, so that the wake-ups of its thousands of Raft timers
// (heartbeats every 50-100 ms per follower, leases, election checks) that
// fall within it cost one wake-up of the process instead of one each.
// Against Raft's 1 s timeouts 5 ms is 0.5%, on leaders' and followers'
// timers alike; network events are not delayed.
const BrokerTimerSlack = 5 * time.Millisecond

// defaultEnv appends key=value to env unless the launcher's own
// environment or Options.Env sets key.
func (c *Cluster) defaultEnv(env []string, key, value string) []string {
	if os.Getenv(key) != "" || hasEnv(c.env, key) {
		return env
	}
	return append(env, key+"="+value)
}

// hasEnv reports whether env sets key.
func hasEnv(env []string, key string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, key+"=") {
			return true
		}
	}
	return false
}
