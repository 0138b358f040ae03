package bench

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tapes-dev/tapes/internal/testcluster"
)

// placementWatch samples, once a second during one benchmark row, where a
// topic's partitions lead and how large their ISRs are, so that a row
// prints what differs between a fast and a slow run of the same settings:
// leaders piled on one broker, leaders that moved during the row, ISRs
// that shrank. Started by watchPlacement; stop ends the sampling
// goroutine and returns the summary line.
type placementWatch struct {
	e      *testcluster.Env
	topic  string
	stopCh chan struct{}
	wg     sync.WaitGroup

	mu sync.Mutex // guards the fields below, written by the sampling goroutine
	// start is the first sample: leader and epoch per partition.
	startLeader, startEpoch []int64
	// changes counts leader epoch changes seen between samples, per partition.
	changes []int
	// minISR is the smallest ISR seen per partition.
	minISR  []int
	last    []int64 // the latest epoch per partition
	leaders []int64 // the latest leader per partition
	samples int
	errs    int
}

func watchPlacement(e *testcluster.Env, topic string, partitions int) *placementWatch {
	w := &placementWatch{e: e, topic: topic, stopCh: make(chan struct{}),
		changes: make([]int, partitions), minISR: make([]int, partitions)}
	for i := range w.minISR {
		w.minISR[i] = 1 << 30
	}
	w.sample()
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-w.stopCh:
				return
			case <-t.C:
				w.sample()
			}
		}
	}()
	return w
}

// sample reads the topic's metadata once (from the sampling goroutine, or
// watchPlacement's caller before it starts).
func (w *placementWatch) sample() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	md, err := w.e.Client.Metadata(ctx, []string{w.topic}, true)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil || len(md.GetTopics()) != 1 || len(md.GetTopics()[0].GetPartitions()) != len(w.changes) {
		w.errs++
		return
	}
	leaders, epochs := make([]int64, len(w.changes)), make([]int64, len(w.changes))
	for _, p := range md.GetTopics()[0].GetPartitions() {
		i := p.GetPartition()
		if i < 0 || int(i) >= len(w.changes) {
			continue
		}
		leaders[i], epochs[i] = int64(p.GetLeaderId()), p.GetLeaderEpoch()
		w.minISR[i] = min(w.minISR[i], len(p.GetIsr()))
		if w.last != nil && epochs[i] != w.last[i] {
			w.changes[i]++
		}
	}
	if w.startLeader == nil {
		w.startLeader, w.startEpoch = leaders, epochs
	}
	w.last, w.leaders = epochs, leaders
	w.samples++
}

// stop ends the sampling and returns one line: leaders per broker at the
// start of the row, leader changes during it, and the smallest ISR seen.
func (w *placementWatch) stop(replicas int) string {
	close(w.stopCh)
	w.wg.Wait()
	w.sample()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.startLeader == nil {
		return fmt.Sprintf("    placement: no metadata for %s (%d failed samples)", w.topic, w.errs)
	}
	count := map[int64]int{}
	for _, l := range w.startLeader {
		count[l]++
	}
	var per []string
	for _, b := range slices.Sorted(maps.Keys(count)) {
		per = append(per, fmt.Sprintf("broker-%d %d", b, count[b]))
	}
	changes, moved := 0, 0
	var shrunk []string
	for i := range w.changes {
		changes += w.changes[i]
		if w.leaders[i] != w.startLeader[i] {
			moved++
		}
		if w.minISR[i] < replicas {
			shrunk = append(shrunk, fmt.Sprintf("p%d to %d", i, w.minISR[i]))
		}
	}
	isr := "none"
	if len(shrunk) > 0 {
		isr = strings.Join(shrunk, ", ")
	}
	return fmt.Sprintf("    placement: leaders %s; leader changes during the row %d (%d partitions end on another leader); ISR shrinks seen: %s (%d samples, 1 s apart)",
		strings.Join(per, ", "), changes, moved, isr, w.samples)
}
