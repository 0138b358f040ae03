package txn

import (
	"context"
	"maps"
	"sync"
	"time"

	"github.com/tapes-dev/tapes/internal/kerr"
)

// concurrentHold bounds how long a request that would be answered
// CONCURRENT_TRANSACTIONS (the id's previous transaction still completing,
// or a write of the id in flight) waits for that to finish before the
// answer is given. Clients back off after that answer (franz-go 20 ms, the
// Java client 20-100 ms), and the next transaction's first
// AddPartitionsToTxn, sent right after EndTxn's answer, always lands while
// the markers are being written: holding it answers it as a retry right
// after completion would have been answered, without the backoff.
const concurrentHold = 50 * time.Millisecond

// changed returns a channel closed by the next committed write of id.
// Called under s.mu.
func (s *shard) changed(id string) <-chan struct{} {
	if s.waiters == nil {
		s.waiters = map[string]chan struct{}{}
	}
	ch := s.waiters[id]
	if ch == nil {
		ch = make(chan struct{})
		s.waiters[id] = ch
	}
	return ch
}

// notify wakes the requests held on id. Called under s.mu after id's
// state changed.
func (s *shard) notify(id string) {
	if ch := s.waiters[id]; ch != nil {
		close(ch)
		delete(s.waiters, id)
	}
}

// hold runs op and, while it answers CONCURRENT_TRANSACTIONS, waits for
// id's next committed state change and runs it again, for at most
// concurrentHold and within ctx; it gives up at once when the shard
// closes. The last answer is returned: the client gets what a retry right
// after the change would have got, or CONCURRENT_TRANSACTIONS when the
// hold ran out.
func (s *shard) hold(ctx context.Context, kind string, id string, op func() error) error {
	timer := time.NewTimer(concurrentHold)
	defer timer.Stop()
	for {
		s.mu.Lock()
		ch := s.changed(id)
		s.mu.Unlock()
		err := op()
		if !kerr.Is(err, kerr.ConcurrentTransactions) {
			return err
		}
		select {
		case <-ch:
			continue
		case <-timer.C:
		case <-ctx.Done():
		case <-s.done:
		}
		s.c.countConcurrent(kind)
		return err
	}
}

// Request kinds counted by ConcurrentAnswers.
const (
	KindInitProducerID = "InitProducerId"
	KindAddPartitions  = "AddPartitionsToTxn"
)

// Kinds lists the request kinds counted by ConcurrentAnswers.
func Kinds() []string { return []string{KindInitProducerID, KindAddPartitions} }

// concurrentAnswers counts CONCURRENT_TRANSACTIONS answers by request kind.
type concurrentAnswers struct {
	mu sync.Mutex
	n  map[string]int64
}

func (c *Coordinator) countConcurrent(kind string) {
	c.answers.mu.Lock()
	defer c.answers.mu.Unlock()
	if c.answers.n == nil {
		c.answers.n = map[string]int64{}
	}
	c.answers.n[kind]++
}

// ConcurrentAnswers returns how many CONCURRENT_TRANSACTIONS answers this
// coordinator gave, by request kind (KindInitProducerID, KindAddPartitions;
// AddOffsetsToTxn counts as AddPartitionsToTxn).
func (c *Coordinator) ConcurrentAnswers() map[string]int64 {
	c.answers.mu.Lock()
	defer c.answers.mu.Unlock()
	return maps.Clone(c.answers.n)
}
