package launch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tapes-dev/tapes/internal/clusterfile"
	"github.com/tapes-dev/tapes/internal/netfault"
	"github.com/tapes-dev/tapes/internal/netns"
)

// The ports of every broker on its own host (Options.Network).
const (
	NetnsPort      = 9092
	NetnsKafkaPort = 9093
)

// Errors returned by this package; match them with errors.Is.
var (
	// ErrBinaryNotFound: FindBinary found the program neither beside the
	// running executable nor on $PATH.
	ErrBinaryNotFound = errors.New("binary not found")
	// ErrLocked: the cluster directory is in use, by a running launcher or
	// by a process an earlier launcher left behind.
	ErrLocked = errors.New("cluster directory in use")
	// ErrUnknownProcess: no process of that name in this cluster.
	ErrUnknownProcess = errors.New("unknown process")
	// ErrNotRunning: the process is not running (it exited or was stopped).
	ErrNotRunning = errors.New("process not running")
	// ErrClosed: the Cluster was closed.
	ErrClosed = errors.New("cluster closed")
)

// ExitEvent reports a child that exited without the launcher asking it to
// (a crash, a bad flag, a SIGKILL from outside).
type ExitEvent struct {
	Name string
	PID  int
	// State is how the process ended; its String method reads like
	// "exit status 1" or "signal: killed".
	State *os.ProcessState
	// Log is the file holding the child's output.
	Log  string
	Time time.Time
}

func (e ExitEvent) String() string {
	return fmt.Sprintf("%s (pid %d) exited: %s", e.Name, e.PID, describeState(e.State))
}

func describeState(st *os.ProcessState) string {
	if st == nil {
		return "unknown status"
	}
	return st.String()
}

// exitEventBuffer is how many unread ExitEvents are kept; further ones are
// logged and dropped rather than blocking the launcher.
const exitEventBuffer = 64

// Cluster is a set of running brokers started by Start. All methods are safe
// for concurrent use; operations on one process (Kill, Stop, Pause, Resume,
// Restart) are serialised. Kill, Stop, Restart and Close block until the
// process has exited (Stop and Close at most StopTimeout, then SIGKILL).
type Cluster struct {
	dir         string
	host        string
	brokerd     string
	brokerArgs  []string
	env         []string
	stopTimeout time.Duration
	log         *slog.Logger
	lock        *dirLock

	// Fixed once Start returns.
	children  []*child // the brokers, in id order
	peers     string   // the --peers value every broker gets without links
	others    []clusterfile.Process
	withLinks bool
	network   *netns.Network // nil: brokers on the launcher's host

	mu     sync.Mutex
	closed bool
	events chan ExitEvent
	// byName: every child, brokers and the processes StartProcess added
	// (extra, in start order). Guarded by mu.
	byName map[string]*child
	extra  []*child
	// added: the brokers AddBroker started in this run, in start order
	// (children are those of Start). Guarded by mu.
	added []*child
	// links by (from, to) process name, when Options.Links. Guarded by mu.
	links map[linkKey]*netfault.Link
	// control is the control endpoint's address for cluster.json.
	control string

	closeOnce sync.Once
	closeErr  error
}

// Start launches the brokers of the cluster in o.Dir (a new cluster, or the
// one its cluster.json describes) and returns once every process has been
// started; use WaitReady to wait until the cluster serves. It does not wait
// for ctx beyond that: the brokers run until Close (or their own end). If
// Start fails, it leaves no process running.
func Start(ctx context.Context, o Options) (*Cluster, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(o.Dir, "logs"), 0o755); err != nil {
		return nil, fmt.Errorf("launch: %w", err)
	}
	lock, err := lockDir(o.Dir)
	if err != nil {
		return nil, err
	}
	c := &Cluster{
		dir:         o.Dir,
		host:        o.Host,
		brokerd:     o.BrokerdPath,
		brokerArgs:  append([]string(nil), o.BrokerArgs...),
		env:         append([]string(nil), o.Env...),
		stopTimeout: o.StopTimeout,
		log:         o.Logger,
		lock:        lock,
		withLinks:   o.Links,
		network:     o.Network,
		byName:      map[string]*child{},
		links:       map[linkKey]*netfault.Link{},
		events:      make(chan ExitEvent, exitEventBuffer),
	}
	if err := c.plan(o.Brokers); err != nil {
		lock.release()
		return nil, err
	}
	listeners, err := c.bindAll()
	if err != nil {
		lock.release()
		return nil, err
	}
	if c.withLinks && c.network == nil {
		if err := c.brokerLinks(); err != nil {
			for _, ls := range listeners {
				ls.close()
			}
			c.closeLinks()
			lock.release()
			return nil, err
		}
	}
	for i, ch := range c.children {
		if ctx.Err() == nil {
			err = c.spawn(ch, listeners[i])
		} else {
			err = fmt.Errorf("launch: %w", ctx.Err())
			listeners[i].close()
		}
		if err != nil {
			for _, ls := range listeners[i+1:] {
				ls.close()
			}
			return nil, errors.Join(err, c.Close())
		}
	}
	c.mu.Lock()
	err = c.writeFileLocked()
	c.mu.Unlock()
	if err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return c, nil
}

// plan decides the brokers: those of an existing cluster.json, else n new ones.
func (c *Cluster) plan(n int) error {
	var procs []clusterfile.Process
	prev, err := clusterfile.Read(c.dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("launch: %w", err)
	default:
		for _, p := range prev.Processes {
			if p.PID != 0 && processAlive(p.PID) {
				return fmt.Errorf("%w: %s from an earlier run still runs as pid %d (per %s); stop it (kill %d), or if that pid is now an unrelated process, set its pid to 0 in that file",
					ErrLocked, p.Name, p.PID, filepath.Join(c.dir, clusterfile.Name), p.PID)
			}
			if p.Kind != "broker" {
				p.PID = 0
				c.others = append(c.others, p)
			}
		}
		procs = prev.Brokers()
	}
	if len(procs) == 0 {
		if n == 0 {
			n = DefaultBrokers
		}
		for id := 1; id <= n; id++ {
			procs = append(procs, clusterfile.Process{ID: int32(id)})
		}
	} else if n != 0 && n != len(procs) {
		return fmt.Errorf("launch: %s holds a cluster of %d brokers, not %d: start it with %d brokers, or use another directory",
			c.dir, len(procs), n, len(procs))
	}
	sort.Slice(procs, func(i, j int) bool { return procs[i].ID < procs[j].ID })
	for i, p := range procs {
		if p.ID <= 0 || (i > 0 && procs[i-1].ID == p.ID) {
			return fmt.Errorf("launch: %s: broker id %d is not a unique positive number", filepath.Join(c.dir, clusterfile.Name), p.ID)
		}
		name := fmt.Sprintf("broker-%d", p.ID)
		ch := &child{
			kind:    "broker",
			id:      p.ID,
			name:    name,
			dataDir: filepath.Join(c.dir, name),
			log:     filepath.Join(c.dir, "logs", name+".log"),
		}
		ch.proc = clusterfile.Process{Name: name, Kind: "broker", ID: ch.id, Address: p.Address, KafkaAddress: p.KafkaAddress, DataDir: ch.dataDir, Log: ch.log}
		c.children = append(c.children, ch)
		c.byName[name] = ch
	}
	return nil
}

// bindAll binds every broker's listeners (gRPC and Kafka): the ports they
// had before when those can be bound again, else ones the kernel chooses.
// It fixes each broker's addresses and the --peers value.
func (c *Cluster) bindAll() ([]*brokerListeners, error) {
	var lss []*brokerListeners
	fail := func(err error) ([]*brokerListeners, error) {
		for _, ls := range lss {
			ls.close()
		}
		return nil, err
	}
	var peers []string
	for _, ch := range c.children {
		if c.network != nil {
			if err := c.placeOnHost(ch); err != nil {
				return fail(err)
			}
			lss = append(lss, nil)
			peers = append(peers, strconv.Itoa(int(ch.id))+"="+ch.addr)
			continue
		}
		g, addr, listen, err := c.bindPort(ch.name, "gRPC", ch.proc.Address)
		if err != nil {
			return fail(err)
		}
		k, kaddr, klisten, err := c.bindPort(ch.name, "Kafka", ch.proc.KafkaAddress)
		if err != nil {
			g.Close()
			return fail(err)
		}
		ch.addr, ch.listen, ch.proc.Address = addr, listen, addr
		ch.kafkaAddr, ch.kafkaListen, ch.proc.KafkaAddress = kaddr, klisten, kaddr
		lss = append(lss, &brokerListeners{grpc: g, kafka: k})
		peers = append(peers, strconv.Itoa(int(ch.id))+"="+addr)
	}
	c.peers = strings.Join(peers, ",")
	return lss, nil
}

// placeOnHost gives broker ch its host's addresses (Options.Network). A
// cluster.json from an earlier run on other addresses is an error: the
// brokers' Raft configurations hold those.
func (c *Cluster) placeOnHost(ch *child) error {
	h, ok := c.network.Host(ch.name)
	if !ok {
		return fmt.Errorf("launch: the network has no host %s", ch.name)
	}
	addr := netip.AddrPortFrom(h.IP, NetnsPort).String()
	kaddr := netip.AddrPortFrom(h.IP, NetnsKafkaPort).String()
	if old := ch.proc.Address; old != "" && old != addr {
		return fmt.Errorf("launch: %s was at %s in %s, its host is at %s now: use the subnet of that run, or another directory",
			ch.name, old, filepath.Join(c.dir, clusterfile.Name), addr)
	}
	ch.addr, ch.listen, ch.proc.Address = addr, addr, addr
	ch.kafkaAddr, ch.kafkaListen, ch.proc.KafkaAddress = kaddr, kaddr, kaddr
	ch.host = &h
	ch.proc.Netns, ch.proc.Veth = h.Netns, h.Veth
	return nil
}

// bindPort binds one listener of broker name on the launcher's host: at
// old's port when old is set and that port can be bound again, else at one
// the kernel chooses. It returns the listener, the address clients dial and
// the address to bind again on a restart.
func (c *Cluster) bindPort(name, what, old string) (*net.TCPListener, string, string, error) {
	var ln *net.TCPListener
	var addr string
	var err error
	if old != "" {
		var want string
		if want, err = listenAddr(c.host, old); err == nil {
			ln, addr, err = bind(want)
		}
		if err != nil {
			c.log.Warn("previous port unavailable; broker gets a new one", "name", name, "listener", what, "address", old, "err", err)
		}
	}
	if ln == nil {
		if ln, addr, err = bind(net.JoinHostPort(c.host, "0")); err != nil {
			return nil, "", "", fmt.Errorf("launch: listen for %s (%s) on %s: %w", name, what, c.host, err)
		}
	}
	listen, err := listenAddr(c.host, addr)
	if err != nil {
		ln.Close()
		return nil, "", "", fmt.Errorf("launch: %w", err)
	}
	return ln, addr, listen, nil
}

// writeFileLocked rewrites DIR/cluster.json from the current state. c.mu held.
func (c *Cluster) writeFileLocked() error {
	f := &clusterfile.File{Bootstrap: strings.Join(c.addrsLocked(false), ","), KafkaBootstrap: strings.Join(c.addrsLocked(true), ","), Control: c.control}
	for _, ch := range c.brokersLocked() {
		f.Processes = append(f.Processes, ch.proc)
	}
	for _, ch := range c.extra {
		f.Processes = append(f.Processes, ch.proc)
	}
	for _, p := range c.others {
		if _, started := c.byName[p.Name]; !started {
			f.Processes = append(f.Processes, p)
		}
	}
	if err := clusterfile.Write(c.dir, f); err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	return nil
}

// Dir returns the cluster directory (absolute).
func (c *Cluster) Dir() string { return c.dir }

// Bootstrap returns the brokers' addresses: those of Start in id order,
// then those AddBroker added.
func (c *Cluster) Bootstrap() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.addrsLocked(false)
}

// KafkaBootstrap returns the brokers' Kafka addresses, in Bootstrap's order.
func (c *Cluster) KafkaBootstrap() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.addrsLocked(true)
}

// brokersLocked returns every broker: Start's, then AddBroker's. c.mu held.
func (c *Cluster) brokersLocked() []*child {
	return append(slices.Clone(c.children), c.added...)
}

// addrsLocked returns the brokers' gRPC (or Kafka) addresses. c.mu held.
func (c *Cluster) addrsLocked(kafka bool) []string {
	var out []string
	for _, ch := range c.brokersLocked() {
		if kafka {
			out = append(out, ch.kafkaAddr)
		} else {
			out = append(out, ch.addr)
		}
	}
	return out
}

// Names returns the names of the processes: brokers in id order (those
// AddBroker added after Start's), then the processes StartProcess added,
// in start order.
func (c *Cluster) Names() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.children)+len(c.added)+len(c.extra))
	for _, ch := range c.brokersLocked() {
		out = append(out, ch.name)
	}
	for _, ch := range c.extra {
		out = append(out, ch.name)
	}
	return out
}

// Process describes the named process as cluster.json does (PID 0 when it
// is not running).
func (c *Cluster) Process(name string) (clusterfile.Process, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch, ok := c.byName[name]
	if !ok {
		return clusterfile.Process{}, false
	}
	return ch.proc, true
}

// Running reports whether the named process is running (a paused process is).
func (c *Cluster) Running(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch, ok := c.byName[name]
	if !ok {
		return false
	}
	return ch.liveLocked() != nil
}

// SetControl records the address of a control endpoint serving this
// cluster in cluster.json (empty: none).
func (c *Cluster) SetControl(addr string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.control = addr
	return c.writeFileLocked()
}

// ProcessState is a process's state as ProcessStatus reports it.
type ProcessState struct {
	Proc clusterfile.Process
	// State is "running", "paused", "exited" or "never started".
	State string
	// LastExit is how the last run ended ("" while running).
	LastExit string
	// Command is the program and arguments of a process StartProcess
	// started, as it runs them (a Kafka client's bootstrap replaced);
	// nil for brokers.
	Command []string
}

// ProcessStatus returns the named process's state.
func (c *Cluster) ProcessStatus(name string) (ProcessState, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch, ok := c.byName[name]
	if !ok {
		return ProcessState{}, fmt.Errorf("launch: %q: %w", name, ErrUnknownProcess)
	}
	st := ProcessState{Proc: ch.proc}
	if ch.kind != "broker" {
		st.Command = append([]string{ch.path}, ch.args...)
	}
	switch r := ch.liveLocked(); {
	case r != nil && r.paused:
		st.State = "paused"
	case r != nil:
		st.State = "running"
	case ch.run == nil:
		st.State = "never started"
	default:
		st.State, st.LastExit = "exited", describeState(ch.run.state)
	}
	return st, nil
}

// Exited delivers an event for every child that exits without the launcher
// asking it to. It is closed by Close. Events that nobody reads are kept up
// to a bound, then logged and dropped; the launcher never blocks on them.
func (c *Cluster) Exited() <-chan ExitEvent { return c.events }

// Close stops every running child: SIGCONT (in case it is paused), SIGTERM,
// then SIGKILL after StopTimeout; the producers and consumers first (all at
// once, so that they can still reach the brokers), then the brokers (all at
// once), and waits for each to exit. It then rewrites cluster.json (every PID 0), closes Exited and
// releases the directory. Calling it again returns the first call's result.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.close() })
	return c.closeErr
}

func (c *Cluster) close() error {
	c.mu.Lock()
	c.closed = true
	all := append(append([]*child(nil), c.extra...), c.brokersLocked()...)
	clients := len(c.extra)
	c.mu.Unlock()
	errs := make([]error, len(all)+2)
	var wg sync.WaitGroup
	for i, ch := range all {
		if i == clients {
			// Producers and consumers first, while the brokers still
			// run: a producer flushes what it has in flight, a consumer
			// commits and leaves its group.
			wg.Wait()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ch.op.Lock()
			defer ch.op.Unlock()
			c.mu.Lock()
			r := ch.liveLocked()
			if r != nil {
				r.expected = true
			}
			c.mu.Unlock()
			if r != nil {
				c.log.Debug("stopping "+ch.kind, "name", ch.name, "pid", r.pid)
				errs[i] = c.stopRun(ch.name, r)
			}
		}()
	}
	wg.Wait()
	c.closeLinks()
	c.mu.Lock()
	errs[len(all)] = c.writeFileLocked()
	close(c.events)
	c.mu.Unlock()
	errs[len(all)+1] = c.lock.release()
	return errors.Join(errs...)
}
