package launch

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

const (
	// readyPoll is the pause between two rounds of Metadata calls.
	readyPoll = 100 * time.Millisecond
	// readyCallTimeout bounds one Metadata call (a paused broker never answers).
	readyCallTimeout = time.Second
	// readyLogEvery is the least time between two "waiting for cluster" records.
	readyLogEvery = time.Second
)

// WaitReady blocks until the cluster serves: every broker answers Metadata,
// and each answer shows a controller, every broker alive, and a leader for
// every partition of every topic. It returns early, with an error wrapping
// ErrNotRunning that names the broker's log, if a broker is not running, and
// when ctx ends, with an error saying what was still missing. While waiting
// it logs what it waits for ("waiting for cluster") at most once a second.
func (c *Cluster) WaitReady(ctx context.Context) error {
	clients := make([]tapesv1.BrokerServiceClient, len(c.children))
	for i, ch := range c.children {
		conn, err := grpc.NewClient(ch.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return fmt.Errorf("launch: dial %s at %s: %w", ch.name, ch.addr, err)
		}
		defer conn.Close()
		clients[i] = tapesv1.NewBrokerServiceClient(conn)
	}
	tick := time.NewTicker(readyPoll)
	defer tick.Stop()
	var logged string
	var loggedAt time.Time
	for {
		reason, err := c.readiness(ctx, clients)
		if err != nil {
			return err
		}
		if reason == "" {
			return nil
		}
		if reason != logged && time.Since(loggedAt) >= readyLogEvery {
			c.log.Info("waiting for cluster", "missing", reason)
			logged, loggedAt = reason, time.Now()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("launch: cluster not ready (%s): %w", reason, ctx.Err())
		case <-tick.C:
		}
	}
}

// readiness returns what keeps the cluster from being ready ("" when
// nothing does), or an error when waiting longer cannot help.
func (c *Cluster) readiness(ctx context.Context, clients []tapesv1.BrokerServiceClient) (string, error) {
	for _, ch := range c.children {
		c.mu.Lock()
		closed, r, last := c.closed, ch.liveLocked(), ch.run
		c.mu.Unlock()
		if closed {
			return "", ErrClosed
		}
		if r == nil {
			why := "never started"
			if last != nil {
				why = "exited: " + describeState(last.state)
			}
			return "", fmt.Errorf("launch: %s is not running (%s); its log: %s: %w", ch.name, why, ch.log, ErrNotRunning)
		}
	}
	ids := make([]int32, len(c.children))
	for i, ch := range c.children {
		ids[i] = ch.id
	}
	for i, ch := range c.children {
		cctx, cancel := context.WithTimeout(ctx, readyCallTimeout)
		resp, err := clients[i].Metadata(cctx, &tapesv1.MetadataRequest{})
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Sprintf("%s has not answered Metadata", ch.name), nil
			}
			if ke, ok := kerr.As(kerr.FromStatus(err)); ok && ke.Code().Retriable() {
				// A broker that answers with a retriable error is on its
				// way (not registered or caught up yet): progress.
				return fmt.Sprintf("%s is starting (%s)", ch.name, ke.Detail.GetMessage()), nil
			}
			st := status.Convert(err)
			return fmt.Sprintf("%s does not answer Metadata: %s: %s", ch.name, st.Code(), st.Message()), nil
		}
		if missing := judgeMetadata(resp, ids); missing != "" {
			return fmt.Sprintf("%s sees %s", ch.name, missing), nil
		}
	}
	return "", nil
}

// judgeMetadata returns what a Metadata answer lacks for a ready cluster of
// the given broker ids, or "".
func judgeMetadata(resp *tapesv1.MetadataResponse, ids []int32) string {
	if resp.GetControllerId() < 0 {
		return "no controller elected"
	}
	alive := map[int32]bool{}
	for _, b := range resp.GetBrokers() {
		alive[b.GetId()] = b.GetAlive()
	}
	for _, id := range ids {
		if a, known := alive[id]; !known {
			return fmt.Sprintf("no broker %d registered", id)
		} else if !a {
			return fmt.Sprintf("broker %d not alive", id)
		}
	}
	var total, leaderless int
	var first string
	for _, t := range resp.GetTopics() {
		if e := t.GetError(); e.GetCode() != "" {
			return fmt.Sprintf("topic %s failing with %s", t.GetName(), e.GetCode())
		}
		for _, p := range t.GetPartitions() {
			total++
			if p.GetLeaderId() < 0 {
				if leaderless == 0 {
					first = fmt.Sprintf("%s-%d", t.GetName(), p.GetPartition())
				}
				leaderless++
			}
		}
	}
	if leaderless > 0 {
		return fmt.Sprintf("%d of %d partitions without a leader (first %s)", leaderless, total, first)
	}
	return ""
}
