package raftnet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tapes-dev/tapes/internal/eventually"
	raftv1 "github.com/tapes-dev/tapes/internal/gen/tapes/raft/v1"
)

// This file holds the test harness: brokers (a Mux behind a real gRPC server
// on 127.0.0.1:0), a peer table as resolver, Raft groups of real
// hashicorp/raft instances with in-memory stores, and a list FSM.

// peerTable is the brokers' resolver: broker id to dial target.
type peerTable struct {
	mu    sync.RWMutex
	addrs map[raft.ServerAddress]string
}

func newPeerTable() *peerTable {
	return &peerTable{addrs: make(map[raft.ServerAddress]string)}
}

func (p *peerTable) resolve(a raft.ServerAddress) (string, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	target, ok := p.addrs[a]
	if !ok {
		return "", fmt.Errorf("no address for broker %s", a)
	}
	return target, nil
}

// idOf returns the broker whose dial target is target, or "" if none.
func (p *peerTable) idOf(target string) raft.ServerAddress {
	p.mu.RLock()
	defer p.mu.RUnlock()
	for a, t := range p.addrs {
		if t == target {
			return a
		}
	}
	return ""
}

func (p *peerTable) set(a raft.ServerAddress, target string) {
	p.mu.Lock()
	p.addrs[a] = target
	p.mu.Unlock()
}

// broker is one Mux and the gRPC server it is registered on.
type broker struct {
	id  raft.ServerID
	mux *Mux
	srv *grpc.Server
	// heartbeats counts inbound heartbeats (AppendEntries of heartbeat
	// shape, alone or on the heartbeat stream), heartbeatCalls the RPCs or
	// stream messages that carried them, batchCalls the heartbeat stream
	// messages among them, streamAppends the AppendEntries without entries
	// on the stream, appendCalls the AppendEntries RPCs of any shape and
	// streams the heartbeat streams opened, as seen on the wire by server
	// interceptors.
	heartbeats     atomic.Int64
	heartbeatCalls atomic.Int64
	batchCalls     atomic.Int64
	streamAppends  atomic.Int64
	appendCalls    atomic.Int64
	streams        atomic.Int64
	// noPreVote makes the server answer RequestPreVote as a RaftService
	// without that method does (codes.Unimplemented): a broker from before
	// pre-vote.
	noPreVote atomic.Bool
}

// countingStream counts the messages of a heartbeat stream.
type countingStream struct {
	grpc.ServerStream
	b *broker
}

func (s *countingStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if r, ok := m.(*raftv1.HeartbeatStreamRequest); ok && err == nil {
		s.b.batchCalls.Add(1)
		s.b.heartbeatCalls.Add(1)
		for _, c := range r.GetCalls() {
			if c.GetPrevLogEntry() == 0 && c.GetLeaderCommitIndex() == 0 {
				s.b.heartbeats.Add(1)
			} else {
				s.b.streamAppends.Add(1)
			}
		}
	}
	return err
}

// serve starts a gRPC server for b's Mux on a fresh loopback port and
// returns its address.
func (b *broker) serve(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	count := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if info.FullMethod == raftv1.RaftService_RequestPreVote_FullMethodName && b.noPreVote.Load() {
			return nil, status.Errorf(codes.Unimplemented, "unknown method RequestPreVote for service tapes.raft.v1.RaftService")
		}
		if r, ok := req.(*raftv1.AppendEntriesRequest); ok {
			b.appendCalls.Add(1)
			if len(r.GetEntries()) == 0 && r.GetPrevLogEntry() == 0 && r.GetLeaderCommitIndex() == 0 {
				b.heartbeats.Add(1)
				b.heartbeatCalls.Add(1)
			}
		}
		return h(ctx, req)
	}
	countStream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if info.FullMethod == raftv1.RaftService_HeartbeatStream_FullMethodName {
			b.streams.Add(1)
			ss = &countingStream{ServerStream: ss, b: b}
		}
		return h(srv, ss)
	}
	srv := grpc.NewServer(append(ServerOptions(), grpc.UnaryInterceptor(count), grpc.StreamInterceptor(countStream))...)
	b.mux.Register(srv)
	go func() { _ = srv.Serve(lis) }()
	b.srv = srv
	return lis.Addr().String()
}

// cluster is a set of brokers "1".."n" sharing one peer table.
type cluster struct {
	t       testing.TB
	peers   *peerTable
	brokers []*broker
}

// newCluster starts n brokers with cfg; each of perBroker, if any, then
// adjusts the configuration of each broker (its LocalID set).
func newCluster(t testing.TB, n int, cfg Config, perBroker ...func(*Config)) *cluster {
	t.Helper()
	c := &cluster{t: t, peers: newPeerTable()}
	for i := 1; i <= n; i++ {
		cfg := cfg
		cfg.DialOptions = slices.Clone(cfg.DialOptions)
		cfg.LocalID = raft.ServerID(strconv.Itoa(i))
		cfg.Resolve = c.peers.resolve
		for _, f := range perBroker {
			f(&cfg)
		}
		if cfg.Logger == nil {
			cfg.Logger = slog.New(slog.NewTextHandler(testWriter(t), nil))
		}
		m, err := NewMux(cfg)
		if err != nil {
			t.Fatalf("NewMux: %v", err)
		}
		b := &broker{id: cfg.LocalID, mux: m}
		c.peers.set(raft.ServerAddress(b.id), b.serve(t))
		c.brokers = append(c.brokers, b)
		t.Cleanup(func() {
			_ = m.Close()
			b.srv.Stop()
		})
	}
	return c
}

// listFSM applies commands by appending them to a list.
type listFSM struct {
	mu       sync.Mutex
	cmds     []string
	restores int
}

func (f *listFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	f.cmds = append(f.cmds, string(l.Data))
	f.mu.Unlock()
	return nil
}

func (f *listFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return listSnapshot(slices.Clone(f.cmds)), nil
}

func (f *listFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var cmds []string
	if err := json.NewDecoder(rc).Decode(&cmds); err != nil {
		return err
	}
	f.mu.Lock()
	f.cmds = cmds
	f.restores++
	f.mu.Unlock()
	return nil
}

func (f *listFSM) state() ([]string, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.cmds), f.restores
}

type listSnapshot []string

func (s listSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := json.NewEncoder(sink).Encode([]string(s)); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s listSnapshot) Release() {}

// timing is the Raft timing of a test group.
type timing struct {
	heartbeat, election, lease, commit time.Duration
}

var fastTiming = timing{
	heartbeat: 200 * time.Millisecond,
	election:  200 * time.Millisecond,
	lease:     200 * time.Millisecond,
	commit:    50 * time.Millisecond,
}

// member is one replica of a group: a Transport, a raft and its FSM.
type member struct {
	b    *broker
	tr   *Transport
	raft *raft.Raft
	fsm  *listFSM
	stop sync.Once
}

// shutdown closes the transport first, then waits for raft's Shutdown,
// failing the test if that takes long (the transport must make it safe).
func (m *member) shutdown(t testing.TB) {
	m.stop.Do(func() {
		_ = m.tr.Close()
		done := make(chan error, 1)
		go func() { done <- m.raft.Shutdown().Error() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("raft shutdown on %s: %v", m.b.id, err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("raft shutdown on %s hangs", m.b.id)
		}
	})
}

type group struct {
	name    string
	members []*member
}

// raftConfig returns the raft configuration of a member, logging through
// the test at WARN.
func raftConfig(t testing.TB, id raft.ServerID, name string, tm timing) *raft.Config {
	conf := raft.DefaultConfig()
	conf.LocalID = id
	conf.HeartbeatTimeout = tm.heartbeat
	conf.ElectionTimeout = tm.election
	conf.LeaderLeaseTimeout = tm.lease
	conf.CommitTimeout = tm.commit
	conf.LogLevel = "WARN"
	conf.Logger = hclog.New(&hclog.LoggerOptions{
		Name:   "raft." + name + "." + string(id),
		Level:  hclog.Warn,
		Output: testWriter(t),
	})
	return conf
}

// startMember starts a replica of group name on b with empty stores;
// bootstrap, when not nil, is the initial configuration.
func startMember(t testing.TB, b *broker, name string, conf *raft.Config, bootstrap *raft.Configuration, obs AppendObserver) *member {
	t.Helper()
	tr, err := b.mux.Group(name)
	if err != nil {
		t.Fatalf("open group %s on %s: %v", name, b.id, err)
	}
	if obs != nil {
		tr.SetAppendObserver(obs)
	}
	fsm := &listFSM{}
	store := raft.NewInmemStore()
	r, err := raft.NewRaft(conf, fsm, store, store, raft.NewInmemSnapshotStore(), tr)
	if err != nil {
		t.Fatalf("new raft %s on %s: %v", name, b.id, err)
	}
	if bootstrap != nil {
		if err := r.BootstrapCluster(*bootstrap).Error(); err != nil {
			t.Fatalf("bootstrap %s on %s: %v", name, b.id, err)
		}
	}
	m := &member{b: b, tr: tr, raft: r, fsm: fsm}
	t.Cleanup(func() { m.shutdown(t) })
	return m
}

// startGroup starts group name with one voter on every broker of c.
// configure, if set, adjusts each member's raft configuration.
func (c *cluster) startGroup(name string, tm timing, configure func(*raft.Config), obs func(b *broker) AppendObserver) *group {
	c.t.Helper()
	var servers []raft.Server
	for _, b := range c.brokers {
		servers = append(servers, raft.Server{
			Suffrage: raft.Voter,
			ID:       b.id,
			Address:  raft.ServerAddress(b.id),
		})
	}
	boot := raft.Configuration{Servers: servers}
	g := &group{name: name}
	for _, b := range c.brokers {
		conf := raftConfig(c.t, b.id, name, tm)
		if configure != nil {
			configure(conf)
		}
		var o AppendObserver
		if obs != nil {
			o = obs(b)
		}
		g.members = append(g.members, startMember(c.t, b, name, conf, &boot, o))
	}
	return g
}

// leader waits until a member of g considers itself leader and returns it.
func (g *group) leader(t testing.TB, timeout time.Duration) *member {
	t.Helper()
	l, err := g.findLeader(timeout)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func (g *group) findLeader(timeout time.Duration) (*member, error) {
	var leader *member
	err := eventually.Wait(timeout, func() error {
		for _, m := range g.members {
			if m.raft.State() == raft.Leader {
				leader = m
				return nil
			}
		}
		return fmt.Errorf("group %s: no leader within %v", g.name, timeout)
	})
	return leader, err
}

// others returns the members of g but m.
func (g *group) others(m *member) []*member {
	var out []*member
	for _, o := range g.members {
		if o != m {
			out = append(out, o)
		}
	}
	return out
}

// apply applies n commands "prefix-i" through the group's leader.
func (g *group) apply(t testing.TB, prefix string, n int, timeout time.Duration) {
	t.Helper()
	if err := g.tryApply(prefix, n, timeout); err != nil {
		t.Fatal(err)
	}
}

// tryApply applies n commands "prefix-i" through the group's leader,
// following leadership changes, within timeout. It may be called from any
// goroutine.
func (g *group) tryApply(prefix string, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for i := 0; i < n; {
		if time.Now().After(deadline) {
			return fmt.Errorf("group %s: applied %d of %d within %v", g.name, i, n, timeout)
		}
		l, err := g.findLeader(time.Until(deadline))
		if err != nil {
			return err
		}
		err = l.raft.Apply([]byte(fmt.Sprintf("%s-%d", prefix, i)), time.Second).Error()
		if err == nil {
			i++
			continue
		}
		if !errors.Is(err, raft.ErrNotLeader) && !errors.Is(err, raft.ErrLeadershipLost) &&
			!errors.Is(err, raft.ErrEnqueueTimeout) {
			return fmt.Errorf("group %s: apply: %w", g.name, err)
		}
		// ErrLeadershipLost means "unknown outcome": the retry may apply a
		// command twice. Tests compare FSMs with each other and check order,
		// not counts.
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// converge waits until the FSMs of members hold the same commands, and at
// least want of them, and returns them.
func converge(t testing.TB, members []*member, want int, timeout time.Duration) []string {
	t.Helper()
	var first []string
	eventually.Nil(t, timeout, fmt.Sprintf("FSMs to converge on %d commands", want), func() error {
		first, _ = members[0].fsm.state()
		same := len(first) >= want
		var held []string
		for _, m := range members {
			cmds, _ := m.fsm.state()
			same = same && slices.Equal(first, cmds)
			held = append(held, fmt.Sprintf("broker %s holds %d", m.b.id, len(cmds)))
		}
		if !same {
			return errors.New(strings.Join(held, ", "))
		}
		return nil
	})
	return first
}

// testWriter forwards log lines to t.Log until the test ends, and drops
// them after that (raft may log while its goroutines wind down).
func testWriter(t testing.TB) io.Writer {
	w := &tWriter{t: t}
	t.Cleanup(func() { w.done.Store(true) })
	return w
}

type tWriter struct {
	t    testing.TB
	done atomic.Bool
}

func (w *tWriter) Write(p []byte) (int, error) {
	if !w.done.Load() {
		w.t.Log(string(p))
	}
	return len(p), nil
}
