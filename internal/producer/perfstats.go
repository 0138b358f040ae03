package producer

import (
	"fmt"
	"io"
	"slices"
	"sync"
	"time"
)

// maxLatencySamples bounds the latencies PerfStats keeps for percentiles.
const maxLatencySamples = 1 << 20

// PerfStats collects what `producerd perf` prints, as
// kafka-producer-perf-test does: per window (Window, then NewWindow) and
// in total (Total). A record's latency runs from Send to its
// acknowledgement. Safe for concurrent use.
type PerfStats struct {
	mu       sync.Mutex
	start    time.Time
	count    int64
	bytes    int64
	totalLat time.Duration
	maxLat   time.Duration
	sampling int64 // keep every sampling-th latency
	seen     int64
	samples  []time.Duration

	wStart time.Time
	wCount int64
	wBytes int64
	wTotal time.Duration
	wMax   time.Duration
}

// NewPerfStats starts the clock; expected is the number of records the run
// will send (it decides how often a latency is sampled).
func NewPerfStats(expected int64, now time.Time) *PerfStats {
	sampling := max(int64(1), (expected+maxLatencySamples-1)/maxLatencySamples)
	return &PerfStats{start: now, wStart: now, sampling: sampling,
		samples: make([]time.Duration, 0, min(expected, maxLatencySamples)+1)}
}

// Record counts one acknowledged record of size bytes.
func (s *PerfStats) Record(latency time.Duration, size int) {
	s.mu.Lock()
	s.count++
	s.bytes += int64(size)
	s.totalLat += latency
	s.maxLat = max(s.maxLat, latency)
	s.wCount++
	s.wBytes += int64(size)
	s.wTotal += latency
	s.wMax = max(s.wMax, latency)
	if s.seen%s.sampling == 0 && len(s.samples) < maxLatencySamples {
		s.samples = append(s.samples, latency)
	}
	s.seen++
	s.mu.Unlock()
}

// Count is the number of records recorded.
func (s *PerfStats) Count() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

const mib = 1024 * 1024

// Window returns the progress line of the current window and starts a new
// one: "N records sent, R records/sec (M MB/sec), A ms avg latency, X ms max
// latency."
func (s *PerfStats) Window(now time.Time) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	el := now.Sub(s.wStart).Seconds()
	avg := 0.0
	if s.wCount > 0 {
		avg = ms(s.wTotal) / float64(s.wCount)
	}
	line := fmt.Sprintf("%d records sent, %.1f records/sec (%.2f MB/sec), %.1f ms avg latency, %.1f ms max latency.",
		s.wCount, float64(s.wCount)/el, float64(s.wBytes)/mib/el, avg, ms(s.wMax))
	s.wStart, s.wCount, s.wBytes, s.wTotal, s.wMax = now, 0, 0, 0, 0
	return line
}

// Report writes the progress line (Window) to w every interval, in a
// goroutine, until stop is called; stop returns once that goroutine has
// ended, so no line follows it.
func (s *PerfStats) Report(w io.Writer, interval time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				fmt.Fprintln(w, s.Window(now))
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// Summary is the whole run's figures.
type Summary struct {
	Records       int64
	RecordsPerSec float64
	MBPerSec      float64
	AvgMs, MaxMs  float64
	// Percentiles of the sampled latencies.
	P50, P95, P99, P999 time.Duration
}

// Total returns the whole run's figures at now.
func (s *PerfStats) Total(now time.Time) Summary {
	s.mu.Lock()
	defer s.mu.Unlock()
	el := now.Sub(s.start).Seconds()
	sum := Summary{Records: s.count, MaxMs: ms(s.maxLat)}
	if el > 0 {
		sum.RecordsPerSec = float64(s.count) / el
		sum.MBPerSec = float64(s.bytes) / mib / el
	}
	if s.count > 0 {
		sum.AvgMs = ms(s.totalLat) / float64(s.count)
	}
	sorted := slices.Clone(s.samples)
	slices.Sort(sorted)
	pct := func(q float64) time.Duration {
		if len(sorted) == 0 {
			return 0
		}
		return sorted[min(int(q*float64(len(sorted))), len(sorted)-1)]
	}
	sum.P50, sum.P95, sum.P99, sum.P999 = pct(0.5), pct(0.95), pct(0.99), pct(0.999)
	return sum
}

// Line is kafka-producer-perf-test's final line: "N records sent, R
// records/sec (M MB/sec), A ms avg latency, X ms max latency, P ms 50th, P
// ms 95th, P ms 99th, P ms 99.9th." (percentiles in whole milliseconds).
func (s Summary) Line() string {
	return fmt.Sprintf("%d records sent, %f records/sec (%.2f MB/sec), %.2f ms avg latency, %.2f ms max latency, %d ms 50th, %d ms 95th, %d ms 99th, %d ms 99.9th.",
		s.Records, s.RecordsPerSec, s.MBPerSec, s.AvgMs, s.MaxMs,
		s.P50.Milliseconds(), s.P95.Milliseconds(), s.P99.Milliseconds(), s.P999.Milliseconds())
}
