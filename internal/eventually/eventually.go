// Package eventually is the one poll loop of tapes' tests: wait until a
// condition holds, or fail the test with what was last seen.
//
// End-to-end tests use it with generous real-time bounds (they wait for a
// cause to have its effect, never for a speed). Inside a testing/synctest
// bubble the same loop runs on the bubble's fake clock.
package eventually

import (
	"fmt"
	"testing"
	"time"
)

// Interval is how often a condition is tried again.
const Interval = 20 * time.Millisecond

// True waits up to within for cond to return true and fails the test (with
// what) if it never does.
func True(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	Nil(t, within, what, func() error {
		if cond() {
			return nil
		}
		return fmt.Errorf("condition not met")
	})
}

// Nil waits up to within for f to return nil and fails the test (with what
// and f's last error) if it never does.
func Nil(t testing.TB, within time.Duration, what string, f func() error) {
	t.Helper()
	if err := Wait(within, f); err != nil {
		t.Fatalf("timed out after %v waiting for %s: %v", within, what, err)
	}
}

// Wait calls f every Interval until it returns nil or within has passed, and
// returns f's last error (nil once it succeeded). For helpers that report
// the failure themselves.
func Wait(within time.Duration, f func() error) error {
	return WaitEvery(within, Interval, f)
}

// WaitEvery is Wait trying every `every` instead of every Interval, for
// conditions that are costly to check (a round of RPCs to every broker).
func WaitEvery(within, every time.Duration, f func() error) error {
	deadline := time.Now().Add(within)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if !time.Now().Before(deadline) {
			return err
		}
		time.Sleep(every)
	}
}
