package main

import "time"

// pacer spaces records to a target rate: record n of the current rate is due
// at base + n/rate. A pacer that fell more than a second behind (a pause, a
// full buffer) starts over instead of sending a burst to catch up.
type pacer struct {
	rate float64 // records per second; 0 or less: no limit
	base time.Time
	n    int64
}

// reset starts counting at now with rate.
func (p *pacer) reset(rate float64, now time.Time) {
	p.rate, p.base, p.n = rate, now, 0
}

// next returns how long to wait before the next record.
func (p *pacer) next(now time.Time) time.Duration {
	if p.rate <= 0 {
		return 0
	}
	due := p.base.Add(time.Duration(float64(p.n) / p.rate * float64(time.Second)))
	if now.Sub(due) > time.Second {
		p.reset(p.rate, now)
		due = now
	}
	p.n++
	return due.Sub(now)
}
