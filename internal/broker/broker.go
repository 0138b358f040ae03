package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/group"
	"github.com/tapes-dev/tapes/internal/kafkawire"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/metadata"
	"github.com/tapes-dev/tapes/internal/raftlog"
	"github.com/tapes-dev/tapes/internal/raftnet"
	"github.com/tapes-dev/tapes/internal/replication"
	"github.com/tapes-dev/tapes/internal/txn"
)

// controllerGroup is the Raft group name of the controller quorum.
const controllerGroup = "__controller"

// Broker is one running broker. Create it with New, run it with Serve, stop
// it with Shutdown.
type Broker struct {
	cfg Config
	log *slog.Logger

	grpc *grpc.Server
	mux  *raftnet.Mux

	meta      *metadata.FSM
	ctrlRaft  *raft.Raft
	ctrlBolt  *replication.BoltStore
	ctrlTrans *raftnet.Transport

	observer *raft.Observer
	obsCh    chan raft.Observation

	// metaChanged is signalled (non-blocking) after every metadata change.
	metaChanged chan struct{}

	mu sync.Mutex
	// replicas: the partition replicas this broker hosts, by group name.
	// Invariant: each is open and in byRaft under the same lock.
	replicas map[string]*replication.Replica
	byRaft   map[*raft.Raft]*replication.Replica
	// conns to peers by broker id (for forwarding and heartbeats).
	conns map[metadata.BrokerID]*grpc.ClientConn
	// lastSeen: when each broker last sent a heartbeat to this one.
	lastSeen map[metadata.BrokerID]time.Time
	// refused: when this broker's last heartbeat to a peer failed with
	// Unavailable (connection refused or closed: the process is gone);
	// deleted when one succeeds. See peerLiveness.
	refused map[metadata.BrokerID]time.Time

	// startedAt is when New ran: peers not heard from yet count as
	// "unknown", not dead, for one session timeout after it.
	startedAt time.Time
	// registeredAt is the controller log index of this run's registration
	// (0 until it committed); ready latches once the local metadata has
	// applied it, i.e. holds everything committed before this broker
	// registered. Until then client requests get BROKER_NOT_AVAILABLE and no
	// replica is opened (see notReady).
	registeredAt atomic.Uint64
	ready        atomic.Bool
	// requestSeq numbers this run's controller proposals (newRequestID).
	requestSeq atomic.Uint64
	// joining: this broker started with --join and no controller state
	// (it registers as a joining broker). Fixed by New.
	joining bool
	// joinPeers: the addresses a --join broker's Metadata answer listed
	// (peerAddr), guarded by joinMu.
	joinMu    sync.Mutex
	joinPeers map[metadata.BrokerID]string

	// kafka is the Kafka front end once ServeKafka runs (nil before or
	// without a Kafka listener). Guarded by mu; Shutdown closes it first.
	kafka *kafkawire.Server

	// raftLog is the Raft log the partition groups share (internal/raftlog,
	// DATA/raftlog), open from New to the end of Shutdown, after every
	// replica closed.
	raftLog *raftlog.Log
	// raftStable is the term and vote of the partition groups whose log is
	// in raftLog (replication.SharedStable, DATA/stable.db): their
	// elections share commits. Opened and closed with raftLog.
	raftStable *replication.SharedStable

	reports *reporter
	metrics *metrics
	groups  *group.Coordinator
	txns    *txn.Coordinator
	// txnMarkers is what txns writes markers through (txn.go); guarded
	// by mu.
	txnMarkers txn.Markers

	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

// New validates cfg, opens the controller's Raft group and prepares the
// gRPC server. Nothing is served until Serve.
func New(cfg Config) (*Broker, error) {
	if err := ValidateConfig(&cfg); err != nil {
		return nil, fmt.Errorf("broker config: %w", err)
	}
	b := &Broker{
		cfg:         cfg,
		log:         cfg.Logger.With("broker", cfg.ID),
		meta:        metadata.NewFSM(),
		metaChanged: make(chan struct{}, 1),
		replicas:    map[string]*replication.Replica{},
		byRaft:      map[*raft.Raft]*replication.Replica{},
		conns:       map[metadata.BrokerID]*grpc.ClientConn{},
		lastSeen:    map[metadata.BrokerID]time.Time{},
		refused:     map[metadata.BrokerID]time.Time{},
		joinPeers:   map[metadata.BrokerID]string{},
		startedAt:   time.Now(),
		obsCh:       make(chan raft.Observation, 1024),
		stop:        make(chan struct{}),
	}
	b.meta.OnChange = func() {
		select {
		case b.metaChanged <- struct{}{}:
		default:
		}
	}
	b.observer = raft.NewObserver(b.obsCh, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.LeaderObservation, raft.RaftState:
			return true
		}
		return false
	})
	b.reports = newReporter(b)
	b.metrics = newMetrics(b)
	linger := cfg.Raft.HeartbeatLinger
	if linger == 0 {
		linger = -1 // raftnet: negative is no linger, zero its default
	}
	mux, err := raftnet.NewMux(raftnet.Config{
		LocalID:         replication.ServerID(cfg.ID),
		Resolve:         b.resolvePeer,
		Logger:          cfg.Logger,
		HeartbeatLinger: linger,
	})
	if err != nil {
		return nil, fmt.Errorf("raft transport: %w", err)
	}
	b.mux = mux
	b.grpc = grpc.NewServer(append(raftnet.ServerOptions(), grpc.ChainUnaryInterceptor(b.gateClientCalls))...)
	mux.Register(b.grpc)
	tapesv1.RegisterBrokerServiceServer(b.grpc, &api{b: b})
	tapesv1.RegisterControllerServiceServer(b.grpc, &controllerAPI{b: b})
	tapesv1.RegisterGroupServiceServer(b.grpc, &groupAPI{b: b})
	tapesv1.RegisterTransactionServiceServer(b.grpc, &txnAPI{b: b})
	if b.groups, err = b.newCoordinator(); err != nil {
		mux.Close()
		return nil, fmt.Errorf("group coordinator: %w", err)
	}
	if b.txns, err = b.newTxnCoordinator(); err != nil {
		mux.Close()
		return nil, fmt.Errorf("transaction coordinator: %w", err)
	}
	if b.raftLog, err = raftlog.Open(filepath.Join(cfg.DataDir, "raftlog"), raftlog.Options{Logger: b.log}); err != nil {
		mux.Close()
		return nil, fmt.Errorf("partitions' raft log: %w", err)
	}
	if b.raftStable, err = replication.OpenSharedStable(filepath.Join(cfg.DataDir, "stable.db")); err != nil {
		b.raftLog.Close()
		mux.Close()
		return nil, fmt.Errorf("partitions' stable store: %w", err)
	}
	if err := b.openController(); err != nil {
		b.raftStable.Close()
		b.raftLog.Close()
		mux.Close()
		return nil, err
	}
	return b, nil
}

// resolvePeer maps a Raft server address (a broker id) to the address this
// broker dials.
func (b *Broker) resolvePeer(addr raft.ServerAddress) (string, error) {
	id := replication.BrokerOf(raft.ServerID(addr))
	if a, ok := b.peerAddr(id); ok {
		return a, nil
	}
	return "", fmt.Errorf("no address for broker %q", addr)
}

func (b *Broker) openController() error {
	dir := filepath.Join(b.cfg.DataDir, "controller")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("controller dir: %w", err)
	}
	bolt, err := replication.OpenBoltStore(filepath.Join(dir, "raft.db"))
	if err != nil {
		return fmt.Errorf("controller raft log: %w", err)
	}
	hlog := hclog.New(&hclog.LoggerOptions{Name: "raft " + controllerGroup, Level: hclog.Warn, Output: os.Stderr})
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hlog)
	if err != nil {
		bolt.Close()
		return fmt.Errorf("controller snapshots: %w", err)
	}
	trans, err := b.mux.Group(controllerGroup)
	if err != nil {
		bolt.Close()
		return fmt.Errorf("controller transport: %w", err)
	}
	rc := raft.DefaultConfig()
	rc.LocalID = replication.ServerID(b.cfg.ID)
	rc.HeartbeatTimeout = b.cfg.Raft.HeartbeatTimeout
	rc.ElectionTimeout = b.cfg.Raft.ElectionTimeout
	rc.LeaderLeaseTimeout = b.cfg.Raft.LeaderLeaseTimeout
	// One group: a short CommitTimeout costs little and lets every broker
	// see a committed metadata change (a new topic) within ~50 ms.
	rc.CommitTimeout = 50 * time.Millisecond
	rc.PreVoteDisabled = false // as for partitions (replication.RaftTimings)
	rc.Logger = hlog
	existing, err := raft.HasExistingState(bolt, bolt, snaps)
	if err != nil {
		bolt.Close()
		return fmt.Errorf("controller state: %w", err)
	}
	b.joining = !existing && len(b.cfg.Join) > 0
	if !existing && !b.joining {
		var servers []raft.Server
		for _, id := range b.cfg.sortedPeers() {
			servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: replication.ServerID(id), Address: raft.ServerAddress(replication.ServerID(id))})
		}
		if err := raft.BootstrapCluster(rc, bolt, bolt, snaps, trans, raft.Configuration{Servers: servers}); err != nil {
			bolt.Close()
			return fmt.Errorf("bootstrap controller quorum: %w", err)
		}
	}
	r, err := raft.NewRaft(rc, b.meta, bolt, bolt, snaps, trans)
	if err != nil {
		bolt.Close()
		return fmt.Errorf("start controller raft: %w", err)
	}
	b.ctrlRaft, b.ctrlBolt, b.ctrlTrans = r, bolt, trans
	return nil
}

// Serve runs the broker on lis until Shutdown: the gRPC server, broker
// registration, heartbeats, replica reconciliation and leader reports.
func (b *Broker) Serve(lis net.Listener) error {
	b.wg.Add(8)
	go func() {
		defer b.wg.Done()
		ctx, cancel := b.stopContext()
		defer cancel()
		b.groups.Run(ctx)
	}()
	go func() {
		defer b.wg.Done()
		ctx, cancel := b.stopContext()
		defer cancel()
		b.txns.Run(ctx)
	}()
	go b.watchPeers()
	go b.observe()
	go b.registerLoop()
	go b.heartbeatLoop()
	go b.reconcileLoop()
	go b.reports.run()
	b.log.Info("broker serving", "listen", lis.Addr().String(), "advertise", b.cfg.Advertise, "data_dir", b.cfg.DataDir)
	err := b.grpc.Serve(lis)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Shutdown stops serving and closes every replica and the controller. The
// transports are closed before waiting on Raft so nothing hangs.
func (b *Broker) Shutdown(ctx context.Context) error {
	var errs []error
	b.stopOnce.Do(func() {
		b.mu.Lock()
		close(b.stop)
		b.mu.Unlock()
		b.closeKafka()
		stopped := make(chan struct{})
		go func() { b.grpc.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-ctx.Done():
			b.grpc.Stop()
		}
		b.wg.Wait()
		b.mu.Lock()
		reps := make([]*replication.Replica, 0, len(b.replicas))
		for _, r := range b.replicas {
			reps = append(reps, r)
		}
		b.mu.Unlock()
		var wg sync.WaitGroup
		var emu sync.Mutex
		for _, r := range reps {
			wg.Add(1)
			go func(r *replication.Replica) {
				defer wg.Done()
				if err := r.Close(); err != nil {
					emu.Lock()
					errs = append(errs, err)
					emu.Unlock()
				}
			}(r)
		}
		wg.Wait()
		if err := b.raftLog.Close(); err != nil {
			errs = append(errs, fmt.Errorf("partitions' raft log: %w", err))
		}
		if err := b.raftStable.Close(); err != nil {
			errs = append(errs, fmt.Errorf("partitions' stable store: %w", err))
		}
		b.ctrlTrans.Close()
		if err := b.ctrlRaft.Shutdown().Error(); err != nil {
			errs = append(errs, fmt.Errorf("controller raft: %w", err))
		}
		if err := b.ctrlBolt.Close(); err != nil {
			errs = append(errs, err)
		}
		b.mux.Close()
		b.mu.Lock()
		for _, c := range b.conns {
			c.Close()
		}
		b.mu.Unlock()
	})
	return errors.Join(errs...)
}

// gateClientCalls answers BrokerService and GroupService calls with the
// retriable BROKER_NOT_AVAILABLE while this broker is starting (notReady);
// Raft and ControllerService calls always pass. gRPC calls it on the
// request's goroutine.
func (b *Broker) gateClientCalls(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if strings.HasPrefix(info.FullMethod, "/tapes.v1.BrokerService/") || strings.HasPrefix(info.FullMethod, "/tapes.v1.GroupService/") {
		if why := b.notReady(); why != "" {
			return nil, kerr.ToStatus(kerr.New(kerr.BrokerNotAvailable, "%s; retry, or ask another broker", why))
		}
	}
	return handler(ctx, req)
}

// notReady says why this broker does not serve clients yet ("" once it
// does; then it stays ready): it has not registered with the controller in
// this run, its copy of the metadata has not applied that registration
// (Kafka's broker likewise serves only once registered and caught up), or
// it has not heard from every registered broker yet (for at most one
// session timeout after its start, see peerLiveness), so that it judges
// which brokers are live before it places replicas.
func (b *Broker) notReady() string {
	if b.ready.Load() {
		return ""
	}
	idx := b.registeredAt.Load()
	if idx == 0 {
		return fmt.Sprintf("broker %d is starting: it has not registered with the controller quorum yet", b.cfg.ID)
	}
	if have := b.meta.Index(); have < idx {
		return fmt.Sprintf("broker %d is starting: its metadata (controller log index %d) has not caught up with its registration (index %d)", b.cfg.ID, have, idx)
	}
	var registered []metadata.BrokerID
	b.meta.View(func(s *metadata.State) { registered = s.BrokerIDs() })
	var unheard []metadata.BrokerID
	for _, id := range registered {
		if b.peerLiveness(id) == unknown {
			unheard = append(unheard, id)
		}
	}
	if len(unheard) > 0 {
		// Without it, CreateTopics would take a registered peer that has
		// not heartbeated yet for dead.
		return fmt.Sprintf("broker %d is starting: it has not heard from brokers %s yet (it waits up to the session timeout, %v)", b.cfg.ID, metadata.JoinIDs(unheard), b.cfg.SessionTimeout)
	}
	b.ready.Store(true)
	return ""
}

// observe dispatches Raft observations (all groups share one non-blocking
// observer) to the replica whose Raft produced them.
func (b *Broker) observe() {
	defer b.wg.Done()
	for {
		select {
		case <-b.stop:
			return
		case o := <-b.obsCh:
			b.mu.Lock()
			r := b.byRaft[o.Raft]
			b.mu.Unlock()
			if r != nil {
				r.CheckLeadership()
			}
		}
	}
}

// peerConn returns (dialling once) the connection to a peer broker.
func (b *Broker) peerConn(id metadata.BrokerID) (*grpc.ClientConn, error) {
	b.mu.Lock()
	c, ok := b.conns[id]
	b.mu.Unlock()
	if ok {
		return c, nil
	}
	// Outside b.mu: peerAddr takes the metadata's lock, and View callbacks
	// take b.mu (peerLiveness).
	addr, ok := b.peerAddr(id)
	if !ok {
		return nil, fmt.Errorf("broker %d is not a known peer", id)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if c, ok := b.conns[id]; ok {
		return c, nil
	}
	// Reconnect within a second of a peer's restart (gRPC's default backoff
	// grows to two minutes): heartbeats decide liveness (peerLiveness).
	bo := backoff.DefaultConfig
	bo.MaxDelay = time.Second
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: time.Second}))
	if err != nil {
		return nil, fmt.Errorf("dial broker %d at %s: %w", id, addr, err)
	}
	b.conns[id] = c
	return c, nil
}

// stopContext returns a context cancelled at shutdown (or by cancel).
func (b *Broker) stopContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-b.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// sleep waits d or until shutdown; false means shutting down.
func (b *Broker) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-b.stop:
		return false
	case <-t.C:
		return true
	}
}
