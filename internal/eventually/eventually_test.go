package eventually

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

func TestWaitReturnsOnceTheConditionHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		calls := 0
		err := Wait(time.Minute, func() error {
			calls++
			if time.Since(start) >= time.Second {
				return nil
			}
			return errors.New("not yet")
		})
		if err != nil {
			t.Fatalf("Wait: %v", err)
		}
		if got := time.Since(start); got < time.Second || got > time.Second+Interval {
			t.Fatalf("returned after %v, want within one interval of 1s", got)
		}
		if calls < 2 {
			t.Fatalf("called %d times", calls)
		}
	})
}

func TestWaitGivesUpWithTheLastError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		n := 0
		err := Wait(time.Second, func() error {
			n++
			return errors.New("attempt")
		})
		if err == nil || err.Error() != "attempt" {
			t.Fatalf("err = %v, want the last error", err)
		}
		if got := time.Since(start); got < time.Second {
			t.Fatalf("gave up after %v, before the bound", got)
		}
	})
}
