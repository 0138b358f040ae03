package client

import (
	"log/slog"
	"strings"
	"sync"
	"time"
)

// RateLimit says when a repeated message is due: the first at once, then
// at most one per Every. The binaries use it for their periodic "still
// waiting" lines. Safe for concurrent use.
type RateLimit struct {
	Every time.Duration

	mu   sync.Mutex
	last time.Time // when Due last said yes; zero before
}

// Due reports whether a message is due at now, and if so counts it as sent.
func (r *RateLimit) Due(now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.last.IsZero() && now.Sub(r.last) < r.Every {
		return false
	}
	r.last = now
	return true
}

// WarnUnreachable returns a Config.OnRetry for daemons: while no broker
// answers, it logs so at warning level (with hint), at once and then at
// most once per every; other retries are left to the debug log.
func WarnUnreachable(log *slog.Logger, every time.Duration, hint string) func(Retry) {
	limit := &RateLimit{Every: every}
	return func(r Retry) {
		if r.Unreachable == nil || !limit.Due(time.Now()) {
			return
		}
		log.Warn("no broker answers at "+strings.Join(r.Unreachable, ", ")+"; retrying", "hint", hint, "waiting_for", r.Op)
	}
}
