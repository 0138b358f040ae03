package raftnet

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// A throttle limits what a Transport sends to one peer (a reassignment's
// joining replica, see Transport.SetThrottle): a token bucket of rate bytes
// per second holding at most burst bytes, full when it starts. A send of n
// bytes takes n tokens and waits until the bucket holds them; tokens may
// go negative (a message larger than the burst still goes, once the
// bucket refilled what it overdrew), so by any time t after the throttle
// started at most burst + rate·t bytes have left.
type bucket struct {
	now func() time.Time

	mu     sync.Mutex
	rate   float64 // bytes per second, > 0
	burst  float64 // bytes
	tokens float64 // may be negative: reserved by waiting senders
	last   time.Time
}

// throttleBurst is the bucket's capacity: one second of traffic at the
// rate, but at least one InstallSnapshot chunk, so that a chunk never
// waits for more than the bucket can hold.
func throttleBurst(rate int64) float64 {
	return float64(max(rate, snapshotChunkSize))
}

func newBucket(rate int64, now func() time.Time) *bucket {
	b := &bucket{now: now, last: now()}
	b.setRate(rate)
	b.tokens = b.burst
	return b
}

// setRate changes the rate (and so the burst), keeping the tokens held up
// to the new burst.
func (b *bucket) setRate(rate int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refillLocked()
	b.rate, b.burst = float64(rate), throttleBurst(rate)
	b.tokens = min(b.tokens, b.burst)
}

func (b *bucket) refillLocked() {
	now := b.now()
	if d := now.Sub(b.last); d > 0 {
		b.tokens = min(b.burst, b.tokens+d.Seconds()*b.rate)
	}
	b.last = now
}

// reserve takes n tokens and returns how long the caller must wait before
// sending them.
func (b *bucket) reserve(n int) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refillLocked()
	b.tokens -= float64(n)
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / b.rate * float64(time.Second))
}

// wait takes n tokens and returns once they may be sent, or ctx's error
// when it ends first (the tokens stay taken: the bucket errs on the slow
// side).
func (b *bucket) wait(ctx context.Context, n int) error {
	d := b.reserve(n)
	if d <= 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// throttles holds a Transport's per-peer buckets; a peer without one is
// not throttled.
type throttles struct {
	now func() time.Time

	mu sync.Mutex
	m  map[raft.ServerAddress]*bucket
}

// set throttles target to rate bytes per second; rate <= 0 removes its
// throttle. A new rate applies to the next send.
func (ts *throttles) set(target raft.ServerAddress, rate int64) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	b := ts.m[target]
	switch {
	case rate <= 0:
		delete(ts.m, target)
	case b != nil:
		b.setRate(rate)
	default:
		if ts.m == nil {
			ts.m = map[raft.ServerAddress]*bucket{}
		}
		now := ts.now
		if now == nil {
			now = time.Now
		}
		ts.m[target] = newBucket(rate, now)
	}
}

// of returns target's bucket, nil when it is not throttled.
func (ts *throttles) of(target raft.ServerAddress) *bucket {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.m[target]
}

// rate returns target's throttle in bytes per second (0: none).
func (ts *throttles) rate(target raft.ServerAddress) int64 {
	b := ts.of(target)
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return int64(b.rate)
}

// wait returns at once for a target without a throttle, else once n more
// bytes may go to it (see bucket.wait).
func (ts *throttles) wait(ctx context.Context, target raft.ServerAddress, n int) error {
	if b := ts.of(target); b != nil {
		return b.wait(ctx, n)
	}
	return nil
}
