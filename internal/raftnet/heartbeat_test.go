package raftnet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tapes-dev/tapes/internal/eventually"
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
// once, travel in a handful of messages of the heartbeat stream, and each
// caller gets its own group's answer. An AppendEntries without entries
// travels on the stream too, through the peer raft's consumer, and reaches
// the AppendObserver; one with entries is a call of its own and reaches it
// as well; heartbeats never do.
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
		t.Logf("round %d: %d heartbeats in %d messages", r, hbs, calls)
		if hbs != groups {
			t.Errorf("round %d: peer saw %d heartbeats, want %d", r, hbs, groups)
		}
		if calls > 5 {
			t.Errorf("round %d: %d heartbeats sent at once took %d messages, want at most 5", r, groups, calls)
		}
	}
	if n := peer.appendCalls.Load(); n != 0 {
		t.Errorf("%d heartbeats went as AppendEntries calls", n)
	}
	if n := peer.streams.Load(); n != 1 {
		t.Errorf("%d heartbeat streams opened, want 1", n)
	}
	if n := observed.Load(); n != 0 {
		t.Errorf("AppendObserver saw %d heartbeats", n)
	}

	// raft answers what comes through its consumer.
	consumed := make(chan *raft.AppendEntriesRequest, 2)
	go func() {
		for range 2 {
			rpc := <-to[0].Consumer()
			req := rpc.Command.(*raft.AppendEntriesRequest)
			consumed <- req
			rpc.Respond(&raft.AppendEntriesResponse{Term: 7, LastLog: req.PrevLogEntry + uint64(len(req.Entries)), Success: true}, nil)
		}
	}()

	// Without entries (raft's idle CommitTimeout round): on the stream.
	empty := heartbeatReq(7)
	empty.PrevLogEntry, empty.PrevLogTerm, empty.LeaderCommitIndex = 3, 7, 3
	var resp raft.AppendEntriesResponse
	if err := from[0].AppendEntries("2", "2", empty, &resp); err != nil || resp.LastLog != 3 || !resp.Success {
		t.Fatalf("AppendEntries without entries: %v, %+v", err, resp)
	}
	if got := <-consumed; got.PrevLogEntry != 3 || got.LeaderCommitIndex != 3 {
		t.Errorf("peer raft got %+v", got)
	}
	if n := peer.streamAppends.Load(); n != 1 {
		t.Errorf("peer saw %d AppendEntries without entries on the stream, want 1", n)
	}
	if n := peer.appendCalls.Load(); n != 0 {
		t.Errorf("an AppendEntries without entries was a call of its own")
	}
	if n := observed.Load(); n != 1 {
		t.Errorf("AppendObserver called %d times, want once", n)
	}

	// With entries: a call of its own.
	calls0 := peer.batchCalls.Load()
	full := heartbeatReq(7)
	full.PrevLogEntry, full.PrevLogTerm = 3, 7
	full.Entries = []*raft.Log{{Index: 4, Term: 7, Type: raft.LogCommand, Data: []byte("x")}}
	if err := from[0].AppendEntries("2", "2", full, &resp); err != nil || resp.LastLog != 4 {
		t.Fatalf("AppendEntries: %v, %+v", err, resp)
	}
	<-consumed
	if n := peer.appendCalls.Load(); n != 1 {
		t.Errorf("peer saw %d AppendEntries calls, want 1", n)
	}
	if peer.batchCalls.Load() != calls0 {
		t.Error("an AppendEntries with entries went on the heartbeat stream")
	}
	if n := observed.Load(); n != 2 {
		t.Errorf("AppendObserver called %d times, want twice", n)
	}
}

// TestAppendWithoutEntriesLinger: an AppendEntries without entries waits
// for the linger only as raft's idle CommitTimeout round (same term as the
// previous one to that follower, and appendIdleGap lingers after it); the
// first one of a term (a new leader's probe, on which its first entries
// wait) and one right after another leave at once. On the wire with a
// linger of an hour, so that one that lingered could only fail at its
// deadline; the rule itself with the time as an input.
func TestAppendWithoutEntriesLinger(t *testing.T) {
	const linger = time.Hour
	c := newCluster(t, 2, Config{HeartbeatLinger: linger, RPCTimeout: 30 * time.Second})
	from, to := openPairs(t, c.brokers[0], c.brokers[1], "idle", 1)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case rpc := <-to[0].Consumer():
				req := rpc.Command.(*raft.AppendEntriesRequest)
				rpc.Respond(&raft.AppendEntriesResponse{Term: req.Term, LastLog: req.PrevLogEntry, Success: true}, nil)
			case <-stop:
				return
			}
		}
	}()
	send := func(what string, term uint64) {
		t.Helper()
		req := heartbeatReq(term)
		req.PrevLogEntry, req.PrevLogTerm, req.LeaderCommitIndex = 5, term, 5
		var resp raft.AppendEntriesResponse
		if err := from[0].AppendEntries("2", "2", req, &resp); err != nil || !resp.Success {
			t.Fatalf("%s: %v, %+v (it waited for the linger?)", what, err, resp)
		}
	}
	send("the first AppendEntries of a term", 3)
	send("an AppendEntries right after another", 3)

	tr := from[0]
	tr.appendsMu.Lock()
	last := tr.appends["2"]
	tr.appendsMu.Unlock()
	if last.term != 3 {
		t.Fatalf("last AppendEntries to 2 recorded with term %d, want 3", last.term)
	}
	gap := appendIdleGap * linger
	for _, tc := range []struct {
		what   string
		target raft.ServerAddress
		term   uint64
		now    time.Time
		want   bool
	}{
		{"an idle round", "2", 3, last.at.Add(gap), true},
		{"one just short of the idle gap", "2", 3, last.at.Add(gap - time.Nanosecond), false},
		{"the first of a new term", "2", 4, last.at.Add(gap), false},
		{"the first to a follower", "3", 3, last.at.Add(gap), false},
	} {
		if got := tr.appendLingers(tc.target, tc.term, tc.now); got != tc.want {
			t.Errorf("%s: lingers %v, want %v", tc.what, got, tc.want)
		}
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

// protoCall is a call of the heartbeat stream: a heartbeat of group with
// term, waited for timeout.
func protoCall(id uint64, group string, term uint64, timeout time.Duration) *raftv1.HeartbeatCall {
	c := &raftv1.HeartbeatCall{Id: id, TimeoutMicros: timeout.Microseconds()}
	heartbeatCallFromRequest(c, group, heartbeatReq(term))
	return c
}

// rawAnswer is an answer read from a raw heartbeat stream, and when.
type rawAnswer struct {
	a  *raftv1.HeartbeatAnswer
	at time.Time
}

// openRawStream opens a heartbeat stream on client and reads its answers
// into the returned channel until the stream ends.
func openRawStream(t *testing.T, ctx context.Context, client raftv1.RaftServiceClient) (raftv1.RaftService_HeartbeatStreamClient, chan rawAnswer) {
	t.Helper()
	s, err := client.HeartbeatStream(ctx)
	if err != nil {
		t.Fatalf("open heartbeat stream: %v", err)
	}
	answers := make(chan rawAnswer, 100)
	go func() {
		for {
			in, err := s.Recv()
			if err != nil {
				close(answers)
				return
			}
			for _, a := range in.GetAnswers() {
				answers <- rawAnswer{a, time.Now()}
			}
		}
	}()
	return s, answers
}

// collect reads answers until it holds one for each of ids, and returns
// them by id.
func collect(t *testing.T, answers chan rawAnswer, ids ...uint64) map[uint64]rawAnswer {
	t.Helper()
	got := make(map[uint64]rawAnswer)
	timeout := time.After(10 * time.Second)
	for len(got) < len(ids) {
		select {
		case a, ok := <-answers:
			if !ok {
				t.Fatalf("stream ended with answers to %d of %v", len(got), ids)
			}
			if _, dup := got[a.a.GetId()]; dup {
				t.Errorf("call %d answered twice", a.a.GetId())
			}
			got[a.a.GetId()] = a
		case <-timeout:
			t.Fatalf("answers to %d of calls %v within 10 s", len(got), ids)
		}
	}
	for _, id := range ids {
		if _, ok := got[id]; !ok {
			t.Errorf("no answer to call %d", id)
		}
	}
	return got
}

// TestHeartbeatStreamAnswers: on the heartbeat stream, calls for groups the
// peer does not serve (never opened, or closed) are answered "unknown group"
// at once without failing the others; an error raft answers with is that
// call's error; a call whose time is up on arrival is not answered by raft;
// a group without heartbeat handler is answered through its consumer
// channel. A heartbeat raft is slow to answer (a handler that blocks, or
// no handler and nobody consuming) holds back neither the others of its
// message nor the next message: they are answered before the slow ones,
// which are answered when raft answers or their timeout passes (checked by
// order, not by how fast). Through Transports, the
// unknown group comes back as ErrUnknownGroup and the known one succeeds.
func TestHeartbeatStreamAnswers(t *testing.T) {
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
	var releaseOnce sync.Once
	defer releaseOnce.Do(func() { close(release) })
	blocked.SetHeartbeatHandler(func(rpc raft.RPC) {
		<-release
		rpc.Respond(&raft.AppendEntriesResponse{Term: 77, Success: true}, nil)
	})

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, answers := openRawStream(t, ctx, rawClient(t, c, "2"))
	send := func(calls ...*raftv1.HeartbeatCall) time.Time {
		t.Helper()
		if err := s.Send(&raftv1.HeartbeatStreamRequest{Calls: calls}); err != nil {
			t.Fatalf("send: %v", err)
		}
		return time.Now()
	}
	kind := func(a rawAnswer) raftv1.HeartbeatErrorKind { return a.a.GetError().GetKind() }
	const (
		unknown     = raftv1.HeartbeatErrorKind_HEARTBEAT_ERROR_KIND_UNKNOWN_GROUP
		notAnswered = raftv1.HeartbeatErrorKind_HEARTBEAT_ERROR_KIND_NOT_ANSWERED
		raftErr     = raftv1.HeartbeatErrorKind_HEARTBEAT_ERROR_KIND_RAFT
	)

	// Known and unknown groups only: answered at once.
	sec := time.Second
	send(protoCall(1, "ok", 5, sec), protoCall(2, "nope", 5, sec), protoCall(3, "ok", 6, sec),
		protoCall(4, "closed", 5, sec), protoCall(5, "refuse", 5, sec), protoCall(6, "consumed", 5, sec),
		protoCall(7, "ok", 5, 0))
	got := collect(t, answers, 1, 2, 3, 4, 5, 6, 7)
	for id, term := range map[uint64]uint64{1: 5, 3: 6, 6: 42} {
		if a := got[id].a; a.GetError() != nil || a.GetTerm() != term || !a.GetSuccess() {
			t.Errorf("call %d: %v, want a response with term %d", id, a, term)
		}
	}
	for _, id := range []uint64{2, 4} {
		if k := kind(got[id]); k != unknown {
			t.Errorf("call %d: %v, want unknown group", id, got[id].a)
		}
	}
	if e := got[5].a.GetError(); e.GetKind() != raftErr || e.GetMessage() != "not now" {
		t.Errorf("call 5: %v, want raft error \"not now\"", got[5].a)
	}
	if k := kind(got[7]); k != notAnswered {
		t.Errorf("call 7, out of time on arrival: %v, want not answered", got[7].a)
	}
	// (Each was answered by raft or the Mux, not left to its timeout,
	// which call 7 shows would answer "not answered".)

	// Slow ones first: the others are answered before them, and so is the
	// next message; the deaf one at its timeout, the blocked one once
	// released. The order is what counts: the deaf timeout is long enough
	// that a loaded machine answers the others first.
	const deafTimeout = 5 * time.Second
	start := send(protoCall(10, "blocked", 5, 3*deafTimeout), protoCall(11, "deaf", 5, deafTimeout),
		protoCall(12, "ok", 7, sec), protoCall(13, "nope", 5, sec))
	send(protoCall(14, "ok", 8, sec))
	got = collect(t, answers, 12, 13, 14)
	if a := got[12].a; a.GetTerm() != 7 || a.GetError() != nil {
		t.Errorf("call 12, behind slow ones: %v, want a response with term 7", a)
	}
	if k := kind(got[13]); k != unknown {
		t.Errorf("call 13: %v, want unknown group", got[13].a)
	}
	if a := got[14].a; a.GetTerm() != 8 || a.GetError() != nil {
		t.Errorf("call 14, in the next message: %v, want a response with term 8", a)
	}
	fast := got
	got = collect(t, answers, 11)
	if k := kind(got[11]); k != notAnswered {
		t.Errorf("call 11 (deaf): %v, want not answered", got[11].a)
	}
	if took := got[11].at.Sub(start); took < deafTimeout-50*time.Millisecond {
		t.Errorf("call 11 (deaf) answered after %v, before its timeout %v", took, deafTimeout)
	}
	for _, id := range []uint64{12, 13, 14} {
		if !fast[id].at.Before(got[11].at) {
			t.Errorf("call %d answered %v after the deaf call timed out: held back by slow calls", id, fast[id].at.Sub(got[11].at))
		}
	}
	releaseOnce.Do(func() { close(release) })
	got = collect(t, answers, 10)
	if a := got[10].a; a.GetTerm() != 77 || a.GetError() != nil {
		t.Errorf("call 10 (blocked, then released): %v, want a response with term 77", a)
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
	t.Logf("2 heartbeats in %d messages", b.batchCalls.Load()-calls0)
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
// HeartbeatTimeout, not sooner and not at some longer deadline;
// Transport.Close fails a waiting heartbeat (with ErrTransportShutdown, not
// its deadline); after the peer is back, heartbeats succeed again. Mux.Close
// then fails a waiting heartbeat likewise and leaves no goroutine of the
// batcher behind.
func TestHeartbeatBlackhole(t *testing.T) {
	// The heartbeat timeout, far below the other calls' deadline: a
	// heartbeat that fails between the two failed by its own.
	const timeout = time.Second
	const rpcTimeout = time.Minute
	g := newGate()
	c := newCluster(t, 2, Config{HeartbeatTimeout: timeout, RPCTimeout: rpcTimeout, DialOptions: []grpc.DialOption{g.dialer()}})
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
		if took < timeout-time.Millisecond || took > rpcTimeout/2 {
			t.Errorf("%s: failed after %v, want after the heartbeat timeout %v (and well before %v)", what, took, timeout, rpcTimeout)
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
			// Left alone it would fail with its deadline instead.
			if !errors.Is(e.err, raft.ErrTransportShutdown) {
				t.Errorf("heartbeat after %s: %v, want ErrTransportShutdown", what, e.err)
			}
			if e.at.Before(closedAt) {
				t.Errorf("heartbeat released %v before %s", closedAt.Sub(e.at), what)
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
	eventually.Nil(t, 30*time.Second, "heartbeats to succeed after the peer is back", func() error {
		_, errs, _ := heartbeatAll(from[:7])
		return errors.Join(errs...)
	})

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
	waitNoGoroutines(t, "raftnet.(*hbBatcher)", "raftnet.(*hbJob)", "raftnet.(*Transport).viaBatcher", "raftnet.(*server).HeartbeatStream")
}

// waitNoGoroutines fails the test unless, within 30 s, no goroutine's
// stack holds any of the function names.
func waitNoGoroutines(t *testing.T, funcs ...string) {
	t.Helper()
	eventually.Nil(t, 30*time.Second, "no goroutine of "+strings.Join(funcs, ", "), func() error {
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
		if len(left) > 0 {
			return fmt.Errorf("%d goroutines left behind:\n%s", len(left), strings.Join(left, "\n\n"))
		}
		return nil
	})
}

// relay forwards the TCP connections made to its own loopback port to a
// target it can change, and can cut every connection it carries: a peer
// that restarts behind the same address, as the dialler sees it.
type relay struct {
	lis net.Listener

	mu     sync.Mutex
	target string
	conns  map[net.Conn]struct{}
}

func newRelay(t *testing.T, target string) *relay {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	r := &relay{lis: lis, target: target, conns: make(map[net.Conn]struct{})}
	go r.accept()
	t.Cleanup(func() {
		lis.Close()
		r.cut()
	})
	return r
}

func (r *relay) addr() string { return r.lis.Addr().String() }

func (r *relay) retarget(target string) {
	r.mu.Lock()
	r.target = target
	r.mu.Unlock()
}

func (r *relay) accept() {
	for {
		in, err := r.lis.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		target := r.target
		r.mu.Unlock()
		out, err := net.Dial("tcp", target)
		if err != nil {
			in.Close()
			continue
		}
		r.mu.Lock()
		r.conns[in], r.conns[out] = struct{}{}, struct{}{}
		r.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			dst.Close()
			src.Close()
			r.mu.Lock()
			delete(r.conns, dst)
			delete(r.conns, src)
			r.mu.Unlock()
		}
		go pipe(out, in)
		go pipe(in, out)
	}
}

// cut closes every connection the relay carries.
func (r *relay) cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for c := range r.conns {
		c.Close()
	}
}

// TestHeartbeatPeerRestart: the peer's process restarts behind the same
// address (its connections break, a new server answers there): heartbeats
// fail for a moment, then flow again on a new stream, with no resolver
// change.
func TestHeartbeatPeerRestart(t *testing.T) {
	c := newCluster(t, 2, Config{HeartbeatTimeout: 300 * time.Millisecond})
	peer := c.brokers[1]
	target, err := c.peers.resolve("2")
	if err != nil {
		t.Fatal(err)
	}
	r := newRelay(t, target)
	c.peers.set("2", r.addr())
	from, _ := openPairs(t, c.brokers[0], peer, "rs", 4)
	if _, errs, _ := heartbeatAll(from); errors.Join(errs...) != nil {
		t.Fatalf("heartbeats before the restart: %v", errors.Join(errs...))
	}
	if n := peer.streams.Load(); n != 1 {
		t.Fatalf("%d heartbeat streams before the restart, want 1", n)
	}

	old := peer.srv
	r.retarget(peer.serve(t))
	old.Stop()
	r.cut()
	start := time.Now()
	failed := false
	eventually.Nil(t, 30*time.Second, "heartbeats to succeed after the restart", func() error {
		_, errs, _ := heartbeatAll(from)
		err := errors.Join(errs...)
		failed = failed || err != nil
		return err
	})
	t.Logf("heartbeats back %v after the restart (failed meanwhile: %v)", time.Since(start).Round(time.Millisecond), failed)
	if n := peer.streams.Load(); n < 2 {
		t.Errorf("%d heartbeat streams, want a new one after the restart", n)
	}
	if n := c.brokers[0].mux.connCount(); n != 1 {
		t.Errorf("%d connections to the restarted peer, want 1", n)
	}
}

// TestHeartbeatGracefulStop: a peer's graceful stop, which waits for the
// streams served, does not wait for the heartbeat streams of its callers;
// heartbeats to it then wait for it up to their deadline (see waitForPeer)
// and fail.
func TestHeartbeatGracefulStop(t *testing.T) {
	const timeout = time.Second
	c := newCluster(t, 2, Config{HeartbeatTimeout: timeout})
	from, _ := openPairs(t, c.brokers[0], c.brokers[1], "gs", 3)
	if _, errs, _ := heartbeatAll(from); errors.Join(errs...) != nil {
		t.Fatalf("heartbeats: %v", errors.Join(errs...))
	}
	stopped := make(chan struct{})
	start := time.Now()
	go func() {
		c.brokers[1].srv.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
		t.Logf("graceful stop took %v", time.Since(start).Round(time.Millisecond))
	case <-time.After(3 * time.Second):
		t.Fatal("the peer's graceful stop still waits 3 s later")
	}
	start = time.Now()
	_, errs, _ := heartbeatAll(from)
	for i, err := range errs {
		if err == nil {
			t.Errorf("heartbeat %d to a stopped peer succeeded", i)
		}
	}
	if took := time.Since(start); took < timeout-100*time.Millisecond || took > 3*timeout {
		t.Errorf("heartbeats to a stopped peer failed after %v, want about %v (waiting for it)", took, timeout)
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

// fakePeer serves a heartbeat stream that records each message and
// answers it with handle (default answerAll), which is set before serving.
type fakePeer struct {
	raftv1.UnimplementedRaftServiceServer
	handle  func(raftv1.RaftService_HeartbeatStreamServer, *raftv1.HeartbeatStreamRequest) error
	msgs    chan fakeMsg
	streams atomic.Int32
}

type fakeMsg struct {
	at     time.Time
	stream int32
	groups []string
}

func (f *fakePeer) HeartbeatStream(s raftv1.RaftService_HeartbeatStreamServer) error {
	n := f.streams.Add(1)
	for {
		in, err := s.Recv()
		if err != nil {
			return nil
		}
		m := fakeMsg{at: time.Now(), stream: n}
		for _, c := range in.GetCalls() {
			m.groups = append(m.groups, c.GetGroup())
		}
		f.msgs <- m
		handle := f.handle
		if handle == nil {
			handle = answerAll
		}
		if err := handle(s, in); err != nil {
			return err
		}
	}
}

// answerAll answers every call of in with success and the call's term.
func answerAll(s raftv1.RaftService_HeartbeatStreamServer, in *raftv1.HeartbeatStreamRequest) error {
	out := &raftv1.HeartbeatStreamResponse{}
	for _, c := range in.GetCalls() {
		out.Answers = append(out.Answers, &raftv1.HeartbeatAnswer{Id: c.GetId(), Term: c.GetTerm(), Success: true})
	}
	return s.Send(out)
}

// listenFake serves f on a loopback port and returns its address and the
// server.
func listenFake(t *testing.T, f *fakePeer) (string, *grpc.Server) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	raftv1.RegisterRaftServiceServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), srv
}

// dialFake returns a connection to target that reconnects as the Mux's do.
func dialFake(t *testing.T, target string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{
			BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second,
		}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// serveFake serves f on a loopback port and returns a connection to it and
// the server.
func serveFake(t *testing.T, f *fakePeer) (*grpc.ClientConn, *grpc.Server) {
	t.Helper()
	addr, srv := listenFake(t, f)
	return dialFake(t, addr), srv
}

// TestHBBatcher drives the batcher against a fake peer over an in-memory
// stream, in a testing/synctest bubble: time is the bubble's clock, so each
// check says when a batch leaves exactly, as a consequence of what (its
// linger, a nudge, an answer). A batch leaves linger after its first call,
// with everything queued since, and each caller gets its own answer,
// whatever the order and grouping of the answers; without linger a call
// leaves at once; a full batch leaves at once; calls whose caller gave up
// are left out; a nudge sends a batch that has waited half its linger; a
// stream that breaks fails its unanswered calls at once, and the next batch
// opens a new one; close fails what is queued or awaits an answer and ends
// the batcher's goroutines (the bubble would otherwise not end).
// TestHBBatcherPeerDownAndBack does, over the network, what needs gRPC's
// connection handling.
func TestHBBatcher(t *testing.T) {
	const linger = 30 * time.Millisecond
	// bubble runs f in a synctest bubble with a batcher of linger whose
	// peer answers with handle (default answerAll), and closes the batcher
	// at the end.
	bubble := func(t *testing.T, linger time.Duration, handle func(raftv1.RaftService_HeartbeatStreamServer, *raftv1.HeartbeatStreamRequest) error, f func(t *testing.T, f *fakePeer, b *hbBatcher)) {
		synctest.Test(t, func(t *testing.T) {
			peer := &fakePeer{handle: handle, msgs: make(chan fakeMsg, 16)}
			b := newHBBatcher(memClient{srv: peer}, nil, linger, nil)
			defer b.close()
			f(t, peer, b)
		})
	}
	// at checks that a message left exactly when its cause came.
	at := func(t *testing.T, what string, got, want time.Time) {
		t.Helper()
		if !got.Equal(want) {
			t.Errorf("%s left at %v, want %v", what, got.Sub(want), time.Duration(0))
		}
	}

	t.Run("linger", func(t *testing.T) {
		bubble(t, linger, nil, func(t *testing.T, f *fakePeer, b *hbBatcher) {
			first := time.Now()
			a := newHBCall("a", 1, time.Second)
			if err := b.enqueue(a, true); err != nil {
				t.Fatal(err)
			}
			time.Sleep(linger / 3)
			c := newHBCall("c", 2, time.Second)
			_ = b.enqueue(c, true)
			m := nextFakeMsg(t, f)
			at(t, "batch", m.at, first.Add(linger))
			if len(m.groups) != 2 {
				t.Errorf("message carried %v, want a and c", m.groups)
			}
			hbAnswered(t, a, 1)
			hbAnswered(t, c, 2)
			// The next batch: linger after its first call, on the same stream.
			first = time.Now()
			d := newHBCall("d", 3, time.Second)
			_ = b.enqueue(d, true)
			m = nextFakeMsg(t, f)
			at(t, "second batch", m.at, first.Add(linger))
			hbAnswered(t, d, 3)
			if m.stream != 1 {
				t.Errorf("second batch on stream %d, want the first one", m.stream)
			}
		})
	})

	t.Run("no linger", func(t *testing.T) {
		// Made in the bubble (see below): a goroutine waiting on a channel
		// from outside would keep the bubble's clock from moving.
		var hold chan struct{}
		bubble(t, 0, func(s raftv1.RaftService_HeartbeatStreamServer, in *raftv1.HeartbeatStreamRequest) error {
			if in.GetCalls()[0].GetGroup() == "held" {
				<-hold
			}
			return answerAll(s, in)
		}, func(t *testing.T, f *fakePeer, b *hbBatcher) {
			hold = make(chan struct{})
			start := time.Now()
			a := newHBCall("a", 1, time.Second)
			_ = b.enqueue(a, true)
			at(t, "call to an idle peer", nextFakeMsg(t, f).at, start)
			hbAnswered(t, a, 1)
			// While a call awaits its answer, the next ones wait for it.
			held := newHBCall("held", 2, 5*time.Second)
			_ = b.enqueue(held, true)
			nextFakeMsg(t, f)
			p, q := newHBCall("p", 3, 5*time.Second), newHBCall("q", 4, 5*time.Second)
			_ = b.enqueue(p, true)
			_ = b.enqueue(q, true)
			noFakeMsg(t, f, time.Second)
			released := time.Now()
			close(hold)
			m := nextFakeMsg(t, f)
			at(t, "calls queued behind an unanswered one", m.at, released)
			if len(m.groups) != 2 {
				t.Errorf("message carried %v, want p and q", m.groups)
			}
			hbAnswered(t, held, 2)
			hbAnswered(t, p, 3)
			hbAnswered(t, q, 4)
		})
	})

	t.Run("full batch", func(t *testing.T) {
		bubble(t, time.Hour, nil, func(t *testing.T, f *fakePeer, b *hbBatcher) {
			start := time.Now()
			calls := make([]*hbCall, maxHeartbeatBatch)
			for i := range calls {
				calls[i] = newHBCall(fmt.Sprint(i), uint64(i+1), 5*time.Second)
				_ = b.enqueue(calls[i], true)
			}
			m := nextFakeMsg(t, f)
			at(t, "full batch", m.at, start) // linger: an hour
			if len(m.groups) != maxHeartbeatBatch {
				t.Errorf("full batch carried %d calls", len(m.groups))
			}
			for i, c := range calls {
				hbAnswered(t, c, uint64(i+1))
			}
		})
	})

	t.Run("answers by id", func(t *testing.T) {
		// One answer per message, last call first.
		bubble(t, linger, func(s raftv1.RaftService_HeartbeatStreamServer, in *raftv1.HeartbeatStreamRequest) error {
			calls := in.GetCalls()
			for i := len(calls) - 1; i >= 0; i-- {
				c := calls[i]
				if err := s.Send(&raftv1.HeartbeatStreamResponse{Answers: []*raftv1.HeartbeatAnswer{{Id: c.GetId(), Term: c.GetTerm() * 10}}}); err != nil {
					return err
				}
			}
			return nil
		}, func(t *testing.T, f *fakePeer, b *hbBatcher) {
			var calls []*hbCall
			for i := range 5 {
				calls = append(calls, newHBCall(fmt.Sprint(i), uint64(i+1), time.Second))
				_ = b.enqueue(calls[i], true)
			}
			nextFakeMsg(t, f)
			for i, c := range calls {
				hbAnswered(t, c, uint64(i+1)*10)
			}
		})
	})

	t.Run("callers gone", func(t *testing.T) {
		bubble(t, linger, nil, func(t *testing.T, f *fakePeer, b *hbBatcher) {
			gone := make(chan struct{})
			close(gone)
			left := newHBCall("left", 1, time.Second)
			left.gone = gone
			_ = b.enqueue(left, true)
			// Its deadline passes before the batch leaves.
			_ = b.enqueue(newHBCall("late", 1, linger/2), true)
			stay := newHBCall("stay", 1, time.Second)
			_ = b.enqueue(stay, true)
			m := nextFakeMsg(t, f)
			if len(m.groups) != 1 || m.groups[0] != "stay" {
				t.Errorf("message carried %v, want only stay", m.groups)
			}
			hbAnswered(t, stay, 1)
			// Nobody waits for the others: they get no answer.
			select {
			case r := <-left.done:
				t.Errorf("left got %+v", r)
			default:
			}
			// All gone: no message at all.
			_ = b.enqueue(left, true)
			noFakeMsg(t, f, 10*linger)
		})
	})

	t.Run("nudge", func(t *testing.T) {
		const long = 2 * time.Second
		bubble(t, long, nil, func(t *testing.T, f *fakePeer, b *hbBatcher) {
			first := time.Now()
			a := newHBCall("a", 1, 2*long)
			_ = b.enqueue(a, true)
			time.Sleep(long/2 - time.Nanosecond)
			b.nudge(time.Now()) // not half its linger yet: stays
			noFakeMsg(t, f, time.Nanosecond)
			nudged := time.Now()
			b.nudge(nudged)
			m := nextFakeMsg(t, f)
			at(t, "nudged batch", m.at, nudged)
			if !m.at.Before(first.Add(long)) {
				t.Errorf("nudged batch left with its linger")
			}
			hbAnswered(t, a, 1)
		})
	})

	t.Run("stream broken mid-batch", func(t *testing.T) {
		bubble(t, linger, func(s raftv1.RaftService_HeartbeatStreamServer, in *raftv1.HeartbeatStreamRequest) error {
			for _, c := range in.GetCalls() {
				if c.GetGroup() == "break" {
					return status.Error(codes.Unavailable, "boom")
				}
			}
			return answerAll(s, in)
		}, func(t *testing.T, f *fakePeer, b *hbBatcher) {
			x := newHBCall("x", 1, 5*time.Second)
			brk := newHBCall("break", 1, 5*time.Second)
			_ = b.enqueue(x, true)
			_ = b.enqueue(brk, true)
			sent := nextFakeMsg(t, f).at
			for _, c := range []*hbCall{x, brk} {
				r := hbResultOf(t, c)
				if status.Code(r.err) != codes.Unavailable || !strings.Contains(r.err.Error(), "boom") {
					t.Errorf("%s on a broken stream: %+v, want the stream's error", c.msg.GetGroup(), r)
				}
			}
			if took := time.Since(sent); took != 0 {
				t.Errorf("calls of a broken stream failed %v after it broke, want at once", took)
			}
			y := newHBCall("y", 2, time.Second)
			_ = b.enqueue(y, true)
			if m := nextFakeMsg(t, f); m.stream != 2 {
				t.Errorf("batch after the break on stream %d, want a new one (2)", m.stream)
			}
			hbAnswered(t, y, 2)
		})
	})

	t.Run("close", func(t *testing.T) {
		bubble(t, time.Hour, func(s raftv1.RaftService_HeartbeatStreamServer, _ *raftv1.HeartbeatStreamRequest) error {
			<-s.Context().Done() // never answers
			return nil
		}, func(t *testing.T, f *fakePeer, b *hbBatcher) {
			sent := newHBCall("sent", 1, 10*time.Second)
			_ = b.enqueue(sent, true)
			b.nudge(time.Now().Add(time.Hour)) // an hour later: sent now
			nextFakeMsg(t, f)
			q := newHBCall("q", 1, 10*time.Second)
			_ = b.enqueue(q, true)
			b.close()
			b.close()
			for _, c := range []*hbCall{sent, q} {
				if r := hbResultOf(t, c); !errors.Is(r.err, errBatcherClosed) {
					t.Errorf("%s at close: %v, want errBatcherClosed", c.msg.GetGroup(), r.err)
				}
			}
			if err := b.enqueue(newHBCall("after", 1, time.Second), true); !errors.Is(err, errBatcherClosed) {
				t.Errorf("enqueue after close: %v", err)
			}
		})
	})
}

// newHBCall is a heartbeat call of group, with term, that its caller waits
// for up to timeout.
func newHBCall(group string, term uint64, timeout time.Duration) *hbCall {
	c := &hbCall{deadline: time.Now().Add(timeout), done: make(chan hbResult, 1)}
	heartbeatCallFromRequest(&c.msg, group, heartbeatReq(term))
	return c
}

// hbResultOf waits for c's result (up to 5 s, of the bubble's clock inside
// one).
func hbResultOf(t *testing.T, c *hbCall) hbResult {
	t.Helper()
	select {
	case r := <-c.done:
		return r
	case <-time.After(5 * time.Second):
		t.Fatalf("no answer for %s", c.msg.GetGroup())
		return hbResult{}
	}
}

// hbAnswered checks that c was answered with term.
func hbAnswered(t *testing.T, c *hbCall, term uint64) {
	t.Helper()
	if r := hbResultOf(t, c); r.err != nil || r.answer.GetTerm() != term {
		t.Errorf("%s: %+v, want an answer with term %d", c.msg.GetGroup(), r, term)
	}
}

// nextFakeMsg waits for f's next message (up to 5 s).
func nextFakeMsg(t *testing.T, f *fakePeer) fakeMsg {
	t.Helper()
	select {
	case m := <-f.msgs:
		return m
	case <-time.After(5 * time.Second):
		t.Fatal("no message")
		return fakeMsg{}
	}
}

// noFakeMsg checks that f gets no message within d.
func noFakeMsg(t *testing.T, f *fakePeer, d time.Duration) {
	t.Helper()
	select {
	case m := <-f.msgs:
		t.Fatalf("unexpected message with %v", m.groups)
	case <-time.After(d):
	}
}

// TestHBBatcherPeerDownAndBack: over the network, behind a relay, the peer
// goes away with its connections and another answers behind the same
// address: the call awaiting an answer fails at once, a call while the
// peer is down waits for it up to its deadline, and one is answered if the
// peer comes back in time.
func TestHBBatcherPeerDownAndBack(t *testing.T) {
	const linger = 30 * time.Millisecond
	// The peer behind a relay: it goes away with its connections,
	// then another one answers behind the same address.
	hang := func(s raftv1.RaftService_HeartbeatStreamServer, in *raftv1.HeartbeatStreamRequest) error {
		if in.GetCalls()[0].GetGroup() == "hang" {
			<-s.Context().Done() // never answers
			return nil
		}
		return answerAll(s, in)
	}
	f := &fakePeer{msgs: make(chan fakeMsg, 16), handle: hang}
	addr, srv := listenFake(t, f)
	r := newRelay(t, addr)
	cc := dialFake(t, r.addr())
	b := newHBBatcher(raftv1.NewRaftServiceClient(cc), cc, linger, nil)
	defer b.close()
	const long = time.Minute
	a := newHBCall("hang", 1, long)
	_ = b.enqueue(a, true)
	nextFakeMsg(t, f)

	// The peer goes: the call awaiting its answer fails at once, not at
	// its deadline.
	start := time.Now()
	srv.Stop()
	r.cut()
	if r := hbResultOf(t, a); r.err == nil {
		t.Error("a call awaiting a peer that went away succeeded")
	}
	if took := time.Since(start); took > long/2 {
		t.Errorf("a call awaiting a peer that went away failed after %v, as if at its deadline", took)
	}

	// While it is down, a call waits for it up to its deadline.
	const short = 300 * time.Millisecond
	c := newHBCall("c", 1, short)
	start = time.Now()
	_ = b.enqueue(c, true)
	if r := hbResultOf(t, c); status.Code(r.err) != codes.DeadlineExceeded {
		t.Errorf("a call to a peer that is down: %v, want deadline exceeded", r.err)
	}
	if took := time.Since(start); took < short-time.Millisecond {
		t.Errorf("a call to a peer that is down failed after %v, before its deadline %v", took, short)
	}

	// The peer comes back within a call's deadline: answered.
	d := newHBCall("d", 2, long)
	_ = b.enqueue(d, true)
	time.Sleep(100 * time.Millisecond)
	back := &fakePeer{msgs: make(chan fakeMsg, 16)}
	addr, _ = listenFake(t, back)
	r.retarget(addr)
	hbAnswered(t, d, 2)
	if n := back.streams.Load(); n != 1 {
		t.Errorf("%d streams to the peer that came back, want 1", n)
	}
}
