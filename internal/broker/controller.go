package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

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
func (b *Broker) propose(ctx context.Context, cmd *metadata.Command) (*metadata.Result, error) {
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
			rs.Followers = append(rs.Followers, &tapesv1.FollowerProgress{BrokerId: f.Broker, MatchIndex: f.Match, LastCaughtUpMs: f.LastCaughtUp.UnixMilli()})
		}
		out.Replicas = append(out.Replicas, rs)
	}
	return out, nil
}

// registerLoop registers this broker's advertised address with the
// controller (retrying until it succeeds), then re-registers whenever the
// metadata lacks it (e.g. after a restore).
func (b *Broker) registerLoop() {
	defer b.wg.Done()
	for {
		var have metadata.Broker
		b.meta.View(func(s *metadata.State) { have = s.Brokers[b.cfg.ID] })
		if have.Address != b.cfg.Advertise {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := b.propose(ctx, &metadata.Command{Op: metadata.OpRegisterBroker, Broker: &metadata.Broker{ID: b.cfg.ID, Address: b.cfg.Advertise}})
			cancel()
			if err != nil {
				b.log.Debug("registration pending", "err", err)
			} else {
				b.log.Info("registered with the controller", "advertise", b.cfg.Advertise)
			}
		}
		if !b.sleep(time.Second) {
			return
		}
	}
}

// heartbeatLoop tells every peer (and itself) that this broker is alive.
func (b *Broker) heartbeatLoop() {
	defer b.wg.Done()
	for {
		for _, id := range b.cfg.sortedPeers() {
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
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), b.cfg.HeartbeatInterval)
				defer cancel()
				_, _ = tapesv1.NewControllerServiceClient(conn).BrokerHeartbeat(ctx, &tapesv1.BrokerHeartbeatRequest{BrokerId: int32(b.cfg.ID), Address: b.cfg.Advertise})
			}()
		}
		if !b.sleep(b.cfg.HeartbeatInterval) {
			return
		}
	}
}

// alive reports whether broker id was heard from within the session timeout.
func (b *Broker) alive(id metadata.BrokerID) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return time.Since(b.lastSeen[id]) < b.cfg.SessionTimeout
}

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
