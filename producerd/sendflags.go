package main

import (
	"flag"
	"time"

	"github.com/tapes-dev/tapes/internal/client"
	"github.com/tapes-dev/tapes/internal/producer"
)

// sendOpts are the flags producerd and producerd perf share: which
// acknowledgement to wait for, and how records are batched, pipelined and
// retried.
type sendOpts struct {
	acksStr         string
	acks            int32
	idempotent      bool
	maxInFlight     int
	linger          time.Duration
	batchBytes      int
	deliveryTimeout time.Duration
	requestTimeout  time.Duration
}

// The batching defaults of producerd and producerd perf, chosen by
// measurement (internal/bench TestBenchProducerDefaults, ARCHITECTURE.md
// "Where the time goes"): acks=all idempotent records/s over a grid of
// batch size, linger and requests in flight, the fastest whose p99 at half
// its rate was the lowest. 256 KiB batches carry about 2,500 100-byte
// records per Raft entry where Kafka's 16 KiB carry 160. internal/producer
// keeps Kafka's defaults for its library users (DefaultConfig).
const (
	defaultBatchBytes  = 262144
	defaultLinger      = 5 * time.Millisecond
	defaultMaxInFlight = 1
)

func (s *sendOpts) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&s.acksStr, "acks", "all", "acknowledgement to wait for: 0 (none), 1 (the leader's log) or all (committed by Raft)")
	fs.BoolVar(&s.idempotent, "idempotent", false, "idempotent producer: producer id and sequence numbers, so retries neither duplicate nor reorder (needs --acks all)")
	fs.IntVar(&s.maxInFlight, "max-in-flight", defaultMaxInFlight, "most Produce requests in flight per partition (at most 5 with --idempotent; Kafka's default is 5)")
	s.linger = defaultLinger
	fs.Var(msDuration{&s.linger}, "linger", "how long a batch waits for more records: `ms` as a number (5) or a duration (5ms)")
	fs.IntVar(&s.batchBytes, "batch-bytes", defaultBatchBytes, "a partition's batch is sent once it holds this many bytes (Kafka's batch.size, whose default is 16384)")
	fs.DurationVar(&s.deliveryTimeout, "delivery-timeout", producer.DefaultDeliveryTimeout, "a batch not acknowledged this long after its first record fails with REQUEST_TIMED_OUT")
	fs.DurationVar(&s.requestTimeout, "request-timeout", producer.DefaultRequestTimeout, "how long one Produce request may take before it counts as failed and is retried")
}

// check validates the shared flags and parses --acks; idempotence needs
// acks=all and at most MaxIdempotentInFlight requests in flight, as Kafka's
// enable.idempotence does.
func (s *sendOpts) check() error {
	switch {
	case s.maxInFlight < 1:
		return usagef("--max-in-flight %d: want at least 1", s.maxInFlight)
	case s.linger < 0:
		return usagef("--linger %v: want 0 or more", s.linger)
	case s.batchBytes < 1:
		return usagef("--batch-bytes %d: want at least 1", s.batchBytes)
	case s.deliveryTimeout <= 0:
		return usagef("--delivery-timeout %v: want more than 0", s.deliveryTimeout)
	case s.requestTimeout <= 0:
		return usagef("--request-timeout %v: want more than 0", s.requestTimeout)
	}
	acks, err := client.ParseAcks(s.acksStr)
	if err != nil {
		return usagef("--acks %q: want 0, 1 or all", s.acksStr)
	}
	s.acks = acks
	if s.idempotent {
		switch {
		case s.acks != client.AcksAll:
			return usagef("--idempotent needs --acks all, not --acks %s (as Kafka's enable.idempotence)", s.acksStr)
		case s.maxInFlight > producer.MaxIdempotentInFlight:
			return usagef("--idempotent allows --max-in-flight up to %d, not %d", producer.MaxIdempotentInFlight, s.maxInFlight)
		}
	}
	return nil
}
