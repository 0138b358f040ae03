package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// backoff yields the waits between attempts: RetryBackoff doubling up to
// about a second, with ±20% jitter so that clients do not retry in step.
type backoff struct {
	next, max time.Duration
}

func (c *Client) newBackoff() *backoff {
	return &backoff{next: c.cfg.RetryBackoff, max: max(maxRetryBackoff, c.cfg.RetryBackoff)}
}

// wait sleeps for the next interval; it returns ctx's error if ctx ends first.
func (b *backoff) wait(ctx context.Context) error {
	d := b.next
	d += time.Duration((rand.Float64()*0.4 - 0.2) * float64(d))
	b.next = min(2*b.next, b.max)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// convert turns a gRPC error into what callers see: *kerr.Error when the
// broker named a Kafka error, ErrClosed when the Client was closed under
// the call, the error unchanged otherwise.
func (c *Client) convert(err error) error {
	err = kerr.FromStatus(err)
	if _, ok := kerr.As(err); ok {
		return err
	}
	if status.Code(err) == codes.Canceled {
		c.connMu.Lock()
		closed := c.closed
		c.connMu.Unlock()
		if closed {
			return ErrClosed
		}
	}
	return err
}

// isTransport reports whether err is a failure to reach a broker or to hear
// back from it in time, rather than an answer: gRPC Unavailable, or a
// DeadlineExceeded without Kafka error (the attempt's own deadline; the
// caller checks its context separately).
func isTransport(err error) bool {
	if _, ok := kerr.As(err); ok {
		return false
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

// retriable is the default retry rule: a retriable Kafka error or a
// transport failure.
func retriable(err error, _ bool) bool {
	if code := kerr.CodeOf(err); code != "" {
		return code.Retriable()
	}
	return isTransport(err)
}

// gaveUp is the error for a caller whose context ended while retrying: it
// wraps the context's error and, when it says more than "timed out", the
// last error seen.
func gaveUp(op string, attempts int, ctxErr, last error) error {
	if last == nil || kerr.CodeOf(last) == "" && (status.Code(last) == codes.DeadlineExceeded || status.Code(last) == codes.Canceled) {
		return fmt.Errorf("%s: %w", op, ctxErr)
	}
	return fmt.Errorf("%s: gave up after %d attempts: %w (last error: %w)", op, attempts, ctxErr, last)
}

// anyBroker runs call against the brokers in turn (see
// metadataCache.candidates) until one answers, moving on after a transport
// failure or a retriable Kafka error, and starting over after a backoff
// once all failed, until ctx ends.
func (c *Client) anyBroker(ctx context.Context, op string, call func(context.Context, tapesv1.BrokerServiceClient) error) error {
	return c.anyConn(ctx, op, func(ctx context.Context, cc *grpc.ClientConn) error {
		return call(ctx, tapesv1.NewBrokerServiceClient(cc))
	})
}

// anyConn is anyBroker for any service of the broker.
func (c *Client) anyConn(ctx context.Context, op string, call func(context.Context, *grpc.ClientConn) error) error {
	bo := c.newBackoff()
	var last error
	attempts := 0
	for {
		var round []error
		for _, addr := range c.meta.candidates(c.cfg.Bootstrap) {
			cc, err := c.conn(addr)
			if err != nil {
				return fmt.Errorf("%s: %w", op, err)
			}
			attempts++
			actx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
			err = call(actx, cc)
			cancel()
			if err == nil {
				c.meta.setPreferred(addr)
				return nil
			}
			err = c.convert(err)
			if ctx.Err() != nil {
				return gaveUp(op, attempts, ctx.Err(), last)
			}
			if !retriable(err, false) {
				return fmt.Errorf("%s via %s: %w", op, addr, err)
			}
			c.log.Debug("broker failed, trying the next", "op", op, "broker", addr, "err", err)
			c.meta.unprefer(addr)
			last = fmt.Errorf("%s: %w", addr, err)
			round = append(round, last)
		}
		if len(round) > 1 {
			last = errors.Join(round...)
		}
		if err := bo.wait(ctx); err != nil {
			return gaveUp(op, attempts, err, last)
		}
	}
}

// leaderCall runs call against the leader of topic-partition until it
// succeeds, fails with an error retry rejects, or ctx ends. extra lengthens
// the per-attempt deadline (a Fetch's long poll). retry gets the error and
// whether the request may have reached the broker (false when no
// connection could carry it).
func (c *Client) leaderCall(ctx context.Context, op, topic string, partition int32, extra time.Duration,
	retry func(err error, sent bool) bool,
	call func(ctx context.Context, bc tapesv1.BrokerServiceClient, opts ...grpc.CallOption) error,
) error {
	op = fmt.Sprintf("%s %s-%d", op, topic, partition)
	bo := c.newBackoff()
	var last error
	for attempt := 1; ; attempt++ {
		sent := false
		leaderID, addr, err := c.Leader(ctx, topic, partition)
		var cc *grpc.ClientConn
		if err == nil {
			cc, err = c.conn(addr)
		}
		if err == nil {
			var p peer.Peer
			actx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout+extra)
			err = call(actx, tapesv1.NewBrokerServiceClient(cc), grpc.Peer(&p))
			cancel()
			if err == nil {
				return nil
			}
			// A stream existed only if the call got as far as a connection.
			sent = p.Addr != nil
			err = c.convert(err)
		}
		if ctx.Err() != nil {
			// The caller's deadline ended this attempt: a leader that did
			// not answer in time is suspect for the next call too.
			c.observe(topic, partition, err)
			if kerr.CodeOf(err) != "" || last == nil {
				last = err
			}
			return gaveUp(op, attempt, ctx.Err(), last)
		}
		if errors.Is(err, ErrClosed) {
			return fmt.Errorf("%s: %w", op, err)
		}
		moved := c.observe(topic, partition, err)
		if !retry(err, sent) {
			return fmt.Errorf("%s: %w", op, err)
		}
		last = err
		c.log.Debug("retrying", "op", op, "attempt", attempt, "leader", leaderID, "err", err, "hint_used", moved)
		if moved {
			continue // the hint names a newer leader: go there at once
		}
		if err := bo.wait(ctx); err != nil {
			return gaveUp(op, attempt, err, last)
		}
	}
}

// observe updates the cache after a failed leader-routed attempt and
// reports whether a leader hint moved the partition to a newer leader.
func (c *Client) observe(topic string, partition int32, err error) bool {
	ke, ok := kerr.As(err)
	switch {
	case ok && ke.Code() == kerr.NotLeaderOrFollower:
		if c.meta.hint(topic, partition, ke.Detail) {
			return true
		}
		c.meta.forget(topic, partition)
	case ok && (ke.Code() == kerr.LeaderNotAvailable || ke.Code() == kerr.UnknownTopicOrPartition):
		c.meta.forget(topic, partition)
	case !ok && isTransport(err):
		c.meta.forget(topic, partition)
	}
	return false
}
