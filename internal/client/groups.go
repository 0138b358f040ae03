package client

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// coordinators caches the coordinator address of each group and of each
// transactional id (coordKey).
type coordinators struct {
	mu   sync.Mutex
	addr map[coordKey]string
}

// coordKey names what a coordinator coordinates: Kafka's key type (0 a
// group, 1 a transactional id) and the id.
type coordKey struct {
	typ int32
	id  string
}

const (
	keyGroup int32 = 0
	keyTxn   int32 = 1
)

func (cs *coordinators) get(k coordKey) (string, bool) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	a, ok := cs.addr[k]
	return a, ok
}

func (cs *coordinators) set(k coordKey, addr string) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.addr == nil {
		cs.addr = map[coordKey]string{}
	}
	cs.addr[k] = addr
}

func (cs *coordinators) forget(k coordKey) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	delete(cs.addr, k)
}

// coordinatorMoved reports whether err means "ask FindCoordinator again".
func coordinatorMoved(err error) bool {
	switch kerr.CodeOf(err) {
	case kerr.NotCoordinator, kerr.CoordinatorNotAvailable, kerr.CoordinatorLoadInProgress:
		return true
	case "":
		return isTransport(err)
	}
	return false
}

// FindCoordinator asks any broker which broker coordinates group; the
// first call for a cluster creates __consumer_offsets. Retries until ctx
// ends while no coordinator is available.
func (c *Client) FindCoordinator(ctx context.Context, group string) (*tapesv1.FindCoordinatorResponse, error) {
	return c.findCoordinator(ctx, coordKey{keyGroup, group})
}

// findCoordinator is FindCoordinator for either key type.
func (c *Client) findCoordinator(ctx context.Context, k coordKey) (*tapesv1.FindCoordinatorResponse, error) {
	what := "group "
	if k.typ == keyTxn {
		what = "transactional id "
	}
	var resp *tapesv1.FindCoordinatorResponse
	err := c.anyConn(ctx, "find coordinator of "+what+k.id, func(ctx context.Context, cc *grpc.ClientConn) (err error) {
		resp, err = tapesv1.NewGroupServiceClient(cc).FindCoordinator(ctx, &tapesv1.FindCoordinatorRequest{GroupId: k.id, KeyType: k.typ})
		return err
	})
	if err != nil {
		return nil, err
	}
	c.coords.set(k, resp.Address)
	return resp, nil
}

// coordinatorCall runs call against group's coordinator, finding it first
// (cached), until it succeeds, fails with an error that is not about the
// coordinator's whereabouts, or ctx ends. extra lengthens the per-attempt
// deadline (JoinGroup and SyncGroup wait for the rebalance).
func (c *Client) coordinatorCall(ctx context.Context, op, group string, extra time.Duration, call func(context.Context, tapesv1.GroupServiceClient) error) error {
	return c.coordinatorConnCall(ctx, fmt.Sprintf("%s (group %s)", op, group), coordKey{keyGroup, group}, extra, nil,
		func(ctx context.Context, cc *grpc.ClientConn) error {
			return call(ctx, tapesv1.NewGroupServiceClient(cc))
		})
}

// coordinatorConnCall is coordinatorCall for either key type, over the
// coordinator's connection; also retried are the errors again says are
// (nil: none beyond the coordinator's whereabouts).
func (c *Client) coordinatorConnCall(ctx context.Context, op string, k coordKey, extra time.Duration, again func(error) bool, call func(context.Context, *grpc.ClientConn) error) error {
	r := c.newRetry(op)
	var last error
	for attempt := 1; ; attempt++ {
		r.attempts = attempt
		addr, ok := c.coords.get(k)
		var err error
		if !ok {
			var resp *tapesv1.FindCoordinatorResponse
			if resp, err = c.findCoordinator(ctx, k); err == nil {
				addr = resp.Address
			}
		}
		if err == nil {
			cc, cerr := c.conn(addr)
			if cerr != nil {
				return fmt.Errorf("%s: %w", op, cerr)
			}
			actx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout+extra)
			err = call(actx, cc)
			cancel()
			if err != nil {
				err = c.convert(err)
			}
			c.heard(err)
			if err == nil {
				return nil
			}
		}
		if ctx.Err() != nil {
			if kerr.CodeOf(err) != "" || last == nil {
				last = err
			}
			return gaveUp(op, attempt, ctx.Err(), last)
		}
		moved := coordinatorMoved(err)
		if errors.Is(err, ErrClosed) || !moved && (again == nil || !again(err)) {
			return fmt.Errorf("%s: %w", op, err)
		}
		c.log.Debug("coordinator unavailable, retrying", "op", op, "coordinator", addr, "err", err)
		if moved {
			c.coords.forget(k)
		}
		last = err
		if err := r.wait(ctx, err, nil); err != nil {
			return gaveUp(op, attempt, err, last)
		}
	}
}

// JoinGroup sends a JoinGroup to the group's coordinator. It blocks until
// the rebalance completes (up to the request's rebalance timeout beyond the
// request timeout). MEMBER_ID_REQUIRED comes back as an error whose detail
// holds the member id.
func (c *Client) JoinGroup(ctx context.Context, req *tapesv1.JoinGroupRequest) (*tapesv1.JoinGroupResponse, error) {
	var resp *tapesv1.JoinGroupResponse
	err := c.coordinatorCall(ctx, "join", req.GroupId, time.Duration(req.RebalanceTimeoutMs)*time.Millisecond, func(ctx context.Context, gc tapesv1.GroupServiceClient) (err error) {
		resp, err = gc.JoinGroup(ctx, req)
		return err
	})
	return resp, err
}

// SyncGroup sends a SyncGroup; wait bounds how long a follower waits for
// the leader's assignment beyond the request timeout. It returns the
// member's assignment as the leader encoded it (opaque to the coordinator).
func (c *Client) SyncGroup(ctx context.Context, req *tapesv1.SyncGroupRequest, wait time.Duration) ([]byte, error) {
	var resp *tapesv1.SyncGroupResponse
	err := c.coordinatorCall(ctx, "sync", req.GroupId, wait, func(ctx context.Context, gc tapesv1.GroupServiceClient) (err error) {
		resp, err = gc.SyncGroup(ctx, req)
		return err
	})
	return resp.GetAssignment(), err
}

// Heartbeat sends one heartbeat.
func (c *Client) Heartbeat(ctx context.Context, req *tapesv1.HeartbeatRequest) error {
	return c.coordinatorCall(ctx, "heartbeat", req.GroupId, 0, func(ctx context.Context, gc tapesv1.GroupServiceClient) error {
		_, err := gc.Heartbeat(ctx, req)
		return err
	})
}

// LeaveGroup removes a member from its group.
func (c *Client) LeaveGroup(ctx context.Context, group, member string) error {
	return c.coordinatorCall(ctx, "leave", group, 0, func(ctx context.Context, gc tapesv1.GroupServiceClient) error {
		_, err := gc.LeaveGroup(ctx, &tapesv1.LeaveGroupRequest{GroupId: group, MemberId: member})
		return err
	})
}

// OffsetCommit commits offsets for a group member (generation -1 and no
// member id: an admin commit into an empty group).
func (c *Client) OffsetCommit(ctx context.Context, req *tapesv1.OffsetCommitRequest) error {
	return c.coordinatorCall(ctx, "commit offsets", req.GroupId, 0, func(ctx context.Context, gc tapesv1.GroupServiceClient) error {
		_, err := gc.OffsetCommit(ctx, req)
		return err
	})
}

// OffsetFetch returns a group's committed offsets (all of them when
// partitions is empty; -1 where nothing is committed).
func (c *Client) OffsetFetch(ctx context.Context, group string, partitions []*tapesv1.TopicPartitions) ([]*tapesv1.CommittedOffset, error) {
	return c.offsetFetch(ctx, group, partitions, false)
}

// OffsetFetchStable is OffsetFetch with require_stable: a partition whose
// transactional commit is pending makes it UNSTABLE_OFFSET_COMMIT (the
// caller retries; a read_committed consumer must not start from the offset
// before a transaction that may still commit).
func (c *Client) OffsetFetchStable(ctx context.Context, group string, partitions []*tapesv1.TopicPartitions) ([]*tapesv1.CommittedOffset, error) {
	return c.offsetFetch(ctx, group, partitions, true)
}

func (c *Client) offsetFetch(ctx context.Context, group string, partitions []*tapesv1.TopicPartitions, stable bool) ([]*tapesv1.CommittedOffset, error) {
	var resp *tapesv1.OffsetFetchResponse
	err := c.coordinatorCall(ctx, "fetch offsets", group, 0, func(ctx context.Context, gc tapesv1.GroupServiceClient) (err error) {
		resp, err = gc.OffsetFetch(ctx, &tapesv1.OffsetFetchRequest{GroupId: group, Partitions: partitions, RequireStable: stable})
		return err
	})
	return resp.GetOffsets(), err
}

// DescribeGroup describes one group (state "Dead" when it does not exist).
func (c *Client) DescribeGroup(ctx context.Context, group string) (*tapesv1.GroupDescription, error) {
	var resp *tapesv1.DescribeGroupsResponse
	err := c.coordinatorCall(ctx, "describe", group, 0, func(ctx context.Context, gc tapesv1.GroupServiceClient) (err error) {
		resp, err = gc.DescribeGroups(ctx, &tapesv1.DescribeGroupsRequest{GroupIds: []string{group}})
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(resp.Groups) != 1 {
		return nil, fmt.Errorf("describe group %s: %d answers", group, len(resp.Groups))
	}
	return resp.Groups[0], nil
}

// ListGroups asks every live broker for the groups it coordinates. A broker
// that does not answer is reported in the error, with the groups the others
// listed.
func (c *Client) ListGroups(ctx context.Context) ([]*tapesv1.ListedGroup, error) {
	md, err := c.Brokers(ctx)
	if err != nil {
		return nil, err
	}
	var (
		mu   sync.Mutex
		out  []*tapesv1.ListedGroup
		errs []error
		wg   sync.WaitGroup
	)
	for _, b := range md.Brokers {
		if !b.Alive {
			continue
		}
		wg.Add(1)
		go func(b *tapesv1.BrokerInfo) {
			defer wg.Done()
			cc, err := c.conn(b.Address)
			var resp *tapesv1.ListGroupsResponse
			if err == nil {
				actx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
				resp, err = tapesv1.NewGroupServiceClient(cc).ListGroups(actx, &tapesv1.ListGroupsRequest{})
				cancel()
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("list groups on broker %d: %w", b.Id, c.convert(err)))
				return
			}
			out = append(out, resp.Groups...)
		}(b)
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool { return out[i].GroupId < out[j].GroupId })
	return out, errors.Join(errs...)
}

// MemberIDFrom returns the member id a MEMBER_ID_REQUIRED error carries.
func MemberIDFrom(err error) (string, bool) {
	ke, ok := kerr.As(err)
	if !ok || ke.Code() != kerr.MemberIDRequired || ke.Detail.MemberId == "" {
		return "", false
	}
	return ke.Detail.MemberId, true
}
