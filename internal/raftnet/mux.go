package raftnet

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	raftv1 "github.com/tapes-dev/tapes/internal/gen/tapes/raft/v1"
)

// Defaults of Config, and the sizes the transport works with.
const (
	DefaultRPCTimeout       = 2 * time.Second
	DefaultHeartbeatTimeout = 1 * time.Second
	DefaultSnapshotTimeout  = 30 * time.Second
	// DefaultHeartbeatLinger: raft sends a heartbeat every 50-100 ms at
	// a 500 ms heartbeat timeout; 20 ms more is 4% of the follower's
	// timeout. A linger coalesces about rate x linger heartbeats per
	// message: with 100 idle groups on 3 brokers, 5 ms made calls of 3.3
	// heartbeats and 20 ms of 8.8, which took the idle cluster from about
	// 48% to about 32% of one core (internal/bench TestBenchIdleCPU). With
	// the heartbeat stream, 40 ms took about 4 points more off that
	// benchmark, but every heartbeat round (and so raft's heartbeat period)
	// would take up to 20 ms longer.
	DefaultHeartbeatLinger = 20 * time.Millisecond

	// MaxMessageSize bounds one gRPC message (an AppendEntries batch) in both
	// directions. gRPC's server default is 4 MiB; pass ServerOptions to the
	// broker's grpc.NewServer so that large batches are accepted.
	MaxMessageSize = 64 << 20

	// snapshotMinRate is the slowest InstallSnapshot stream, in bytes per
	// second, that still completes within its deadline: the deadline is
	// SnapshotTimeout plus Size/snapshotMinRate seconds.
	snapshotMinRate = 1 << 20

	// snapshotChunkSize is the data carried by one InstallSnapshot message.
	snapshotChunkSize = 256 << 10

	// Fixed HTTP/2 flow-control windows. Setting them turns off gRPC's
	// bandwidth-delay estimation, which otherwise sends a PING and gets its
	// ack for about every small RPC (measured: one pair per heartbeat round
	// trip), and with it 12% of the CPU that 100 idle groups cost. Loopback
	// needs no estimate; the windows allow full-speed replication.
	streamWindow = 4 << 20
	connWindow   = 16 << 20
)

// Config configures a Mux. LocalID and Resolve are required.
type Config struct {
	// LocalID is this broker's Raft server ID. Its ServerAddress is the same
	// string (the broker id in decimal); configurations hold no network
	// addresses.
	LocalID raft.ServerID

	// Resolve maps a peer's ServerAddress to a gRPC dial target
	// ("127.0.0.1:7001"). It is called before every outbound RPC, on the
	// replicating or voting goroutine of any group, concurrently, and once
	// more under the Mux's lock when a peer is first dialled or has moved:
	// it must be safe for concurrent use, must not block long (a map
	// lookup) and must not call the Mux. Its answer may change at run time:
	// the Mux then dials the new target and closes the connection to the
	// old one once no peer resolves to it (RPCs in flight on it fail, and
	// raft retries them).
	Resolve func(raft.ServerAddress) (string, error)

	// RPCTimeout is the deadline of AppendEntries, RequestVote, RequestPreVote
	// and TimeoutNow.
	RPCTimeout time.Duration
	// HeartbeatTimeout is the deadline of a heartbeat (an AppendEntries that
	// carries no entries, see isHeartbeat).
	HeartbeatTimeout time.Duration
	// SnapshotTimeout is the base deadline of InstallSnapshot; one second per
	// MiB of snapshot is added to it.
	SnapshotTimeout time.Duration

	// HeartbeatLinger is how long a heartbeat (or an AppendEntries without
	// entries) may wait for those of other groups to the same peer, so that
	// they share one message of the peer's heartbeat stream (see
	// hbBatcher); none waits longer, and one that has waited half of it
	// leaves early when the Mux sends to some peer anyway. 0 means
	// DefaultHeartbeatLinger; a negative value means no wait (a heartbeat
	// leaves at once, or, while calls to its peer await their answers, with
	// everything queued once they have them), which coalesces little: idle,
	// answers take far less time than the gaps between heartbeats.
	HeartbeatLinger time.Duration

	// DialOptions are appended to the Mux's own (insecure loopback
	// credentials, reconnect backoff capped at 1 s, MaxMessageSize, fixed
	// flow-control windows), so they win; tests and chaos tooling add a
	// custom dialer here.
	DialOptions []grpc.DialOption

	// Logger receives connection changes. Default slog.Default().
	Logger *slog.Logger
}

// ServerOptions returns the options the broker's grpc.Server needs for the
// Raft service: message sizes up to MaxMessageSize, fixed flow-control
// windows (no bandwidth-delay pings, see streamWindow), and stream workers
// (see streamWorkers).
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMessageSize),
		grpc.MaxSendMsgSize(MaxMessageSize),
		grpc.InitialWindowSize(streamWindow),
		grpc.InitialConnWindowSize(connWindow),
		grpc.NumStreamWorkers(streamWorkers()),
	}
}

// streamWorkers is the number of long-lived goroutines the gRPC server
// hands streams to (one per CPU, gRPC's own suggestion; the option is
// marked experimental). Without them every RPC starts a goroutine whose
// stack grows, by copying, to the depth of gRPC's handler path: about 3%
// of the CPU of idle groups in a profile. When all workers are busy the
// server falls back to a goroutine per stream.
func streamWorkers() uint32 {
	return uint32(max(runtime.GOMAXPROCS(0), 1))
}

// Mux carries the Raft traffic of every group of one broker: it serves the
// RaftService on the broker's gRPC server (inbound, routed by group name to
// the group's Transport) and holds one client connection per peer, shared by
// all groups (outbound). It is safe for concurrent use.
type Mux struct {
	cfg      Config
	log      *slog.Logger
	dialOpts []grpc.DialOption

	mu sync.RWMutex
	// groups holds the open Transports by name. A Transport is in it from
	// Group until its Close (or Mux.Close); inbound RPCs for other names are
	// answered with unknownGroupStatus.
	groups map[string]*Transport
	// conns holds one connection per dial target. Invariant: every key of
	// conns is a value of peers; a connection is closed and removed as soon
	// as no peer resolves to its target any more.
	conns map[string]*peerConn
	// peers holds the target each peer resolved to when last dialled.
	peers map[raft.ServerAddress]string
	// closed is set by Close; no group or connection is added after it.
	closed bool
}

// peerConn is a client connection, the stub over it (made once so that an
// RPC allocates neither) and the batcher of the heartbeats (and
// AppendEntries without entries) sent over it.
type peerConn struct {
	cc     *grpc.ClientConn
	client raftv1.RaftServiceClient
	hb     *hbBatcher
}

// close fails the heartbeats queued for the connection or awaiting an
// answer, then closes it; calls in flight on it fail.
func (pc *peerConn) close() error {
	pc.hb.close()
	return pc.cc.Close()
}

// waitForPeer makes a replication call (AppendEntries, the heartbeat
// stream, InstallSnapshot) to a peer that is down wait, up to the call's
// deadline, for the peer to come back instead of failing at once:
// hashicorp/raft backs off exponentially after each failed call to a
// follower (up to about ten seconds) and resets only on success, so failing
// fast for the whole time a peer is down would leave it unreplicated for
// seconds after it returns. Votes and pre-votes do not wait: a candidate
// asks every peer in parallel and must not hold a connection to a peer that
// moved.
var waitForPeer = grpc.WaitForReady(true)

// NewMux returns a Mux for cfg. It dials nothing until the first outbound RPC.
func NewMux(cfg Config) (*Mux, error) {
	if cfg.LocalID == "" {
		return nil, errors.New("raftnet: Config.LocalID is empty")
	}
	if cfg.Resolve == nil {
		return nil, errors.New("raftnet: Config.Resolve is nil")
	}
	if cfg.RPCTimeout <= 0 {
		cfg.RPCTimeout = DefaultRPCTimeout
	}
	if cfg.HeartbeatTimeout <= 0 {
		cfg.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	if cfg.SnapshotTimeout <= 0 {
		cfg.SnapshotTimeout = DefaultSnapshotTimeout
	}
	switch {
	case cfg.HeartbeatLinger == 0:
		cfg.HeartbeatLinger = DefaultHeartbeatLinger
	case cfg.HeartbeatLinger < 0:
		cfg.HeartbeatLinger = 0
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "raftnet", "local", string(cfg.LocalID))

	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// gRPC's default reconnect backoff grows to 120 s; a restarted peer
		// must be reachable again within a few Raft heartbeats.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  50 * time.Millisecond,
				Multiplier: 1.6,
				Jitter:     0.2,
				MaxDelay:   time.Second,
			},
			MinConnectTimeout: cfg.RPCTimeout,
		}),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(MaxMessageSize),
			grpc.MaxCallSendMsgSize(MaxMessageSize),
		),
		grpc.WithInitialWindowSize(streamWindow),
		grpc.WithInitialConnWindowSize(connWindow),
	}
	opts = append(opts, cfg.DialOptions...)

	return &Mux{
		cfg:      cfg,
		log:      log,
		dialOpts: opts,
		groups:   make(map[string]*Transport),
		conns:    make(map[string]*peerConn),
		peers:    make(map[raft.ServerAddress]string),
	}, nil
}

// Register registers the RaftService on s, the broker's one gRPC server.
// Call it once, before s.Serve.
func (m *Mux) Register(s grpc.ServiceRegistrar) {
	raftv1.RegisterRaftServiceServer(s, &server{mux: m})
}

// Group opens the Transport of the Raft group name. It returns
// ErrGroupExists while a Transport for name is open, ErrMuxClosed after Close.
func (m *Mux) Group(name string) (*Transport, error) {
	if name == "" {
		return nil, errors.New("raftnet: empty group name")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrMuxClosed
	}
	if _, ok := m.groups[name]; ok {
		return nil, fmt.Errorf("%w: %s", ErrGroupExists, name)
	}
	t := newTransport(m, name)
	m.groups[name] = t
	return t, nil
}

// Close closes every open Transport (their outbound calls then fail with
// raft.ErrTransportShutdown and inbound calls get "unknown raft group"),
// stops the heartbeat batchers and closes every client connection. It does
// not stop the gRPC server. Close is idempotent.
func (m *Mux) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	groups := m.groups
	conns := m.conns
	m.groups = make(map[string]*Transport)
	m.conns = make(map[string]*peerConn)
	m.peers = make(map[raft.ServerAddress]string)
	m.mu.Unlock()

	for _, t := range groups {
		t.cancel()
	}
	var errs []error
	for target, pc := range conns {
		if err := pc.close(); err != nil {
			errs = append(errs, fmt.Errorf("raftnet: close connection to %s: %w", target, err))
		}
	}
	return errors.Join(errs...)
}

// lookup returns the open Transport of group, or nil.
func (m *Mux) lookup(group string) *Transport {
	m.mu.RLock()
	t := m.groups[group]
	m.mu.RUnlock()
	return t
}

// unregister removes t from the open groups if it is still the one
// registered under its name.
func (m *Mux) unregister(t *Transport) {
	m.mu.Lock()
	if m.groups[t.name] == t {
		delete(m.groups, t.name)
	}
	m.mu.Unlock()
}

// peer returns the connection to peer addr, dialling if needed. It is called
// on every outbound RPC: the common case is one Resolve and one read-locked
// map lookup.
func (m *Mux) peer(addr raft.ServerAddress) (*peerConn, error) {
	target, err := m.cfg.Resolve(addr)
	if err != nil {
		return nil, fmt.Errorf("resolve peer %s: %w", addr, err)
	}
	m.mu.RLock()
	pc := m.conns[target]
	current := m.peers[addr] == target
	closed := m.closed
	m.mu.RUnlock()
	if closed {
		return nil, raft.ErrTransportShutdown
	}
	if pc != nil && current {
		return pc, nil
	}
	return m.connect(addr)
}

// connect records where addr resolves now, dials that target if no
// connection to it exists, and closes the connection to the previous target
// if no peer uses it any more. It resolves again under the lock, so that a
// caller holding a stale answer cannot move the peer back to an old target.
// RPCs in flight on a closed connection fail; raft retries them.
func (m *Mux) connect(addr raft.ServerAddress) (*peerConn, error) {
	var stale *peerConn
	defer func() {
		if stale != nil {
			if err := stale.close(); err != nil {
				m.log.Warn("close stale raft connection", "error", err)
			}
		}
	}()

	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, raft.ErrTransportShutdown
	}
	target, err := m.cfg.Resolve(addr)
	if err != nil {
		return nil, fmt.Errorf("resolve peer %s: %w", addr, err)
	}
	pc, ok := m.conns[target]
	if !ok {
		cc, err := grpc.NewClient(target, m.dialOpts...)
		if err != nil {
			return nil, fmt.Errorf("dial peer %s at %s: %w", addr, target, err)
		}
		client := raftv1.NewRaftServiceClient(cc)
		pc = &peerConn{cc: cc, client: client, hb: newHBBatcher(client, cc, m.cfg.HeartbeatLinger, m.nudge)}
		m.conns[target] = pc
	}
	old, had := m.peers[addr]
	m.peers[addr] = target
	if had && old != target {
		m.log.Info("raft peer moved", "peer", string(addr), "from", old, "to", target)
		if prev, ok := m.conns[old]; ok && !m.targetInUse(old) {
			stale = prev
			delete(m.conns, old)
		}
	} else if !had {
		m.log.Debug("raft peer dialled", "peer", string(addr), "target", target)
	}
	return pc, nil
}

// nudge sends, now, the batches of every peer connection that have waited
// half their linger or more (see hbBatcher.nudge). It is called whenever
// the Mux sends heartbeats or answers them, so that its traffic to every
// peer leaves in the same bursts.
func (m *Mux) nudge() {
	now := time.Now()
	m.mu.RLock()
	for _, pc := range m.conns {
		pc.hb.nudge(now)
	}
	m.mu.RUnlock()
}

// targetInUse reports whether some peer resolves to target. m.mu is held.
func (m *Mux) targetInUse(target string) bool {
	for _, t := range m.peers {
		if t == target {
			return true
		}
	}
	return false
}

// connCount returns the number of open client connections (for tests).
func (m *Mux) connCount() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.conns)
}

// hasConn reports whether the Mux holds a connection to target (for tests).
func (m *Mux) hasConn(target string) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.conns[target] != nil
}

// snapshotDeadline is the deadline of an InstallSnapshot of size bytes.
func (m *Mux) snapshotDeadline(size int64) time.Duration {
	if size < 0 {
		size = 0
	}
	return m.cfg.SnapshotTimeout + time.Duration(size/snapshotMinRate)*time.Second
}
