package raftnet

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/raft"
)

// sendAll sends total bytes in messages of size through ts to target, on
// the bubble's clock, and returns how long it took and, for every message,
// the bytes sent once it left and when.
func sendAll(t *testing.T, ts *throttles, target raft.ServerAddress, total, size int) (time.Duration, []int, []time.Duration) {
	t.Helper()
	start := time.Now()
	var sent []int
	var at []time.Duration
	n := 0
	for n < total {
		if err := ts.wait(context.Background(), target, size); err != nil {
			t.Fatal(err)
		}
		n += size
		sent = append(sent, n)
		at = append(at, time.Since(start))
	}
	return time.Since(start), sent, at
}

// TestThrottleRateHolds: 10 MiB through a 1 MiB/s bucket (burst 1 MiB, full
// at the start) take (10 MiB - burst) / rate on the bubble's clock, to
// within one message.
func TestThrottleRateHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const rate, size, total = 1 << 20, 10 << 10, 10 << 20
		var ts throttles
		ts.set("4", rate)
		took, _, _ := sendAll(t, &ts, "4", total, size)
		want := time.Duration(float64(total-throttleBurst(rate)) / rate * float64(time.Second))
		if took < want-time.Millisecond || took > want+time.Duration(float64(size)/rate*float64(time.Second)) {
			t.Fatalf("%d bytes at %d B/s took %v, want %v (the burst of %v bytes free)", total, rate, took, want, throttleBurst(rate))
		}
		if got := ts.rate("4"); got != rate {
			t.Fatalf("rate = %d, want %d", got, rate)
		}
	})
}

// TestThrottleBurstBounded: after a long idle time the bucket holds no more
// than its burst: at every send, the bytes sent since the start are at most
// burst + rate x elapsed, and the burst itself leaves at once. A message
// larger than the burst still goes, after the wait its size needs.
func TestThrottleBurstBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const rate, size = 300 << 10, 16 << 10
		var ts throttles
		ts.set("4", rate)
		time.Sleep(time.Hour) // idle: the bucket must not fill past its burst
		burst := throttleBurst(rate)
		_, sent, at := sendAll(t, &ts, "4", 3<<20, size)
		for i := range sent {
			if limit := burst + rate*at[i].Seconds(); float64(sent[i]) > limit+1 {
				t.Fatalf("%d bytes sent after %v: more than burst %v + rate x elapsed = %v", sent[i], at[i], burst, limit)
			}
			if float64(sent[i]) <= burst && at[i] != 0 {
				t.Fatalf("message %d (%d bytes, within the burst of %v) waited %v", i, sent[i], burst, at[i])
			}
		}
		if float64(sent[len(sent)-1]) <= burst {
			t.Fatalf("sent only %d bytes, the test needs more than the burst %v", sent[len(sent)-1], burst)
		}
		// One message of 4 bursts: it leaves once the bucket refilled the
		// 3 bursts it overdraws (it was drawn empty above; wait a second to
		// refill it first).
		time.Sleep(time.Duration(burst / rate * float64(time.Second)))
		start := time.Now()
		if err := ts.wait(context.Background(), "4", int(4*burst)); err != nil {
			t.Fatal(err)
		}
		if took, want := time.Since(start), time.Duration(3*burst/rate*float64(time.Second)); took < want-time.Millisecond || took > want+time.Millisecond {
			t.Fatalf("a message of 4 bursts waited %v, want %v", took, want)
		}
	})
}

// TestThrottleOnlyThrottledTargets: a target without a throttle (a voter,
// or a joining replica once promoted: SetThrottle 0) never waits, whatever
// the throttled target next to it does; a new rate applies to the next send,
// and a wait ends with its context.
func TestThrottleOnlyThrottledTargets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ts throttles
		ts.set("4", 256<<10)
		if took, _, _ := sendAll(t, &ts, "2", 100<<20, 1<<20); took != 0 {
			t.Fatalf("100 MiB to the unthrottled broker 2 took %v", took)
		}
		if took, _, _ := sendAll(t, &ts, "4", 1<<20, 64<<10); took < 2*time.Second {
			t.Fatalf("1 MiB to broker 4 at 256 KiB/s took %v, want at least 3 s minus the 256 KiB burst", took)
		}
		if ts.rate("2") != 0 || ts.rate("4") != 256<<10 {
			t.Fatalf("rates 2=%d 4=%d", ts.rate("2"), ts.rate("4"))
		}
		// Faster: 1 MiB/s; the bucket is empty, so 1 MiB more takes 1 s.
		ts.set("4", 1<<20)
		if took, _, _ := sendAll(t, &ts, "4", 1<<20, 64<<10); took < time.Second-time.Millisecond || took > time.Second+100*time.Millisecond {
			t.Fatalf("1 MiB at 1 MiB/s from an empty bucket took %v, want 1 s", took)
		}
		// Promoted: unthrottled at once.
		ts.set("4", 0)
		if took, _, _ := sendAll(t, &ts, "4", 100<<20, 1<<20); took != 0 || ts.rate("4") != 0 {
			t.Fatalf("after the throttle's removal 100 MiB took %v (rate %d)", took, ts.rate("4"))
		}
		// A wait ends with its context (the Transport's Close).
		ts.set("4", 1024)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- ts.wait(ctx, "4", 10<<20) }()
		synctest.Wait()
		cancel()
		if err := <-done; err != context.Canceled {
			t.Fatalf("wait after cancel = %v", err)
		}
	})
}
