package raftnet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tapes-dev/tapes/internal/eventually"
	raftv1 "github.com/tapes-dev/tapes/internal/gen/tapes/raft/v1"
)

// TestManyGroups runs 20 groups of 3 voters over 3 brokers: each elects a
// leader, 100 applies per group reach every FSM in the same order, and each
// broker holds one client connection per peer, shared by all groups.
func TestManyGroups(t *testing.T) {
	c := newCluster(t, 3, Config{})
	const groups, applies = 20, 100
	var gs []*group
	for i := range groups {
		gs = append(gs, c.startGroup(fmt.Sprintf("g%02d", i), fastTiming, nil, nil))
	}
	var wg sync.WaitGroup
	for _, g := range gs {
		wg.Go(func() {
			if err := g.tryApply(g.name, applies, 30*time.Second); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for _, g := range gs {
		cmds := converge(t, g.members, applies, 10*time.Second)
		// Applies are retried after ErrLeadershipLost, so a command may
		// appear twice; every one must be there, in order.
		next := 0
		for _, cmd := range cmds {
			if cmd == fmt.Sprintf("%s-%d", g.name, next) {
				next++
			}
		}
		if next != applies {
			t.Errorf("group %s: FSM holds commands 0..%d in order, want 0..%d", g.name, next-1, applies-1)
		}
	}
	for _, b := range c.brokers {
		if n := b.mux.connCount(); n != 2 {
			t.Errorf("broker %s holds %d client connections, want 2 (one per peer)", b.id, n)
		}
	}
}

// TestInstallSnapshot brings back a follower with empty stores after the
// leader compacted its log: the follower is rebuilt by InstallSnapshot (the
// snapshot spans several 256 KiB chunks) and ends with the leader's state.
func TestInstallSnapshot(t *testing.T) {
	c := newCluster(t, 3, Config{})
	configure := func(conf *raft.Config) {
		conf.TrailingLogs = 4
		conf.SnapshotThreshold = 16
	}
	g := c.startGroup("snap", fastTiming, configure, nil)
	l := g.leader(t, 5*time.Second)
	var lagging *member
	for _, m := range g.members {
		if m != l {
			lagging = m
			break
		}
	}
	lagging.shutdown(t)

	// 80 commands of 8 KiB: a snapshot of about 640 KiB.
	pad := strings.Repeat("x", 8<<10)
	for i := range 80 {
		if err := l.raft.Apply([]byte(fmt.Sprintf("%d-%s", i, pad)), time.Second).Error(); err != nil {
			t.Fatalf("apply %d: %v", i, err)
		}
	}
	if err := l.raft.Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if idx, err := snapshotIndex(l.raft); err != nil || idx < 80 {
		t.Fatalf("leader snapshot at index %d (%v), want >= 80", idx, err)
	}

	back := startMember(t, lagging.b, "snap", raftConfig(t, lagging.b.id, "snap", fastTiming), nil, nil)
	want, _ := l.fsm.state()
	converge(t, []*member{l, back}, len(want), 15*time.Second)
	if _, restores := back.fsm.state(); restores == 0 {
		t.Fatal("follower caught up without restoring a snapshot")
	}
}

// snapshotIndex returns the index of r's last snapshot, from raft's stats.
// With TrailingLogs 4, the log before it minus 4 entries is gone.
func snapshotIndex(r *raft.Raft) (uint64, error) {
	var n uint64
	_, err := fmt.Sscan(r.Stats()["last_snapshot_index"], &n)
	if err != nil {
		return 0, err
	}
	return n, nil
}

// TestUnknownGroup: a broker answers RPCs for a group it does not serve at
// once with codes.Unavailable, and so does a group after its Close; the
// calling Transport reports ErrUnknownGroup.
func TestUnknownGroup(t *testing.T) {
	c := newCluster(t, 2, Config{RPCTimeout: 10 * time.Second})
	target, err := c.peers.resolve("2")
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	raw := raftv1.NewRaftServiceClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	check := func(what string, call func() error) {
		t.Helper()
		start := time.Now()
		err := call()
		if took := time.Since(start); took > time.Second {
			t.Errorf("%s: answered after %v", what, took)
		}
		if st, _ := status.FromError(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "unknown raft group") {
			t.Errorf("%s: got %v, want Unavailable \"unknown raft group\"", what, err)
		}
	}
	check("AppendEntries", func() error {
		_, err := raw.AppendEntries(ctx, &raftv1.AppendEntriesRequest{Group: "nope", Term: 1, PrevLogEntry: 3})
		return err
	})
	check("RequestVote", func() error {
		_, err := raw.RequestVote(ctx, &raftv1.RequestVoteRequest{Group: "nope", Term: 1})
		return err
	})
	check("RequestPreVote", func() error {
		_, err := raw.RequestPreVote(ctx, &raftv1.RequestPreVoteRequest{Group: "nope", Term: 1})
		return err
	})
	check("TimeoutNow", func() error {
		_, err := raw.TimeoutNow(ctx, &raftv1.TimeoutNowRequest{Group: "nope"})
		return err
	})
	check("InstallSnapshot", func() error {
		s, err := raw.InstallSnapshot(ctx)
		if err != nil {
			return err
		}
		if err := s.Send(&raftv1.InstallSnapshotRequest{Meta: &raftv1.InstallSnapshotMeta{Group: "nope", Size: 3}}); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		_, err = s.CloseAndRecv()
		return err
	})

	// Through a Transport: group open on broker 1 only, then open and
	// closed again on broker 2.
	tr, err := c.brokers[0].mux.Group("lonely")
	if err != nil {
		t.Fatal(err)
	}
	vote := func() error {
		return tr.RequestVote("2", "2", &raft.RequestVoteRequest{Term: 1}, &raft.RequestVoteResponse{})
	}
	start := time.Now()
	if err := vote(); !errors.Is(err, ErrUnknownGroup) {
		t.Errorf("vote for a group the peer lacks: %v, want ErrUnknownGroup", err)
	}
	other, err := c.brokers[1].mux.Group("lonely")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.brokers[1].mux.Group("lonely"); !errors.Is(err, ErrGroupExists) {
		t.Errorf("second Group(lonely): %v, want ErrGroupExists", err)
	}
	_ = other.Close()
	if err := vote(); !errors.Is(err, ErrUnknownGroup) {
		t.Errorf("vote for a group the peer closed: %v, want ErrUnknownGroup", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("unknown-group answers took %v", took)
	}
	again, err := c.brokers[1].mux.Group("lonely")
	if err != nil {
		t.Fatalf("reopen closed group: %v", err)
	}
	_ = again.Close()
}

// TestLeaderFailover stops the broker that leads a group (server, Mux and
// rafts, transport before raft): its rafts shut down without hanging, the
// other two brokers elect a new leader and keep applying.
func TestLeaderFailover(t *testing.T) {
	c := newCluster(t, 3, Config{})
	var gs []*group
	for i := range 3 {
		g := c.startGroup(fmt.Sprintf("f%d", i), fastTiming, nil, nil)
		g.apply(t, "before", 10, 10*time.Second)
		gs = append(gs, g)
	}
	old := gs[0].leader(t, 5*time.Second)
	dead := old.b
	dead.srv.Stop()
	if err := dead.mux.Close(); err != nil {
		t.Errorf("close mux: %v", err)
	}
	for _, g := range gs {
		var alive []*member
		for _, m := range g.members {
			if m.b == dead {
				m.shutdown(t)
				continue
			}
			alive = append(alive, m)
		}
		g.members = alive
	}
	if _, err := dead.mux.Group("late"); !errors.Is(err, ErrMuxClosed) {
		t.Errorf("Group after Close: %v, want ErrMuxClosed", err)
	}

	for _, g := range gs {
		nl := g.leader(t, 10*time.Second)
		if nl.b == dead {
			t.Fatalf("group %s: leader on the stopped broker", g.name)
		}
		g.apply(t, "after", 20, 20*time.Second)
		cmds := converge(t, g.members, 30, 10*time.Second)
		if !strings.HasPrefix(cmds[len(cmds)-1], "after-") {
			t.Errorf("group %s: last command %q, want one applied after failover", g.name, cmds[len(cmds)-1])
		}
	}
}

// TestAppendObserver: the leader's observer sees, for each follower, match
// indexes (prev + entries on success) that reach the leader's last index;
// while the group is idle, heartbeats flow on the wire but the observer is
// not called for them.
func TestAppendObserver(t *testing.T) {
	c := newCluster(t, 3, Config{})
	type key struct{ observer, peer raft.ServerID }
	var (
		mu      sync.Mutex
		match   = make(map[key]uint64)
		calls   int
		badReqs int
	)
	obs := func(b *broker) AppendObserver {
		return func(peer raft.ServerID, req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse, sentAt time.Time) {
			mu.Lock()
			defer mu.Unlock()
			calls++
			if req.PrevLogEntry == 0 && len(req.Entries) == 0 {
				badReqs++
			}
			if sentAt.IsZero() || time.Since(sentAt) > time.Minute {
				badReqs++
			}
			if resp.Success {
				k := key{b.id, peer}
				match[k] = max(match[k], req.PrevLogEntry+uint64(len(req.Entries)))
			}
		}
	}
	tm := fastTiming
	tm.commit = 2 * time.Second // idle AppendEntries at most every 2-4 s
	g := c.startGroup("obs", tm, nil, obs)
	g.apply(t, "c", 50, 10*time.Second)
	l := g.leader(t, time.Second)
	last := l.raft.LastIndex()

	eventually.Nil(t, 30*time.Second, "observer match indexes to reach the last index", func() error {
		mu.Lock()
		defer mu.Unlock()
		reached := 0
		for _, m := range g.members {
			if m != l && match[key{l.b.id, m.b.id}] >= last {
				reached++
			}
		}
		if reached < 2 {
			return fmt.Errorf("%d followers at last index %d: %v", reached, last, match)
		}
		return nil
	})

	// Idle window: heartbeats every 20-40 ms per follower, no entries.
	var hbBefore int64
	for _, b := range c.brokers {
		hbBefore += b.heartbeats.Load()
	}
	mu.Lock()
	callsBefore := calls
	mu.Unlock()
	time.Sleep(time.Second)
	var hb int64
	for _, b := range c.brokers {
		hb += b.heartbeats.Load()
	}
	hb -= hbBefore
	mu.Lock()
	idleCalls := calls - callsBefore
	bad := badReqs
	mu.Unlock()
	if l.raft.State() != raft.Leader {
		t.Skip("leadership changed during the idle window")
	}
	if hb < 20 {
		t.Fatalf("only %d heartbeats in 1 s of idle; the test proves nothing", hb)
	}
	if idleCalls > 2 {
		t.Errorf("observer called %d times in 1 s idle with %d heartbeats; heartbeats must not be reported", idleCalls, hb)
	}
	if bad > 0 {
		t.Errorf("observer saw %d heartbeat-shaped or unstamped requests", bad)
	}
}

// TestResolverChange moves a follower's broker to a new port (new gRPC
// server, same Mux), updates the peer table and stops the old server: the
// other brokers follow the new address and the follower keeps up. The stale
// connection is closed.
func TestResolverChange(t *testing.T) {
	c := newCluster(t, 3, Config{})
	g := c.startGroup("move", fastTiming, nil, nil)
	g.apply(t, "before", 10, 10*time.Second)
	l := g.leader(t, 5*time.Second)
	var moved *broker
	for _, b := range c.brokers {
		if b != l.b {
			moved = b
			break
		}
	}
	oldSrv := moved.srv
	oldAddr, err := c.peers.resolve(raft.ServerAddress(moved.id))
	if err != nil {
		t.Fatal(err)
	}
	newAddr := moved.serve(t)
	c.peers.set(raft.ServerAddress(moved.id), newAddr)
	oldSrv.Stop()

	g.apply(t, "after", 30, 20*time.Second)
	converge(t, g.members, 40, 10*time.Second)
	// The leader's broker has used both peers, and its connection to the
	// old address is gone. A follower dialled the moved broker only if it
	// stood for election (a pre-vote is enough), and drops the old
	// connection at its next call to it: make that call's first step.
	l = g.leader(t, time.Second)
	for _, b := range c.brokers {
		if b != moved && b != l.b {
			if _, err := b.mux.peer(raft.ServerAddress(moved.id)); err != nil {
				t.Fatalf("broker %s: peer %s: %v", b.id, moved.id, err)
			}
		}
	}
	for _, b := range c.brokers {
		n := b.mux.connCount()
		if n > 2 || (b == l.b && n != 2) {
			t.Errorf("broker %s holds %d connections after the move (leader: %v)", b.id, n, b == l.b)
		}
		if b.mux.hasConn(oldAddr) {
			t.Errorf("broker %s still holds a connection to the old address %s", b.id, oldAddr)
		}
	}
}

// TestWireRoundTrip sends every RPC from one Transport to another with no
// raft in between (AppendEntries with and without entries, the latter on
// the heartbeat stream): the receiver sees exactly the structs that were
// sent, every field included, and the sender exactly the response; snapshot
// data of several chunks arrives byte for byte.
func TestWireRoundTrip(t *testing.T) {
	var dials atomic.Int32
	dialer := grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		dials.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	})
	c := newCluster(t, 2, Config{DialOptions: []grpc.DialOption{dialer}})
	a, err := c.brokers[0].mux.Group("wire")
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.brokers[1].mux.Group("wire")
	if err != nil {
		t.Fatal(err)
	}
	var observed []*raft.AppendEntriesRequest
	a.SetAppendObserver(func(_ raft.ServerID, req *raft.AppendEntriesRequest, _ *raft.AppendEntriesResponse, _ time.Time) {
		observed = append(observed, req)
	})

	hdr := raft.RPCHeader{ProtocolVersion: 3, ID: []byte("1"), Addr: []byte("1")}
	respHdr := raft.RPCHeader{ProtocolVersion: 3, ID: []byte("2"), Addr: []byte("2")}
	at := time.Unix(0, 1_700_000_000_123_456_789)

	// serve answers one RPC on b with resp after checking its command.
	serve := func(want any, wantData []byte, resp any) chan error {
		done := make(chan error, 1)
		go func() {
			rpc := <-b.Consumer()
			if !reflect.DeepEqual(rpc.Command, want) {
				done <- fmt.Errorf("received %#v\nwant %#v", rpc.Command, want)
				rpc.Respond(nil, errors.New("mismatch"))
				return
			}
			if wantData != nil {
				got, err := io.ReadAll(rpc.Reader)
				if err != nil || !bytes.Equal(got, wantData) {
					done <- fmt.Errorf("snapshot data: %d bytes (%v), want %d", len(got), err, len(wantData))
					rpc.Respond(nil, errors.New("mismatch"))
					return
				}
			}
			rpc.Respond(resp, nil)
			done <- nil
		}()
		return done
	}

	ae := &raft.AppendEntriesRequest{
		RPCHeader: hdr, Term: 7, Leader: []byte("1"), PrevLogEntry: 41, PrevLogTerm: 6, LeaderCommitIndex: 40,
		Entries: []*raft.Log{
			{Index: 42, Term: 7, Type: raft.LogCommand, Data: []byte("a"), Extensions: []byte("ext"), AppendedAt: at},
			{Index: 43, Term: 7, Type: raft.LogNoop},
		},
	}
	aeResp := &raft.AppendEntriesResponse{RPCHeader: respHdr, Term: 7, LastLog: 43, Success: true, NoRetryBackoff: true}
	done := serve(ae, nil, aeResp)
	var gotAE raft.AppendEntriesResponse
	if err := a.AppendEntries("2", "2", ae, &gotAE); err != nil {
		t.Fatalf("AppendEntries: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&gotAE, aeResp) {
		t.Errorf("AppendEntries response %#v, want %#v", gotAE, aeResp)
	}
	if len(observed) != 1 || observed[0] != ae {
		t.Errorf("observer saw %d requests, want the one sent", len(observed))
	}

	// Without entries: on the heartbeat stream, every field still carried.
	empty := &raft.AppendEntriesRequest{RPCHeader: hdr, Term: 7, Leader: []byte("1"), PrevLogEntry: 43, PrevLogTerm: 7, LeaderCommitIndex: 43}
	emptyResp := &raft.AppendEntriesResponse{RPCHeader: respHdr, Term: 7, LastLog: 43, Success: true, NoRetryBackoff: true}
	done = serve(empty, nil, emptyResp)
	if err := a.AppendEntries("2", "2", empty, &gotAE); err != nil {
		t.Fatalf("AppendEntries without entries: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&gotAE, emptyResp) {
		t.Errorf("AppendEntries without entries: response %#v, want %#v", gotAE, emptyResp)
	}
	if len(observed) != 2 || observed[1] != empty {
		t.Errorf("observer saw %d requests, want the two sent", len(observed))
	}

	rv := &raft.RequestVoteRequest{RPCHeader: hdr, Term: 8, Candidate: []byte("1"), LastLogIndex: 43, LastLogTerm: 7, LeadershipTransfer: true}
	rvResp := &raft.RequestVoteResponse{RPCHeader: respHdr, Term: 8, Peers: []byte("peers"), Granted: true}
	done = serve(rv, nil, rvResp)
	var gotRV raft.RequestVoteResponse
	if err := a.RequestVote("2", "2", rv, &gotRV); err != nil {
		t.Fatalf("RequestVote: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&gotRV, rvResp) {
		t.Errorf("RequestVote response %#v, want %#v", gotRV, rvResp)
	}

	pv := &raft.RequestPreVoteRequest{RPCHeader: hdr, Term: 9, LastLogIndex: 43, LastLogTerm: 7}
	pvResp := &raft.RequestPreVoteResponse{RPCHeader: respHdr, Term: 8, Granted: true}
	done = serve(pv, nil, pvResp)
	var gotPV raft.RequestPreVoteResponse
	if err := a.RequestPreVote("2", "2", pv, &gotPV); err != nil {
		t.Fatalf("RequestPreVote: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&gotPV, pvResp) {
		t.Errorf("RequestPreVote response %#v, want %#v", gotPV, pvResp)
	}

	tn := &raft.TimeoutNowRequest{RPCHeader: hdr}
	tnResp := &raft.TimeoutNowResponse{RPCHeader: respHdr}
	done = serve(tn, nil, tnResp)
	var gotTN raft.TimeoutNowResponse
	if err := a.TimeoutNow("2", "2", tn, &gotTN); err != nil {
		t.Fatalf("TimeoutNow: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&gotTN, tnResp) {
		t.Errorf("TimeoutNow response %#v, want %#v", gotTN, tnResp)
	}

	data := make([]byte, 3*snapshotChunkSize+12345)
	for i := range data {
		data[i] = byte(rand.IntN(256))
	}
	is := &raft.InstallSnapshotRequest{
		RPCHeader: hdr, SnapshotVersion: 1, Term: 8, Leader: []byte("1"), LastLogIndex: 43, LastLogTerm: 7,
		Peers: []byte("p"), Configuration: []byte("conf"), ConfigurationIndex: 1, Size: int64(len(data)),
	}
	isResp := &raft.InstallSnapshotResponse{RPCHeader: respHdr, Term: 8, Success: true}
	done = serve(is, data, isResp)
	var gotIS raft.InstallSnapshotResponse
	if err := a.InstallSnapshot("2", "2", is, &gotIS, bytes.NewReader(data)); err != nil {
		t.Fatalf("InstallSnapshot: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&gotIS, isResp) {
		t.Errorf("InstallSnapshot response %#v, want %#v", gotIS, isResp)
	}

	if dials.Load() == 0 {
		t.Error("the dialer of Config.DialOptions was not used")
	}

	// An error raft answers with comes back as an error, not a response.
	go func() {
		rpc := <-b.Consumer()
		rpc.Respond(nil, errors.New("unexpected command"))
	}()
	if err := a.RequestVote("2", "2", rv, &gotRV); err == nil || !strings.Contains(err.Error(), "unexpected command") {
		t.Errorf("raft error: got %v", err)
	}
}

// TestHeartbeatFastPath: a heartbeat is answered by the heartbeat handler
// while raft (here: nobody) does not read the consumer channel, on which a
// regular AppendEntries waits until its deadline.
func TestHeartbeatFastPath(t *testing.T) {
	c := newCluster(t, 2, Config{RPCTimeout: 300 * time.Millisecond})
	a, err := c.brokers[0].mux.Group("hb")
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.brokers[1].mux.Group("hb")
	if err != nil {
		t.Fatal(err)
	}
	var handled int
	b.SetHeartbeatHandler(func(rpc raft.RPC) {
		handled++
		rpc.Respond(&raft.AppendEntriesResponse{Term: 9, Success: true}, nil)
	})
	hb := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{Addr: []byte("1")}, Term: 9}
	var resp raft.AppendEntriesResponse
	if err := a.AppendEntries("2", "2", hb, &resp); err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
	if handled != 1 || resp.Term != 9 || !resp.Success {
		t.Errorf("heartbeat: handler called %d times, response %+v", handled, resp)
	}
	full := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{Addr: []byte("1")}, Term: 9, PrevLogEntry: 5, PrevLogTerm: 9}
	err = a.AppendEntries("2", "2", full, &resp)
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("AppendEntries nobody consumes: %v, want deadline exceeded", err)
	}
	if handled != 1 {
		t.Errorf("heartbeat handler called for a non-heartbeat")
	}
}

// TestCloseFailsInFlight: closing a Transport fails its outbound calls in
// flight at once with raft.ErrTransportShutdown, and releases the inbound
// calls waiting for its raft; later calls fail the same way.
func TestCloseFailsInFlight(t *testing.T) {
	c := newCluster(t, 2, Config{RPCTimeout: 20 * time.Second})
	a, err := c.brokers[0].mux.Group("close")
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.brokers[1].mux.Group("close")
	if err != nil {
		t.Fatal(err)
	}
	// b's raft never reads its consumer: a's vote waits on b.
	errc := make(chan error, 1)
	go func() {
		errc <- a.RequestVote("2", "2", &raft.RequestVoteRequest{Term: 1}, &raft.RequestVoteResponse{})
	}()
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	_ = a.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, raft.ErrTransportShutdown) {
			t.Errorf("in-flight call after Close: %v, want ErrTransportShutdown", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("in-flight call still blocked 5 s after Close")
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("in-flight call failed %v after Close", took)
	}
	if err := a.AppendEntries("2", "2", &raft.AppendEntriesRequest{Term: 1}, &raft.AppendEntriesResponse{}); !errors.Is(err, raft.ErrTransportShutdown) {
		t.Errorf("call after Close: %v, want ErrTransportShutdown", err)
	}

	// Inbound: broker 1 calls b (which nobody consumes) and b closes.
	a2, err := c.brokers[0].mux.Group("close")
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	go func() {
		errc <- a2.RequestVote("2", "2", &raft.RequestVoteRequest{Term: 1}, &raft.RequestVoteResponse{})
	}()
	time.Sleep(100 * time.Millisecond)
	start = time.Now()
	_ = b.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrUnknownGroup) {
			t.Errorf("call waiting on a closed peer group: %v, want ErrUnknownGroup", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("inbound call still waiting 5 s after the group closed")
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("inbound call released %v after Close", took)
	}

	// Mux.Close closes the groups it holds.
	if err := c.brokers[0].mux.Close(); err != nil {
		t.Errorf("mux close: %v", err)
	}
	if err := a2.RequestVote("2", "2", &raft.RequestVoteRequest{Term: 1}, &raft.RequestVoteResponse{}); !errors.Is(err, raft.ErrTransportShutdown) {
		t.Errorf("call after Mux.Close: %v, want ErrTransportShutdown", err)
	}
}
