package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/metadata"
	"github.com/tapes-dev/tapes/internal/replication"
)

// controllerID returns the controller quorum's leader, or -1.
func (b *Broker) controllerID() metadata.BrokerID {
	_, id := b.ctrlRaft.LeaderWithID()
	if id == "" {
		return -1
	}
	return replication.BrokerOf(id)
}

// metadataStale says why this broker's copy of the metadata cannot be
// trusted ("" when it can): it is not the controller and has not heard
// from the controller's leader within the broker session timeout (or ever).
func (b *Broker) metadataStale() string {
	if b.ctrlRaft.State() == raft.Leader {
		return ""
	}
	last := b.ctrlRaft.LastContact()
	switch {
	case last.IsZero():
		return "has not heard from the controller quorum yet"
	case time.Since(last) > b.cfg.SessionTimeout:
		return fmt.Sprintf("has not heard from the controller quorum for %v", time.Since(last).Round(time.Millisecond))
	}
	return ""
}

// propose applies a controller command: locally when this broker leads the
// controller quorum, otherwise forwarded to the leader. It retries while
// the quorum has no leader or the leader moves, until ctx ends.
//
// Every proposal carries a fresh request id, so that a retry of a command
// whose first attempt committed but whose answer was lost (a forward that
// timed out, leadership lost mid-apply) gets the first result instead of
// being applied twice: a retried delete answers success, not
// UNKNOWN_TOPIC_OR_PARTITION.
func (b *Broker) propose(ctx context.Context, cmd *metadata.Command) (*metadata.Result, error) {
	if cmd.RequestID == "" {
		cmd.RequestID = b.newRequestID()
	}
	data := cmd.Encode()
	backoff := 50 * time.Millisecond
	for {
		res, err := b.proposeOnce(ctx, data)
		if err == nil {
			return res, nil
		}
		if !retriableProposeErr(err) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, kerr.New(kerr.RequestTimedOut, "controller command %s: %v (last error: %v)", cmd.Op, ctx.Err(), err)
		case <-b.stop:
			return nil, kerr.New(kerr.NotController, "broker shutting down")
		case <-time.After(backoff):
		}
		if backoff < 500*time.Millisecond {
			backoff *= 2
		}
	}
}

// newRequestID returns an id no other proposal of this cluster uses: the
// broker id, the time this process started and a counter.
func (b *Broker) newRequestID() string {
	return fmt.Sprintf("%d-%d-%d", b.cfg.ID, b.startedAt.UnixNano(), b.requestSeq.Add(1))
}

func retriableProposeErr(err error) bool {
	if c := kerr.CodeOf(err); c != "" {
		return c.Retriable()
	}
	return true // transport errors while forwarding
}

func (b *Broker) proposeOnce(ctx context.Context, data []byte) (*metadata.Result, error) {
	if b.ctrlRaft.State() == raft.Leader {
		return b.applyLocal(ctx, data)
	}
	leader := b.controllerID()
	if leader < 0 && len(b.cfg.Join) > 0 && b.ctrlRaft.LastContact().IsZero() {
		// Not in the quorum yet (or not heard from its leader since
		// this start): the --join brokers know the leader.
		var err error
		if leader, err = b.joinController(ctx); err != nil {
			return nil, err
		}
	}
	if leader < 0 {
		return nil, kerr.New(kerr.NotController, "the controller quorum has no leader")
	}
	conn, err := b.peerConn(leader)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := tapesv1.NewControllerServiceClient(conn).Propose(cctx, &tapesv1.ProposeRequest{Command: data})
	if err != nil {
		return nil, kerr.FromStatus(err)
	}
	var res metadata.Result
	if err := json.Unmarshal(resp.Result, &res); err != nil {
		return nil, fmt.Errorf("decode controller result: %w", err)
	}
	return &res, nil
}

// applyLocal applies on this broker, the controller leader.
func (b *Broker) applyLocal(ctx context.Context, data []byte) (*metadata.Result, error) {
	f := b.ctrlRaft.Apply(data, 5*time.Second)
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		if err != nil {
			if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
				return nil, kerr.New(kerr.NotController, "controller leadership moved: %v", err)
			}
			return nil, kerr.New(kerr.RequestTimedOut, "controller apply: %v", err)
		}
	case <-ctx.Done():
		return nil, kerr.New(kerr.RequestTimedOut, "controller apply: %v", ctx.Err())
	}
	res, ok := f.Response().(*metadata.Result)
	if !ok {
		return nil, fmt.Errorf("controller apply returned %T", f.Response())
	}
	return res, nil
}

// controllerAPI serves ControllerService.
type controllerAPI struct {
	tapesv1.UnimplementedControllerServiceServer
	b *Broker
}

func (c *controllerAPI) Propose(ctx context.Context, req *tapesv1.ProposeRequest) (*tapesv1.ProposeResponse, error) {
	if c.b.ctrlRaft.State() != raft.Leader {
		return nil, kerr.ToStatus(kerr.New(kerr.NotController, "broker %d is not the controller (leader: %d)", c.b.cfg.ID, c.b.controllerID()))
	}
	res, err := c.b.applyLocal(ctx, req.Command)
	if err != nil {
		return nil, kerr.ToStatus(err)
	}
	out, err := json.Marshal(res)
	if err != nil {
		return nil, kerr.ToStatus(err)
	}
	return &tapesv1.ProposeResponse{Result: out}, nil
}

func (c *controllerAPI) BrokerHeartbeat(ctx context.Context, req *tapesv1.BrokerHeartbeatRequest) (*tapesv1.BrokerHeartbeatResponse, error) {
	c.b.mu.Lock()
	c.b.lastSeen[metadata.BrokerID(req.BrokerId)] = time.Now()
	c.b.mu.Unlock()
	return &tapesv1.BrokerHeartbeatResponse{}, nil
}

func (c *controllerAPI) DescribeReplicas(ctx context.Context, req *tapesv1.DescribeReplicasRequest) (*tapesv1.DescribeReplicasResponse, error) {
	want := map[string]bool{}
	for _, t := range req.Topics {
		want[t] = true
	}
	out := &tapesv1.DescribeReplicasResponse{BrokerId: int32(c.b.cfg.ID)}
	for _, r := range c.b.replicaList() {
		cfg := r.Config()
		if len(want) > 0 && !want[cfg.Topic] {
			continue
		}
		st := r.Status()
		rs := &tapesv1.ReplicaStatus{
			Topic: cfg.Topic, Partition: cfg.Partition, TopicId: uint64(cfg.TopicID), BrokerId: int32(c.b.cfg.ID),
			RaftState: st.RaftState, Term: int64(st.Term), LeaderId: st.Leader,
			RaftLastIndex: st.LastIndex, RaftCommitIndex: st.CommitIndex, RaftAppliedIndex: st.AppliedIndex,
			HighWatermark: st.HighWatermark, LogStartOffset: st.LogStart, LogEndOffset: st.LogEnd, Isr: st.ISR,
		}
		for _, f := range st.Followers {
			rs.Followers = append(rs.Followers, &tapesv1.FollowerProgress{BrokerId: f.Broker, MatchIndex: f.Match, LastCaughtUpMs: f.LastCaughtUp.UnixMilli(),
				BytesReceived: f.BytesReceived, ThrottleBytesPerSec: f.Throttle})
		}
		out.Replicas = append(out.Replicas, rs)
	}
	return out, nil
}

// registerLoop registers this broker's advertised address with the
// controller once per run (retrying until it commits: its log index is what
// notReady waits for), then re-registers whenever the metadata lacks it
// (e.g. after a restore).
func (b *Broker) registerLoop() {
	defer b.wg.Done()
	for {
		var have metadata.Broker
		b.meta.View(func(s *metadata.State) { have = s.Brokers[b.cfg.ID] })
		want := metadata.Broker{ID: b.cfg.ID, Address: b.cfg.Advertise, KafkaAddress: b.cfg.KafkaAdvertise}
		if b.registeredAt.Load() == 0 || have != want {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			res, err := b.propose(ctx, &metadata.Command{Op: metadata.OpRegisterBroker, Broker: &want, Join: b.joining})
			if err == nil {
				err = res.Err()
			}
			if err != nil {
				b.log.Debug("registration pending", "err", err)
			} else {
				b.registeredAt.CompareAndSwap(0, res.Index)
				b.waitMeta(ctx, func(s *metadata.State) bool { return s.Index >= res.Index })
				b.log.Info("registered with the controller", "advertise", b.cfg.Advertise, "kafka_advertise", b.cfg.KafkaAdvertise, "index", res.Index)
				b.nudgeReconcile()
			}
			cancel()
		}
		if !b.sleep(time.Second) {
			return
		}
	}
}

// nudgeReconcile makes reconcileLoop run soon; it never blocks.
func (b *Broker) nudgeReconcile() {
	select {
	case b.metaChanged <- struct{}{}:
	default:
	}
}

// heartbeatLoop tells every peer (and itself) that this broker is alive.
// Each send runs in its own goroutine, counted in b.wg and cancelled on
// shutdown, so Shutdown waits for them.
func (b *Broker) heartbeatLoop() {
	defer b.wg.Done()
	ctx, cancel := b.stopContext()
	defer cancel()
	for {
		for _, id := range b.peerIDs() {
			if id == b.cfg.ID {
				b.mu.Lock()
				b.lastSeen[id] = time.Now()
				b.mu.Unlock()
				continue
			}
			conn, err := b.peerConn(id)
			if err != nil {
				continue
			}
			b.wg.Add(1) // the loop's own count is held: Add cannot race Wait
			go func() {
				defer b.wg.Done()
				b.sendHeartbeat(ctx, id, conn)
			}()
		}
		if !b.sleep(b.cfg.HeartbeatInterval) {
			return
		}
	}
}

// sendHeartbeat sends one heartbeat to peer id and records a refusal (see
// peerLiveness); it returns within one heartbeat interval or when ctx ends.
func (b *Broker) sendHeartbeat(ctx context.Context, id metadata.BrokerID, conn *grpc.ClientConn) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.HeartbeatInterval)
	defer cancel()
	_, err := tapesv1.NewControllerServiceClient(conn).BrokerHeartbeat(ctx, &tapesv1.BrokerHeartbeatRequest{BrokerId: int32(b.cfg.ID), Address: b.cfg.Advertise})
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case err == nil:
		delete(b.refused, id)
	case status.Code(err) == codes.Unavailable:
		b.refused[id] = time.Now()
	}
}

// liveness is what this broker knows of a peer.
type liveness int

const (
	live    liveness = iota
	unknown          // not heard from yet, and this broker started less than a session timeout ago
	dead
)

// peerLiveness judges a peer from this broker's heartbeats: live when it
// was heard from within the session timeout and this broker's own
// heartbeat to it has not been refused since (a SIGKILLed broker's port
// refuses at once, long before its session times out); unknown right after
// this broker's start; dead otherwise.
func (b *Broker) peerLiveness(id metadata.BrokerID) liveness {
	b.mu.Lock()
	defer b.mu.Unlock()
	seen, refused := b.lastSeen[id], b.refused[id]
	switch {
	case id == b.cfg.ID:
		return live
	case !seen.IsZero() && time.Since(seen) < b.cfg.SessionTimeout && !refused.After(seen):
		return live
	case seen.IsZero() && refused.IsZero() && time.Since(b.startedAt) < b.cfg.SessionTimeout:
		return unknown
	}
	return dead
}

// alive reports whether broker id is live (peerLiveness).
func (b *Broker) alive(id metadata.BrokerID) bool { return b.peerLiveness(id) == live }

// waitMeta waits (up to 3 s, or ctx) until this broker's copy of the
// metadata satisfies cond: a change committed through another broker is
// then visible here, so a client that asks this broker next reads its own
// write.
func (b *Broker) waitMeta(ctx context.Context, cond func(*metadata.State) bool) {
	deadline := time.Now().Add(3 * time.Second)
	for {
		ok := false
		b.meta.View(func(s *metadata.State) { ok = cond(s) })
		if ok || time.Now().After(deadline) || ctx.Err() != nil {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}
