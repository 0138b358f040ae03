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

// Backoff yields the waits between the attempts of one retry loop: the
// first wait doubling up to a cap, with ±20% jitter so that clients do not
// retry in step. It is the one backoff of the client's retry loops, and the
// one the binaries use for their own (consumerd waiting for its topic).
// A Backoff belongs to one goroutine.
type Backoff struct {
	next, max time.Duration
}

// NewBackoff returns a Backoff whose first wait is first and whose waits
// grow to at most limit (at least first).
func NewBackoff(first, limit time.Duration) *Backoff {
	return &Backoff{next: first, max: max(limit, first)}
}

// Wait sleeps for the next interval; it returns ctx's error if ctx ends
// first.
func (b *Backoff) Wait(ctx context.Context) error {
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

// Retry is what a retry loop of the client is about to wait for, handed to
// Config.OnRetry before each backoff.
type Retry struct {
	// Op names the request, e.g. "create topics" or "produce orders-0".
	Op string
	// Attempt counts the attempts made so far by this call.
	Attempt int
	// Err is the error of the last attempt (of the last round of brokers).
	Err error
	// Unreachable lists the addresses tried when no broker has answered
	// this Client yet and every one of them refused the connection (nil
	// otherwise): the cluster is probably not running.
	Unreachable []string
}

// retryLoop is the state of one call's retries: its backoff and the
// notice before each wait. It belongs to the calling goroutine.
type retryLoop struct {
	c        *Client
	op       string
	bo       *Backoff
	attempts int
}

func (c *Client) newRetry(op string) *retryLoop {
	return &retryLoop{c: c, op: op, bo: NewBackoff(c.cfg.RetryBackoff, maxRetryBackoff)}
}

// wait tells Config.OnRetry what the call waits for (err, and unreachable
// when no broker answers), then backs off; it returns ctx's error if ctx
// ends first.
func (r *retryLoop) wait(ctx context.Context, err error, unreachable []string) error {
	if f := r.c.cfg.OnRetry; f != nil {
		f(Retry{Op: r.op, Attempt: r.attempts, Err: err, Unreachable: unreachable})
	}
	return r.bo.Wait(ctx)
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
	if _, ok := kerr.As(err); ok {
		return retriableKafka(err)
	}
	return isTransport(err)
}

// retriableKafka reports whether err carries a Kafka error that may succeed
// if sent again: a code Kafka's client retries, or one the broker marked
// retriable in its detail (INVALID_REPLICATION_FACTOR while brokers are
// still registering, say).
func retriableKafka(err error) bool {
	ke, ok := kerr.As(err)
	return ok && (ke.Code().Retriable() || ke.Detail.GetRetriable())
}

// refused reports whether err is a failure to reach a broker at all (gRPC
// Unavailable without a Kafka error: connection refused or reset), as
// opposed to an answer or a broker too slow to give one.
func refused(err error) bool {
	_, isK := kerr.As(err)
	return !isK && status.Code(err) == codes.Unavailable
}

// heard records that a broker answered (err nil or a Kafka error): from
// then on the Client never reports ErrUnreachable.
func (c *Client) heard(err error) {
	if _, isK := kerr.As(err); err == nil || isK {
		c.answered.Store(true)
	}
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
// once all failed, until ctx ends. While no broker has ever answered and
// every address refuses the connection, it fails with *UnreachableError
// after Config.UnreachableAfter (when set).
func (c *Client) anyBroker(ctx context.Context, op string, call func(context.Context, tapesv1.BrokerServiceClient) error) error {
	return c.anyConn(ctx, op, func(ctx context.Context, cc *grpc.ClientConn) error {
		return call(ctx, tapesv1.NewBrokerServiceClient(cc))
	})
}

// anyConn is anyBroker for any service of the broker.
func (c *Client) anyConn(ctx context.Context, op string, call func(context.Context, *grpc.ClientConn) error) error {
	r := c.newRetry(op)
	var last error
	var refusedSince time.Time // start of the first of the rounds in a row in which every address refused
	for {
		start := time.Now()
		addrs := c.meta.candidates(c.cfg.Bootstrap)
		allRefused := !c.answered.Load()
		var round []error
		for _, addr := range addrs {
			cc, err := c.conn(addr)
			if err != nil {
				return fmt.Errorf("%s: %w", op, err)
			}
			r.attempts++
			actx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
			err = call(actx, cc)
			cancel()
			if err != nil {
				err = c.convert(err)
			}
			c.heard(err)
			if err == nil {
				c.meta.setPreferred(addr)
				return nil
			}
			if ctx.Err() != nil {
				return gaveUp(op, r.attempts, ctx.Err(), last)
			}
			if !retriable(err, false) {
				return fmt.Errorf("%s via %s: %w", op, addr, err)
			}
			allRefused = allRefused && refused(err)
			c.log.Debug("broker failed, trying the next", "op", op, "broker", addr, "err", err)
			c.meta.unprefer(addr)
			last = fmt.Errorf("%s: %w", addr, err)
			round = append(round, last)
		}
		if len(round) > 1 {
			last = errors.Join(round...)
		}
		var unreachable []string
		if allRefused {
			if refusedSince.IsZero() {
				refusedSince = start
			}
			if d := c.cfg.UnreachableAfter; d > 0 && time.Since(refusedSince) >= d {
				return &UnreachableError{Addrs: addrs, Hint: c.cfg.UnreachableHint, Last: last}
			}
			unreachable = addrs
		} else {
			refusedSince = time.Time{}
		}
		if err := r.wait(ctx, last, unreachable); err != nil {
			return gaveUp(op, r.attempts, err, last)
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
	r := c.newRetry(op)
	var last error
	for attempt := 1; ; attempt++ {
		r.attempts = attempt
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
			if err != nil {
				err = c.convert(err)
			}
			c.heard(err)
			if err == nil {
				return nil
			}
			// A stream existed only if the call got as far as a connection.
			sent = p.Addr != nil
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
		if err := r.wait(ctx, err, nil); err != nil {
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
