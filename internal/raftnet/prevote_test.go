package raftnet

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tapes-dev/tapes/internal/eventually"
	raftv1 "github.com/tapes-dev/tapes/internal/gen/tapes/raft/v1"
)

// steadyTiming is slow enough that a healthy group on a loaded machine
// keeps its leader: every leader change in these tests has a cause.
var steadyTiming = timing{
	heartbeat: time.Second,
	election:  time.Second,
	lease:     500 * time.Millisecond,
	commit:    50 * time.Millisecond,
}

// split holds the connections of chosen brokers, both ways: a connection
// between brokers a and b reads and writes only while neither is cut off
// (what its peers see of a broker that is paused, or partitioned away).
// What was written meanwhile arrives once both are back, as after SIGCONT.
type split struct {
	peers *peerTable
	gates map[raft.ServerAddress]*gate
}

func newSplit(n int) *split {
	s := &split{gates: make(map[raft.ServerAddress]*gate)}
	for i := 1; i <= n; i++ {
		s.gates[raft.ServerAddress(strconv.Itoa(i))] = newGate()
	}
	return s
}

func (s *split) cut(id raft.ServerID)  { s.gates[raft.ServerAddress(id)].pause() }
func (s *split) heal(id raft.ServerID) { s.gates[raft.ServerAddress(id)].heal() }

// configure adds to a broker's Config the dialer that gates its
// connections. s.peers must be set before the first RPC.
func (s *split) configure(cfg *Config) {
	local := s.gates[raft.ServerAddress(cfg.LocalID)]
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		remote := s.gates[s.peers.idOf(addr)]
		return &splitConn{Conn: conn, ends: [2]*gate{local, remote}, closed: make(chan struct{})}, nil
	}))
}

// splitConn is a connection between two brokers: it waits on the gate of
// each end before every read and write.
type splitConn struct {
	net.Conn
	ends   [2]*gate
	closed chan struct{}
	once   atomic.Bool
}

func (c *splitConn) wait() error {
	for _, g := range c.ends {
		if g == nil {
			continue
		}
		if err := g.wait(c.closed); err != nil {
			return err
		}
	}
	return nil
}

func (c *splitConn) Write(p []byte) (int, error) {
	if err := c.wait(); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

func (c *splitConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if werr := c.wait(); werr != nil {
		return 0, werr
	}
	return n, err
}

func (c *splitConn) Close() error {
	if c.once.CompareAndSwap(false, true) {
		close(c.closed)
	}
	return c.Conn.Close()
}

// voteCounter counts the vote requests (RequestPreVote and RequestVote)
// each broker sends, as its gRPC client starts them.
type voteCounter struct {
	sent map[raft.ServerID]*atomic.Int64
}

func newVoteCounter(n int) *voteCounter {
	v := &voteCounter{sent: make(map[raft.ServerID]*atomic.Int64)}
	for i := 1; i <= n; i++ {
		v.sent[raft.ServerID(strconv.Itoa(i))] = &atomic.Int64{}
	}
	return v
}

func (v *voteCounter) configure(cfg *Config) {
	n := v.sent[cfg.LocalID]
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if method == raftv1.RaftService_RequestPreVote_FullMethodName || method == raftv1.RaftService_RequestVote_FullMethodName {
				n.Add(1)
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}))
}

// TestPreVoteResumedFollower: a follower cut off from its group for several
// of its election timeouts (it stands for election over and over, unheard)
// and then reconnected neither raises the group's term nor deposes its
// leader, and catches up. With pre-vote disabled, the same follower
// deposes the leader: what the transport's RequestPreVote prevents.
func TestPreVoteResumedFollower(t *testing.T) {
	for _, tc := range []struct {
		name     string
		disabled bool
	}{
		{"pre-vote", false},
		{"pre-vote disabled", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := newSplit(3)
			votes := newVoteCounter(3)
			c := newCluster(t, 3, Config{}, sp.configure, votes.configure)
			sp.peers = c.peers
			g := c.startGroup("pv", steadyTiming, func(conf *raft.Config) { conf.PreVoteDisabled = tc.disabled }, nil)
			g.apply(t, "before", 10, 30*time.Second)
			leader := g.leader(t, 30*time.Second)
			term := leader.raft.CurrentTerm()
			away := g.others(leader)[0]
			converge(t, g.members, 10, 30*time.Second)

			sp.cut(away.b.id)
			// Two rounds of vote requests to both peers: the follower
			// timed out and stood twice, its election timeout passed.
			sent := votes.sent[away.b.id]
			base := sent.Load()
			eventually.True(t, 60*time.Second, "the cut-off follower to stand for election twice", func() bool {
				return sent.Load()-base >= 4
			})
			g.apply(t, "away", 5, 30*time.Second)
			sp.heal(away.b.id)

			if tc.disabled {
				eventually.True(t, 60*time.Second, "the reconnected follower to depose the leader", func() bool {
					return leader.raft.CurrentTerm() > term
				})
				return
			}
			eventually.True(t, 60*time.Second, "the reconnected follower to follow a leader", func() bool {
				addr, _ := away.raft.LeaderWithID()
				return away.raft.State() == raft.Follower && addr != ""
			})
			if addr, _ := away.raft.LeaderWithID(); addr != leader.tr.LocalAddr() {
				t.Fatalf("the reconnected follower follows %s, want the leader of before, %s (term %d, was %d)", addr, leader.b.id, away.raft.CurrentTerm(), term)
			}
			g.apply(t, "after", 5, 30*time.Second)
			converge(t, g.members, 20, 30*time.Second)
			if leader.raft.State() != raft.Leader {
				t.Errorf("leader on %s is %v after the follower came back", leader.b.id, leader.raft.State())
			}
			for _, m := range g.members {
				if got := m.raft.CurrentTerm(); got != term {
					t.Errorf("broker %s: term %d after the follower came back, want %d (unchanged)", m.b.id, got, term)
				}
			}
		})
	}
}

// TestPreVoteUnsupportedPeer: peers whose RaftService lacks RequestPreVote
// (brokers from before it) answer codes.Unimplemented; the Transport
// reports ErrPreVoteUnsupported, which hashicorp/raft counts as a granted
// pre-vote, so a group of such peers still elects a leader. (Counted as a
// refusal, no pre-vote could ever reach a majority.)
func TestPreVoteUnsupportedPeer(t *testing.T) {
	c := newCluster(t, 3, Config{})
	for _, b := range c.brokers {
		b.noPreVote.Store(true)
	}
	g := c.startGroup("old", fastTiming, nil, nil)
	g.apply(t, "x", 5, 60*time.Second)
	converge(t, g.members, 5, 30*time.Second)

	tr, err := c.brokers[0].mux.Group("direct")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.brokers[1].mux.Group("direct"); err != nil {
		t.Fatal(err)
	}
	err = tr.RequestPreVote("2", "2", &raft.RequestPreVoteRequest{Term: 1}, &raft.RequestPreVoteResponse{})
	if !errors.Is(err, ErrPreVoteUnsupported) || !strings.Contains(err.Error(), "unexpected command") {
		t.Fatalf("pre-vote to a peer without the method: %v, want ErrPreVoteUnsupported (\"unexpected command\")", err)
	}
}

// TestTransfersSkipPreVote: with pre-vote on, a TimeoutNow (TriggerElection,
// the broker's takeover of a dead leader's groups, and raft's own
// leadership transfer) still makes its target leader of a healthy group,
// although its peers have a leader and would refuse it a pre-vote: raft
// runs no pre-vote for a transfer, and its RequestVote carries the
// transfer flag.
func TestTransfersSkipPreVote(t *testing.T) {
	c := newCluster(t, 3, Config{})
	g := c.startGroup("tr", steadyTiming, nil, nil)
	g.apply(t, "before", 5, 30*time.Second)
	leader := g.leader(t, 30*time.Second)
	converge(t, g.members, 5, 30*time.Second)
	followers := g.others(leader)

	term := leader.raft.CurrentTerm()
	next := followers[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := next.tr.TriggerElection(ctx, raft.ServerID(leader.b.id)); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 60*time.Second, "the triggered follower to lead", func() bool {
		return next.raft.State() == raft.Leader
	})
	if got := next.raft.CurrentTerm(); got <= term {
		t.Errorf("triggered leader at term %d, want above %d", got, term)
	}

	last := followers[1]
	if err := next.raft.LeadershipTransferToServer(raft.ServerID(last.b.id), raft.ServerAddress(last.b.id)).Error(); err != nil {
		t.Fatalf("leadership transfer to %s: %v", last.b.id, err)
	}
	eventually.True(t, 60*time.Second, "the transfer target to lead", func() bool {
		return last.raft.State() == raft.Leader
	})
	g.apply(t, "after", 5, 30*time.Second)
	converge(t, g.members, 10, 30*time.Second)
}

// TestVotesFailFastForDownPeer: RequestPreVote and RequestVote to a peer
// whose port refuses connections fail without waiting for their deadline
// (a candidate asks every peer at once; replication calls, by contrast,
// wait for the peer).
func TestVotesFailFastForDownPeer(t *testing.T) {
	const deadline = 30 * time.Second
	c := newCluster(t, 2, Config{RPCTimeout: deadline})
	tr, err := c.brokers[0].mux.Group("down")
	if err != nil {
		t.Fatal(err)
	}
	// Answered first (the peer does not serve the group), so that the
	// connection exists and then breaks.
	if err := tr.RequestPreVote("2", "2", &raft.RequestPreVoteRequest{Term: 1}, &raft.RequestPreVoteResponse{}); !errors.Is(err, ErrUnknownGroup) {
		t.Fatalf("pre-vote to a live peer without the group: %v, want ErrUnknownGroup", err)
	}
	c.brokers[1].srv.Stop()

	for what, call := range map[string]func() error{
		"RequestPreVote": func() error {
			return tr.RequestPreVote("2", "2", &raft.RequestPreVoteRequest{Term: 1}, &raft.RequestPreVoteResponse{})
		},
		"RequestVote": func() error {
			return tr.RequestVote("2", "2", &raft.RequestVoteRequest{Term: 1}, &raft.RequestVoteResponse{})
		},
	} {
		start := time.Now()
		err := call()
		if took := time.Since(start); took >= deadline/2 {
			t.Errorf("%s to a down peer took %v: it waited for the peer", what, took)
		}
		if status.Code(err) != codes.Unavailable {
			t.Errorf("%s to a down peer: %v, want Unavailable", what, err)
		}
	}
}
