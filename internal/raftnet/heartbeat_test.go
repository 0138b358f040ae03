package raftnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
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

	raftv1 "github.com/tapes-dev/tapes/internal/gen/tapes/raft/v1"
)

// heartbeatReq is a heartbeat as raft's leader sends it.
func heartbeatReq(term uint64) *raft.AppendEntriesRequest {
	return &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: 3, ID: []byte("1"), Addr: []byte("1")},
		Term:      term,
		Leader:    []byte("1"),
	}
}

// openPairs opens groups name0..name(n-1) on brokers a and b; b answers
// the heartbeats of group i with term i+1 through its heartbeat handler.
func openPairs(t *testing.T, a, b *broker, name string, n int) (from, to []*Transport) {
	t.Helper()
	for i := range n {
		g := fmt.Sprintf("%s%d", name, i)
		fa, err := a.mux.Group(g)
		if err != nil {
			t.Fatal(err)
		}
		fb, err := b.mux.Group(g)
		if err != nil {
			t.Fatal(err)
		}
		term := uint64(i + 1)
		fb.SetHeartbeatHandler(func(rpc raft.RPC) {
			rpc.Respond(&raft.AppendEntriesResponse{Term: term, Success: true}, nil)
		})
		from = append(from, fa)
		to = append(to, fb)
	}
	return from, to
}

// heartbeatAll sends one heartbeat from each Transport to peer "2" at the
// same instant and returns each one's response and error.
func heartbeatAll(trs []*Transport) ([]raft.AppendEntriesResponse, []error, []time.Duration) {
	resps := make([]raft.AppendEntriesResponse, len(trs))
	errs := make([]error, len(trs))
	took := make([]time.Duration, len(trs))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, tr := range trs {
		wg.Go(func() {
			<-start
			t0 := time.Now()
			errs[i] = tr.AppendEntries("2", "2", heartbeatReq(7), &resps[i])
			took[i] = time.Since(t0)
		})
	}
	close(start)
	wg.Wait()
	return resps, errs, took
}

// TestHeartbeatCoalescing: heartbeats of 50 groups to one peer, sent at
// once, travel in a handful of Heartbeat calls, and each caller gets its own
// group's answer. A regular AppendEntries still is a call of its own and
// reaches the AppendObserver; heartbeats never do.
func TestHeartbeatCoalescing(t *testing.T) {
	c := newCluster(t, 2, Config{HeartbeatTimeout: 5 * time.Second})
	const groups, rounds = 50, 3
	from, to := openPairs(t, c.brokers[0], c.brokers[1], "co", groups)
	var observed atomic.Int32
	from[0].SetAppendObserver(func(raft.ServerID, *raft.AppendEntriesRequest, *raft.AppendEntriesResponse, time.Time) {
		observed.Add(1)
	})
	peer := c.brokers[1]
	for r := range rounds {
		calls0, hb0 := peer.batchCalls.Load(), peer.heartbeats.Load()
		resps, errs, _ := heartbeatAll(from)
		for i := range from {
			if errs[i] != nil {
				t.Fatalf("round %d: heartbeat of group %d: %v", r, i, errs[i])
			}
			if resps[i].Term != uint64(i+1) || !resps[i].Success {
				t.Errorf("round %d: group %d got response %+v, want its own (term %d)", r, i, resps[i], i+1)
			}
		}
		calls, hbs := peer.batchCalls.Load()-calls0, peer.heartbeats.Load()-hb0
		t.Logf("round %d: %d heartbeats in %d Heartbeat calls", r, hbs, calls)
		if hbs != groups {
			t.Errorf("round %d: peer saw %d heartbeats, want %d", r, hbs, groups)
		}
		if calls > 5 {
			t.Errorf("round %d: %d heartbeats sent at once took %d calls, want at most 5", r, groups, calls)
		}
	}
	if n := peer.appendCalls.Load(); n != 0 {
		t.Errorf("%d heartbeats went as AppendEntries calls", n)
	}
	if n := observed.Load(); n != 0 {
		t.Errorf("AppendObserver saw %d heartbeats", n)
	}

	// A regular AppendEntries: a call of its own, through raft's consumer.
	go func() {
		rpc := <-to[0].Consumer()
		rpc.Respond(&raft.AppendEntriesResponse{Term: 7, LastLog: 3, Success: true}, nil)
	}()
	calls0 := peer.batchCalls.Load()
	full := heartbeatReq(7)
	full.PrevLogEntry, full.PrevLogTerm = 2, 7
	full.Entries = []*raft.Log{{Index: 3, Term: 7, Type: raft.LogCommand, Data: []byte("x")}}
	var resp raft.AppendEntriesResponse
	if err := from[0].AppendEntries("2", "2", full, &resp); err != nil || resp.LastLog != 3 {
		t.Fatalf("AppendEntries: %v, %+v", err, resp)
	}
	if n := peer.appendCalls.Load(); n != 1 {
		t.Errorf("peer saw %d AppendEntries calls, want 1", n)
	}
	if peer.batchCalls.Load() != calls0 {
		t.Error("a regular AppendEntries went through the heartbeat batcher")
	}
	if n := observed.Load(); n != 1 {
		t.Errorf("AppendObserver called %d times, want once", n)
	}
}

// rawClient dials b's gRPC server directly.
func rawClient(t *testing.T, c *cluster, id raft.ServerAddress) raftv1.RaftServiceClient {
	t.Helper()
	target, err := c.peers.resolve(id)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return raftv1.NewRaftServiceClient(cc)
}

func protoHeartbeat(group string, term uint64) *raftv1.AppendEntriesRequest {
	return appendEntriesRequestToProto(group, heartbeatReq(term))
}

// TestHeartbeatBatchAnswers: in one Heartbeat call, heartbeats for groups
// the peer does not serve (never opened, or closed) are answered "unknown
// group" at once without failing the others; an error raft answers with is
// that heartbeat's error; a group without heartbeat handler is answered
// through its consumer channel; and a group whose raft does not answer (no
// handler and nobody consuming, or a handler that blocks) is answered
// NOT_ANSWERED after heartbeatStragglerWait while the others get their
// answers. Through Transports, the unknown group comes back as
// ErrUnknownGroup and the known one succeeds.
func TestHeartbeatBatchAnswers(t *testing.T) {
	c := newCluster(t, 2, Config{})
	b := c.brokers[1]
	open := func(name string) *Transport {
		tr, err := b.mux.Group(name)
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	ok := open("ok")
	ok.SetHeartbeatHandler(func(rpc raft.RPC) {
		rpc.Respond(&raft.AppendEntriesResponse{Term: rpc.Command.(*raft.AppendEntriesRequest).Term, Success: true}, nil)
	})
	_ = open("closed").Close()
	refuse := open("refuse")
	refuse.SetHeartbeatHandler(func(rpc raft.RPC) { rpc.Respond(nil, errors.New("not now")) })
	consumed := open("consumed")
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case rpc := <-consumed.Consumer():
				rpc.Respond(&raft.AppendEntriesResponse{Term: 42, Success: true}, nil)
			case <-stop:
				return
			}
		}
	}()
	_ = open("deaf") // no handler, nobody consumes
	blocked := open("blocked")
	release := make(chan struct{})
	defer close(release)
	blocked.SetHeartbeatHandler(func(rpc raft.RPC) {
		<-release
		rpc.Respond(&raft.AppendEntriesResponse{Success: true}, nil)
	})

	raw := rawClient(t, c, "2")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Known and unknown groups only: answered at once.
	start := time.Now()
	out, err := raw.Heartbeat(ctx, &raftv1.HeartbeatRequest{Heartbeats: []*raftv1.AppendEntriesRequest{
		protoHeartbeat("ok", 5), protoHeartbeat("nope", 5), protoHeartbeat("ok", 6), protoHeartbeat("closed", 5),
		protoHeartbeat("refuse", 5), protoHeartbeat("consumed", 5),
	}})
	if err != nil {
		t.Fatalf("Heartbeat: %v", err)
	}
	if took := time.Since(start); took > heartbeatStragglerWait {
		t.Errorf("answered after %v, want at once", took)
	}
	res := out.GetResults()
	if len(res) != 6 {
		t.Fatalf("%d results for 6 heartbeats", len(res))
	}
	for i, term := range map[int]uint64{0: 5, 2: 6, 5: 42} {
		if r := res[i].GetResponse(); r == nil || r.GetTerm() != term || !r.GetSuccess() {
			t.Errorf("result %d: %v, want a response with term %d", i, res[i], term)
		}
	}
	for _, i := range []int{1, 3} {
		if k := res[i].GetError().GetKind(); k != raftv1.HeartbeatErrorKind_HEARTBEAT_ERROR_KIND_UNKNOWN_GROUP {
			t.Errorf("result %d: %v, want unknown group", i, res[i])
		}
	}
	if e := res[4].GetError(); e.GetKind() != raftv1.HeartbeatErrorKind_HEARTBEAT_ERROR_KIND_RAFT || e.GetMessage() != "not now" {
		t.Errorf("result 4: %v, want raft error \"not now\"", res[4])
	}

	// Stragglers first: the others are answered, the call ends at the
	// cut-off.
	start = time.Now()
	out, err = raw.Heartbeat(ctx, &raftv1.HeartbeatRequest{Heartbeats: []*raftv1.AppendEntriesRequest{
		protoHeartbeat("blocked", 5), protoHeartbeat("deaf", 5), protoHeartbeat("ok", 7), protoHeartbeat("nope", 5),
	}})
	took := time.Since(start)
	if err != nil {
		t.Fatalf("Heartbeat with stragglers: %v", err)
	}
	if took < heartbeatStragglerWait || took > heartbeatStragglerWait+time.Second {
		t.Errorf("call with stragglers took %v, want about %v", took, heartbeatStragglerWait)
	}
	res = out.GetResults()
	for _, i := range []int{0, 1} {
		if k := res[i].GetError().GetKind(); k != raftv1.HeartbeatErrorKind_HEARTBEAT_ERROR_KIND_NOT_ANSWERED {
			t.Errorf("straggler %d: %v, want not answered", i, res[i])
		}
	}
	if r := res[2].GetResponse(); r == nil || r.GetTerm() != 7 {
		t.Errorf("result 2 (behind stragglers): %v, want a response with term 7", res[2])
	}
	if k := res[3].GetError().GetKind(); k != raftv1.HeartbeatErrorKind_HEARTBEAT_ERROR_KIND_UNKNOWN_GROUP {
		t.Errorf("result 3: %v, want unknown group", res[3])
	}

	// Through Transports, in the same batch.
	a := c.brokers[0]
	var trs []*Transport
	for _, name := range []string{"ok", "lonely"} {
		tr, err := a.mux.Group(name)
		if err != nil {
			t.Fatal(err)
		}
		trs = append(trs, tr)
	}
	calls0 := b.batchCalls.Load()
	resps, errs, _ := heartbeatAll(trs)
	if errs[0] != nil || resps[0].Term != 7 {
		t.Errorf("heartbeat of a served group: %v, %+v", errs[0], resps[0])
	}
	if !errors.Is(errs[1], ErrUnknownGroup) {
		t.Errorf("heartbeat of a group the peer lacks: %v, want ErrUnknownGroup", errs[1])
	}
	t.Logf("2 heartbeats in %d calls", b.batchCalls.Load()-calls0)
	tr, err := a.mux.Group("refuse")
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.AppendEntries("2", "2", heartbeatReq(1), &raft.AppendEntriesResponse{}); err == nil || !strings.Contains(err.Error(), "not now") {
		t.Errorf("heartbeat raft refuses: %v, want its error", err)
	}
}

// gate holds the bytes of the connections it guards while paused, in both
// directions, as a paused peer process or a black-holing proxy would.
type gate struct {
	mu   sync.Mutex
	open chan struct{} // closed while the gate is open
}

func newGate() *gate {
	g := &gate{open: make(chan struct{})}
	close(g.open)
	return g
}

func (g *gate) pause() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
		g.open = make(chan struct{})
	default:
	}
}

func (g *gate) heal() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

func (g *gate) wait(closed <-chan struct{}) error {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	select {
	case <-open:
		return nil
	case <-closed:
		return net.ErrClosed
	}
}

func (g *gate) dialer() grpc.DialOption {
	return grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return &gatedConn{Conn: conn, g: g, closed: make(chan struct{})}, nil
	})
}

type gatedConn struct {
	net.Conn
	g      *gate
	closed chan struct{}
	once   sync.Once
}

func (c *gatedConn) Write(p []byte) (int, error) {
	if err := c.g.wait(c.closed); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

func (c *gatedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if werr := c.g.wait(c.closed); werr != nil {
		return 0, werr
	}
	return n, err
}

func (c *gatedConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// TestHeartbeatBlackhole: while the peer's connection is held, heartbeats
// (sent together and one after another, so that calls overlap) fail after
// HeartbeatTimeout, not sooner and not much later; Transport.Close fails a
// waiting heartbeat at once; after the peer is back, heartbeats succeed
// again. Mux.Close then fails a waiting heartbeat at once and leaves no
// goroutine of the batcher behind.
func TestHeartbeatBlackhole(t *testing.T) {
	const timeout = 300 * time.Millisecond
	g := newGate()
	c := newCluster(t, 2, Config{HeartbeatTimeout: timeout, DialOptions: []grpc.DialOption{g.dialer()}})
	from, _ := openPairs(t, c.brokers[0], c.brokers[1], "bh", 8)
	if _, errs, _ := heartbeatAll(from); errors.Join(errs...) != nil {
		t.Fatalf("heartbeats before the blackhole: %v", errors.Join(errs...))
	}

	g.pause()
	check := func(what string, err error, took time.Duration) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: succeeded through a held connection", what)
			return
		}
		if status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("%s: %v, want deadline exceeded", what, err)
		}
		if took < timeout-20*time.Millisecond || took > timeout+250*time.Millisecond {
			t.Errorf("%s: failed after %v, want about %v", what, took, timeout)
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		_, errs, took := heartbeatAll(from[:6])
		for i := range errs {
			check(fmt.Sprintf("heartbeat %d of a burst", i), errs[i], took[i])
		}
	})
	// One every 20 ms: later ones are sent while earlier calls hang.
	for i := range 10 {
		time.Sleep(20 * time.Millisecond)
		wg.Go(func() {
			start := time.Now()
			err := from[6].AppendEntries("2", "2", heartbeatReq(7), &raft.AppendEntriesResponse{})
			check(fmt.Sprintf("staggered heartbeat %d", i), err, time.Since(start))
		})
	}
	// Transport.Close releases a heartbeat waiting on the held peer.
	type ended struct {
		err error
		at  time.Time
	}
	closed := make(chan ended, 1)
	waitHeartbeat := func(tr *Transport) {
		go func() {
			err := tr.AppendEntries("2", "2", heartbeatReq(7), &raft.AppendEntriesResponse{})
			closed <- ended{err, time.Now()}
		}()
		time.Sleep(50 * time.Millisecond)
	}
	released := func(what string, closedAt time.Time) {
		t.Helper()
		select {
		case e := <-closed:
			if !errors.Is(e.err, raft.ErrTransportShutdown) {
				t.Errorf("heartbeat after %s: %v, want ErrTransportShutdown", what, e.err)
			}
			if took := e.at.Sub(closedAt); took > 50*time.Millisecond {
				t.Errorf("heartbeat released %v after %s", took, what)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("heartbeat still waiting 10 s after %s", what)
		}
	}
	waitHeartbeat(from[7])
	closedAt := time.Now()
	_ = from[7].Close()
	released("Transport.Close", closedAt)
	wg.Wait()

	g.heal()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, errs, _ := heartbeatAll(from[:7])
		if errors.Join(errs...) == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("heartbeats still failing 5 s after the peer is back: %v", errors.Join(errs...))
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Mux.Close while a heartbeat waits on the held peer. (Closing the
	// connection itself waits for gRPC's GOAWAY write, which a held
	// connection delays by up to 5 s; heal meanwhile.)
	g.pause()
	waitHeartbeat(from[0])
	time.AfterFunc(200*time.Millisecond, g.heal)
	closedAt = time.Now()
	if err := c.brokers[0].mux.Close(); err != nil {
		t.Errorf("mux close: %v", err)
	}
	released("Mux.Close", closedAt)
	for _, b := range c.brokers {
		_ = b.mux.Close()
		b.srv.Stop()
	}
	waitNoGoroutines(t, "raftnet.(*hbBatcher)", "raftnet.(*hbJob)", "raftnet.(*Transport).heartbeat", "raftnet.(*server).Heartbeat")
}

// waitNoGoroutines fails the test unless, within 5 s, no goroutine's stack
// holds any of the function names.
func waitNoGoroutines(t *testing.T, funcs ...string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var left []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			for _, f := range funcs {
				if strings.Contains(g, f) {
					left = append(left, g)
					break
				}
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines left behind:\n%s", len(left), strings.Join(left, "\n\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestIdleLeadersKeepLeadership runs 24 groups of 3 voters with tapes'
// Raft timing (heartbeat, election and lease 500 ms) idle for 3 s: no
// heartbeat fails, no group changes leader or term, and the heartbeats
// travel in fewer calls than there are heartbeats.
func TestIdleLeadersKeepLeadership(t *testing.T) {
	c := newCluster(t, 3, Config{})
	tm := timing{heartbeat: 500 * time.Millisecond, election: 500 * time.Millisecond, lease: 500 * time.Millisecond, commit: time.Second}
	var failed atomic.Int64
	obsCh := make(chan raft.Observation, 1)
	failedOnly := raft.NewObserver(obsCh, false, func(o *raft.Observation) bool {
		if _, ok := o.Data.(raft.FailedHeartbeatObservation); ok {
			failed.Add(1)
		}
		return false
	})
	var gs []*group
	for i := range 24 {
		g := c.startGroup(fmt.Sprintf("idle%02d", i), tm, nil, nil)
		for _, m := range g.members {
			m.raft.RegisterObserver(failedOnly)
		}
		gs = append(gs, g)
	}
	type state struct {
		leader *member
		term   string
	}
	snapshot := func() map[*group]state {
		out := make(map[*group]state)
		for _, g := range gs {
			l := g.leader(t, 20*time.Second)
			out[g] = state{l, l.raft.Stats()["term"]}
		}
		return out
	}
	before := snapshot()
	time.Sleep(500 * time.Millisecond) // the first heartbeats of new leaders
	failed.Store(0)
	var hb0, calls0 int64
	for _, b := range c.brokers {
		hb0 += b.heartbeats.Load()
		calls0 += b.heartbeatCalls.Load()
	}
	time.Sleep(3 * time.Second)
	var hb, calls int64
	for _, b := range c.brokers {
		hb += b.heartbeats.Load()
		calls += b.heartbeatCalls.Load()
	}
	hb, calls = hb-hb0, calls-calls0
	after := snapshot()
	for _, g := range gs {
		if before[g] != after[g] {
			t.Errorf("group %s: leader %s term %s became leader %s term %s while idle", g.name,
				before[g].leader.b.id, before[g].term, after[g].leader.b.id, after[g].term)
		}
	}
	if n := failed.Load(); n > 0 {
		t.Errorf("%d heartbeats failed while idle", n)
	}
	t.Logf("%d heartbeats in %d calls (%.1f per call) in 3 s", hb, calls, float64(hb)/float64(max(calls, 1)))
	// 24 groups x 2 followers x 10-20 heartbeats/s: about 2,000 in 3 s.
	if hb < 1000 {
		t.Fatalf("only %d heartbeats in 3 s", hb)
	}
	if calls*5 > hb*4 {
		t.Errorf("%d heartbeats took %d calls; coalescing should save a fifth at least", hb, calls)
	}
}

// fakeHeartbeats is a RaftServiceClient whose Heartbeat records each call
// and answers it once hold (if set) lets it.
type fakeHeartbeats struct {
	raftv1.RaftServiceClient
	hold  chan struct{} // nil: answer at once
	calls chan fakeCall
}

type fakeCall struct {
	at     time.Time
	groups []string
}

func (f *fakeHeartbeats) Heartbeat(ctx context.Context, in *raftv1.HeartbeatRequest, _ ...grpc.CallOption) (*raftv1.HeartbeatResponse, error) {
	call := fakeCall{at: time.Now()}
	out := &raftv1.HeartbeatResponse{}
	for _, hb := range in.GetHeartbeats() {
		call.groups = append(call.groups, hb.GetGroup())
		out.Results = append(out.Results, &raftv1.HeartbeatResult{Result: &raftv1.HeartbeatResult_Response{
			Response: &raftv1.AppendEntriesResponse{Term: hb.GetTerm(), Success: true},
		}})
	}
	f.calls <- call
	if f.hold != nil {
		select {
		case <-f.hold:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	return out, nil
}

// TestHBBatcher drives the batcher with a fake peer: a batch leaves linger
// after its first heartbeat, with everything queued since, and each caller
// gets its own answer; while a call hangs, the next batch still leaves
// linger after its first heartbeat; heartbeats that come during a quick
// call leave linger after the first of them; without linger a heartbeat
// leaves at once, or right after the call in flight; a full batch leaves at
// once; heartbeats whose caller gave up are left out; close fails what is
// queued and ends the batcher's goroutine.
func TestHBBatcher(t *testing.T) {
	const linger = 30 * time.Millisecond
	newCall := func(group string, term uint64, timeout time.Duration) *hbCall {
		return &hbCall{
			req:      protoHeartbeat(group, term),
			deadline: time.Now().Add(timeout),
			done:     make(chan hbResult, 1),
		}
	}
	result := func(t *testing.T, c *hbCall) hbResult {
		t.Helper()
		select {
		case r := <-c.done:
			return r
		case <-time.After(5 * time.Second):
			t.Fatalf("no answer for %s", c.req.GetGroup())
			return hbResult{}
		}
	}
	nextCall := func(t *testing.T, f *fakeHeartbeats) fakeCall {
		t.Helper()
		select {
		case c := <-f.calls:
			return c
		case <-time.After(5 * time.Second):
			t.Fatal("no Heartbeat call")
			return fakeCall{}
		}
	}
	noCall := func(t *testing.T, f *fakeHeartbeats, d time.Duration) {
		t.Helper()
		select {
		case c := <-f.calls:
			t.Fatalf("unexpected call with %v", c.groups)
		case <-time.After(d):
		}
	}
	// early and late bound when a batch leaves, relative to want.
	within := func(t *testing.T, what string, got, want time.Time) {
		t.Helper()
		if d := got.Sub(want); d < -2*time.Millisecond || d > 40*time.Millisecond {
			t.Errorf("%s left %v after its due time", what, d)
		}
	}

	t.Run("linger", func(t *testing.T) {
		f := &fakeHeartbeats{calls: make(chan fakeCall, 16)}
		b := newHBBatcher(f, linger)
		defer b.close()
		first := time.Now()
		a := newCall("a", 1, time.Second)
		if err := b.enqueue(a); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
		c := newCall("c", 2, time.Second)
		_ = b.enqueue(c)
		call := nextCall(t, f)
		within(t, "batch", call.at, first.Add(linger))
		if len(call.groups) != 2 {
			t.Errorf("call carried %v, want a and c", call.groups)
		}
		if r := result(t, a); r.err != nil || r.resp.GetTerm() != 1 {
			t.Errorf("a: %+v", r)
		}
		if r := result(t, c); r.err != nil || r.resp.GetTerm() != 2 {
			t.Errorf("c: %+v", r)
		}
	})

	t.Run("hanging call", func(t *testing.T) {
		f := &fakeHeartbeats{calls: make(chan fakeCall, 16), hold: make(chan struct{})}
		b := newHBBatcher(f, linger)
		defer b.close()
		_ = b.enqueue(newCall("a", 1, time.Second))
		nextCall(t, f) // run is now held in this call
		first := time.Now()
		x := newCall("x", 3, time.Second)
		_ = b.enqueue(x)
		call := nextCall(t, f)
		within(t, "batch behind a hanging call", call.at, first.Add(linger))
		close(f.hold)
		if r := result(t, x); r.err != nil || r.resp.GetTerm() != 3 {
			t.Errorf("x: %+v", r)
		}
	})

	t.Run("during a quick call", func(t *testing.T) {
		f := &fakeHeartbeats{calls: make(chan fakeCall, 16), hold: make(chan struct{})}
		b := newHBBatcher(f, linger)
		defer b.close()
		_ = b.enqueue(newCall("a", 1, time.Second))
		nextCall(t, f)
		first := time.Now()
		_ = b.enqueue(newCall("y", 4, time.Second))
		time.Sleep(5 * time.Millisecond)
		f.hold <- struct{}{} // the call in flight ends; run takes the batch over
		time.Sleep(5 * time.Millisecond)
		_ = b.enqueue(newCall("z", 5, time.Second))
		close(f.hold)
		call := nextCall(t, f)
		within(t, "batch queued during a call", call.at, first.Add(linger))
		if len(call.groups) != 2 {
			t.Errorf("call carried %v, want y and z", call.groups)
		}
		noCall(t, f, 2*linger)
	})

	t.Run("no linger", func(t *testing.T) {
		f := &fakeHeartbeats{calls: make(chan fakeCall, 16), hold: make(chan struct{})}
		b := newHBBatcher(f, 0)
		defer b.close()
		start := time.Now()
		_ = b.enqueue(newCall("a", 1, time.Second))
		within(t, "heartbeat to an idle peer", nextCall(t, f).at, start)
		_ = b.enqueue(newCall("p", 1, time.Second))
		_ = b.enqueue(newCall("q", 1, time.Second))
		noCall(t, f, 20*time.Millisecond)
		released := time.Now()
		f.hold <- struct{}{}
		call := nextCall(t, f)
		within(t, "heartbeats queued behind a call", call.at, released)
		if len(call.groups) != 2 {
			t.Errorf("call carried %v, want p and q", call.groups)
		}
		close(f.hold)
	})

	t.Run("full batch", func(t *testing.T) {
		f := &fakeHeartbeats{calls: make(chan fakeCall, 16)}
		b := newHBBatcher(f, time.Hour)
		defer b.close()
		start := time.Now()
		for i := range maxHeartbeatBatch {
			_ = b.enqueue(newCall(fmt.Sprint(i), 1, time.Second))
		}
		call := nextCall(t, f)
		within(t, "full batch", call.at, start)
		if len(call.groups) != maxHeartbeatBatch {
			t.Errorf("full batch carried %d heartbeats", len(call.groups))
		}
	})

	t.Run("callers gone", func(t *testing.T) {
		f := &fakeHeartbeats{calls: make(chan fakeCall, 16)}
		b := newHBBatcher(f, linger)
		defer b.close()
		gone := make(chan struct{})
		close(gone)
		left := newCall("left", 1, time.Second)
		left.gone = gone
		_ = b.enqueue(left)
		_ = b.enqueue(newCall("late", 1, time.Millisecond))
		stay := newCall("stay", 1, time.Second)
		_ = b.enqueue(stay)
		call := nextCall(t, f)
		if len(call.groups) != 1 || call.groups[0] != "stay" {
			t.Errorf("call carried %v, want only stay", call.groups)
		}
		if r := result(t, stay); r.err != nil {
			t.Errorf("stay: %v", r.err)
		}
		// Nobody waits for the others: they get no answer.
		select {
		case r := <-left.done:
			t.Errorf("left got %+v", r)
		default:
		}
		// All gone: no call at all.
		_ = b.enqueue(left)
		noCall(t, f, 2*linger)
	})

	t.Run("close", func(t *testing.T) {
		f := &fakeHeartbeats{calls: make(chan fakeCall, 16)}
		b := newHBBatcher(f, time.Hour)
		q := newCall("q", 1, time.Second)
		_ = b.enqueue(q)
		b.close()
		b.close()
		if r := result(t, q); !errors.Is(r.err, errBatcherClosed) {
			t.Errorf("queued heartbeat at close: %v, want errBatcherClosed", r.err)
		}
		if err := b.enqueue(newCall("after", 1, time.Second)); !errors.Is(err, errBatcherClosed) {
			t.Errorf("enqueue after close: %v", err)
		}
		waitNoGoroutines(t, "raftnet.(*hbBatcher).run")
	})
}
