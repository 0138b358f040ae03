package partitioner

import (
	"math/rand/v2"
	"sync"
)

// Sticky is the sticky partitioner for keyless records: every record goes
// to the current partition until the batch being filled there is full (about
// batch.size bytes), then it moves to another partition chosen at random,
// never the one it leaves when more than one exists. Compared with round
// robin it makes fewer, larger batches (Kafka's KIP-480 and KIP-794).
//
// Unlike Kafka's BuiltInPartitioner it does not weigh partitions by queue
// length nor skip partitions without a leader: the caller's retries handle a
// leaderless partition.
//
// The zero value is ready to use and draws from the global random source.
// A Sticky is safe for concurrent use.
type Sticky struct {
	mu      sync.Mutex
	rng     *rand.Rand // nil: the global source
	current int32
	chosen  bool
}

// NewSticky returns a Sticky drawing from rng (deterministic tests pass a
// seeded source); nil means the global source.
func NewSticky(rng *rand.Rand) *Sticky { return &Sticky{rng: rng} }

// Next returns the partition for the next keyless record among partitions
// (which must be positive). batchFull reports that the batch on the partition
// Next returned last has reached its size: Next then moves to a different
// partition. It also chooses afresh on the first call and when the current
// partition no longer exists (partitions shrank).
func (s *Sticky) Next(partitions int32, batchFull bool) int32 {
	if partitions <= 0 {
		panic("partitioner: Sticky.Next with no partitions")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !s.chosen || s.current >= partitions:
		s.current = s.intN(partitions)
		s.chosen = true
	case batchFull && partitions > 1:
		// Draw among the partitions-1 others: skip over the current one.
		p := s.intN(partitions - 1)
		if p >= s.current {
			p++
		}
		s.current = p
	}
	return s.current
}

func (s *Sticky) intN(n int32) int32 {
	if s.rng != nil {
		return s.rng.Int32N(n)
	}
	return rand.Int32N(n)
}
