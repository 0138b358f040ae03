package consumer

import (
	"context"
	"fmt"
	"time"

	"github.com/tapes-dev/tapes/internal/assign"
	"github.com/tapes-dev/tapes/internal/client"
	"github.com/tapes-dev/tapes/internal/consumerproto"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// eagerHeartbeat is the heartbeat period right after a cooperative
// rebalance (see member).
const eagerHeartbeat = 100 * time.Millisecond

// member is the member goroutine: it runs rebalances the poll goroutine
// asks for and heartbeats in between, and reports what happened as events.
func (c *Consumer) member() {
	defer c.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-c.stop; cancel() }()
	// Heartbeats go every HeartbeatInterval, and every eagerHeartbeat
	// during one interval after a rebalance under the cooperative
	// protocol: a member that gave partitions up rejoins at once (KIP-429's
	// second round), and the others learn of that round at their next
	// heartbeat, which would otherwise leave the moved partitions without
	// owner for up to a whole interval.
	tick := min(c.cfg.HeartbeatInterval, eagerHeartbeat)
	hb := time.NewTicker(tick)
	defer hb.Stop()
	rejoinSent := false
	var lastBeat, eagerUntil time.Time
	for {
		select {
		case <-c.stop:
			return
		case req := <-c.joinReq:
			rejoinSent = false
			c.rebalance(ctx, req)
			if c.coop {
				eagerUntil = time.Now().Add(c.cfg.HeartbeatInterval)
			}
		case now := <-hb.C:
			member, gen := c.Membership()
			if member == "" || gen <= 0 {
				continue
			}
			if since := now.Sub(lastBeat); since < c.cfg.HeartbeatInterval && (now.After(eagerUntil) || since < eagerHeartbeat) {
				continue
			}
			lastBeat = now
			c.mu.Lock()
			idle := time.Since(c.lastPoll)
			c.mu.Unlock()
			if idle > c.cfg.MaxPollInterval {
				// Kafka's consumer leaves when the application stops
				// polling; it rejoins at its next Poll.
				c.log.Warn("poll interval exceeded: leaving the group", "idle", idle.Round(time.Millisecond), "max_poll_interval", c.cfg.MaxPollInterval)
				lctx, lcancel := context.WithTimeout(ctx, c.cfg.SessionTimeout)
				_ = c.cl.LeaveGroup(lctx, c.cfg.Group, member)
				lcancel()
				c.setMembership("", -1, "", "left")
				c.post(event{kind: evFenced, generation: gen, err: fmt.Errorf("max poll interval %v exceeded", c.cfg.MaxPollInterval)})
				continue
			}
			hctx, hcancel := context.WithTimeout(ctx, c.cfg.HeartbeatInterval)
			err := c.cl.Heartbeat(hctx, &tapesv1.HeartbeatRequest{GroupId: c.cfg.Group, GenerationId: gen, MemberId: member})
			hcancel()
			switch {
			case err == nil:
			case kerr.Is(err, kerr.RebalanceInProgress):
				if !rejoinSent {
					rejoinSent = true
					c.setState("rebalancing")
					c.post(event{kind: evRejoin, generation: gen})
				}
			case kerr.Is(err, kerr.UnknownMemberID), kerr.Is(err, kerr.IllegalGeneration):
				c.log.Warn("fenced by the coordinator", "member", member, "generation", gen, "err", err)
				id := member
				if kerr.Is(err, kerr.UnknownMemberID) {
					id = ""
				}
				c.setMembership(id, -1, "", "fenced")
				rejoinSent = true
				c.post(event{kind: evFenced, generation: gen, err: err})
			default:
				c.log.Debug("heartbeat failed", "err", err)
			}
		}
	}
}

func (c *Consumer) post(ev event) {
	select {
	case c.events <- ev:
	case <-c.stop:
	}
}

func (c *Consumer) setMembership(member string, gen int32, leader, state string) {
	c.mu.Lock()
	c.memberID, c.generation, c.leader, c.state = member, gen, leader, state
	c.mu.Unlock()
}

func (c *Consumer) setState(s string) {
	c.mu.Lock()
	c.state = s
	c.mu.Unlock()
}

// rebalance joins and syncs until it has an assignment (or the consumer
// stops), then posts it.
func (c *Consumer) rebalance(ctx context.Context, req joinRequest) {
	c.setState("rebalancing")
	metadata := c.subscription(req)
	// Failed joins and assignments are retried with a growing backoff (to
	// one second, below any session timeout, as the leader heartbeats
	// nothing meanwhile); an assignment that keeps failing (a topic that
	// does not exist) is warned about at once, then every assignWarnEvery.
	bo := client.NewBackoff(100*time.Millisecond, time.Second)
	for ctx.Err() == nil {
		member, _ := c.Membership()
		join := &tapesv1.JoinGroupRequest{GroupId: c.cfg.Group, MemberId: member, ClientId: c.cfg.ClientID, ProtocolType: consumerproto.ProtocolType,
			Protocols:          []*tapesv1.JoinGroupProtocol{{Name: c.assignor.Name(), Metadata: metadata}},
			SessionTimeoutMs:   int32(c.cfg.SessionTimeout / time.Millisecond),
			RebalanceTimeoutMs: int32(c.cfg.MaxPollInterval / time.Millisecond)}
		resp, err := c.cl.JoinGroup(ctx, join)
		if id, ok := client.MemberIDFrom(err); ok {
			c.setMembership(id, -1, "", "joining")
			continue
		}
		if err != nil {
			if kerr.Is(err, kerr.UnknownMemberID) {
				c.setMembership("", -1, "", "joining")
			}
			c.log.Info("join failed, retrying", "err", err)
			_ = bo.Wait(ctx)
			continue
		}
		c.mu.Lock()
		c.memberID = resp.MemberId
		c.mu.Unlock()
		var assignments []*tapesv1.MemberAssignment
		if resp.LeaderId == resp.MemberId {
			if assignments, err = c.assign(ctx, resp); err != nil {
				if c.assignWarn.Due(time.Now()) {
					c.log.Warn("leader could not compute the assignment; rejoining with backoff", "err", err)
				} else {
					c.log.Debug("leader could not compute the assignment; rejoining", "err", err)
				}
				_ = bo.Wait(ctx)
				continue
			}
		}
		got, err := c.cl.SyncGroup(ctx, &tapesv1.SyncGroupRequest{GroupId: c.cfg.Group, GenerationId: resp.GenerationId, MemberId: resp.MemberId, Assignments: assignments,
			ProtocolType: consumerproto.ProtocolType, ProtocolName: resp.ProtocolName},
			c.cfg.SessionTimeout)
		if err != nil {
			if kerr.Is(err, kerr.UnknownMemberID) {
				c.setMembership("", -1, "", "joining")
			}
			c.log.Info("sync failed, rejoining", "generation", resp.GenerationId, "err", err)
			continue
		}
		decoded, err := consumerproto.DecodeAssignment(got)
		if err != nil {
			c.log.Warn("undecodable assignment from the leader; rejoining", "generation", resp.GenerationId, "leader", resp.LeaderId, "err", err)
			_ = bo.Wait(ctx)
			continue
		}
		tps := decoded.Partitions
		c.setMembership(resp.MemberId, resp.GenerationId, resp.LeaderId, "stable")
		c.log.Info("assigned", "member", resp.MemberId, "generation", resp.GenerationId, "leader", resp.LeaderId == resp.MemberId, "partitions", fmt.Sprint(tps))
		c.post(event{kind: evAssigned, generation: resp.GenerationId, assigned: tps})
		return
	}
}

// subscription encodes the member's metadata for its JoinGroup: Kafka's
// ConsumerProtocolSubscription v3 with the partitions it owns and the
// generation it got them in (KIP-429), and under cooperative-sticky the
// user data Java's CooperativeStickyAssignor sends (the generation), for
// leaders that read it from there.
func (c *Consumer) subscription(req joinRequest) []byte {
	s := consumerproto.Subscription{Topics: []string{c.cfg.Topic}, Owned: sortedTPs(req.owned), Generation: req.generation}
	if c.assignor.Name() == assign.CooperativeStickyName {
		s.UserData = consumerproto.CooperativeUserData(req.generation)
	}
	return consumerproto.EncodeSubscription(s)
}

// assign computes the group's assignment as its leader: every member's
// metadata is decoded (whichever client sent it, versions 0-3), the
// assignor runs, and each member's part is encoded at the version of its
// subscription.
func (c *Consumer) assign(ctx context.Context, resp *tapesv1.JoinGroupResponse) ([]*tapesv1.MemberAssignment, error) {
	a, err := assign.ByName(resp.ProtocolName)
	if err != nil {
		return nil, err
	}
	subs, versions, undecodable := decodeMembers(resp.Members)
	for id, err := range undecodable {
		c.log.Warn("member metadata does not decode as Kafka's consumer protocol: the member gets no partitions", "member", id, "err", err)
	}
	topics := map[string]int32{}
	for _, s := range subs {
		for _, t := range s.Topics {
			topics[t] = 0
		}
	}
	if err := c.cl.RefreshMetadata(ctx); err != nil {
		return nil, err
	}
	for t := range topics {
		n, err := c.cl.Partitions(ctx, t)
		if err != nil {
			return nil, err
		}
		topics[t] = int32(n)
	}
	out, err := a.Assign(topics, subs)
	if err != nil {
		return nil, err
	}
	return encodeAssignments(out, versions), nil
}

// decodeMembers decodes the members' metadata of a JoinGroup answer into
// the assignor's input, with each member's subscription version. A member
// whose metadata does not decode is in undecodable and subscribes to
// nothing (it gets an empty assignment, so one broken client does not stop
// the group's rebalance).
func decodeMembers(members []*tapesv1.JoinGroupMember) (subs []assign.Subscription, versions map[assign.MemberID]int16, undecodable map[assign.MemberID]error) {
	subs = make([]assign.Subscription, 0, len(members))
	versions = make(map[assign.MemberID]int16, len(members))
	for _, m := range members {
		id := assign.MemberID(m.MemberId)
		s, err := consumerproto.DecodeSubscription(m.Metadata)
		if err != nil {
			if undecodable == nil {
				undecodable = map[assign.MemberID]error{}
			}
			undecodable[id] = fmt.Errorf("client %s: %w", m.ClientId, err)
			s = consumerproto.Subscription{Generation: -1}
		}
		subs = append(subs, assign.Subscription{Member: id, Topics: s.Topics, Owned: s.Owned, Generation: s.Generation})
		versions[id] = s.Version
	}
	return subs, versions, undecodable
}

// encodeAssignments encodes the assignor's result for SyncGroup.
func encodeAssignments(out assign.Assignment, versions map[assign.MemberID]int16) []*tapesv1.MemberAssignment {
	res := make([]*tapesv1.MemberAssignment, 0, len(out))
	for m, tps := range out {
		res = append(res, &tapesv1.MemberAssignment{MemberId: string(m), Assignment: consumerproto.EncodeAssignment(tps, versions[m])})
	}
	return res
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
