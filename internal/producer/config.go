package producer

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/tapes-dev/tapes/internal/client"
)

// Kafka's producer defaults, used by DefaultConfig.
const (
	DefaultMaxInFlight     = 5
	DefaultLinger          = 5 * time.Millisecond
	DefaultBatchBytes      = 16384
	DefaultRetries         = math.MaxInt32
	DefaultDeliveryTimeout = 2 * time.Minute
	DefaultRequestTimeout  = 10 * time.Second
	DefaultRetryBackoff    = 100 * time.Millisecond
	DefaultRetryBackoffMax = time.Second
	DefaultBufferBytes     = 32 << 20
	// MaxIdempotentInFlight is the most requests per partition an idempotent
	// producer may have in flight: the broker remembers the last 5 batches
	// of each producer.
	MaxIdempotentInFlight = 5
)

// Error names the producer itself gives, beside the brokers' Kafka names.
const (
	// ErrNameNetwork is a transport failure (no connection, connection
	// lost): Kafka's NETWORK_EXCEPTION.
	ErrNameNetwork = "NETWORK_EXCEPTION"
	// ErrNameTimeout is an attempt not answered within RequestTimeout, or a
	// batch that reached DeliveryTimeout: Kafka's REQUEST_TIMED_OUT.
	ErrNameTimeout = "REQUEST_TIMED_OUT"
	// ErrNameClosed is a record whose outcome was still open when Close gave
	// up waiting: it may or may not be in the log.
	ErrNameClosed = "PRODUCER_CLOSED"
	// ErrNameUnknown is an error without a Kafka name.
	ErrNameUnknown = "UNKNOWN_SERVER_ERROR"
)

// Config is what a Producer does. Start from DefaultConfig.
type Config struct {
	// Topic is the topic every record goes to.
	Topic string
	// Acks is client.AcksNone, client.AcksLeader or client.AcksAll.
	Acks int32
	// Idempotent turns on the idempotent producer: a producer id from the
	// cluster, sequence numbers per partition, no duplicates on retry, order
	// kept with up to 5 requests in flight. It needs AcksAll, at most 5 in
	// flight and at least one retry, as in Kafka.
	Idempotent bool
	// MaxInFlight is the most Produce requests in flight per partition
	// (Kafka's max.in.flight.requests.per.connection).
	MaxInFlight int
	// Linger is how long a batch waits for more records before it is sent
	// (linger.ms); 0 sends as soon as the partition may send.
	Linger time.Duration
	// BatchBytes closes a batch once its encoded records reach this size
	// (batch.size). A record larger than it travels alone.
	BatchBytes int
	// Retries is the most failed attempts a batch may be retried after
	// (retries); 0 never retries.
	Retries int
	// DeliveryTimeout bounds the time from a batch's first record to its
	// outcome (delivery.timeout.ms): an older batch is not retried again.
	DeliveryTimeout time.Duration
	// RequestTimeout is each attempt's deadline (request.timeout.ms); the
	// leader is asked to answer within three quarters of it.
	RequestTimeout time.Duration
	// RetryBackoff and RetryBackoffMax: the wait before a retry starts at
	// RetryBackoff and doubles up to RetryBackoffMax.
	RetryBackoff, RetryBackoffMax time.Duration
	// BufferBytes bounds the bytes of records waiting for their outcome
	// (buffer.memory): Send blocks while they would exceed it.
	BufferBytes int64
	// OnBatch, if set, receives every batch's outcome, once, from the
	// partition's goroutine (several partitions call it concurrently).
	OnBatch func(*Result)
	// Logger receives retries and failures (Debug and Warn); nil discards.
	Logger *slog.Logger
	// Now is the producer's clock (nil: time.Now): record send times, and
	// with them linger, retry backoff and the delivery timeout. Tests make
	// time an input with it; the partition goroutine's timer still sleeps
	// real time for the durations this clock computes.
	Now func() time.Time
}

// DefaultConfig returns Kafka's producer defaults for topic, with acks=all.
func DefaultConfig(topic string) Config {
	return Config{
		Topic: topic, Acks: client.AcksAll, MaxInFlight: DefaultMaxInFlight, Linger: DefaultLinger,
		BatchBytes: DefaultBatchBytes, Retries: DefaultRetries, DeliveryTimeout: DefaultDeliveryTimeout,
		RequestTimeout: DefaultRequestTimeout, RetryBackoff: DefaultRetryBackoff, RetryBackoffMax: DefaultRetryBackoffMax,
		BufferBytes: DefaultBufferBytes,
	}
}

// ErrInvalidConfig marks a Config that Validate rejects.
var ErrInvalidConfig = errors.New("invalid producer config")

// Validate checks c and names the offending setting.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case c.Topic == "":
		return bad("no topic")
	case c.Acks != client.AcksNone && c.Acks != client.AcksLeader && c.Acks != client.AcksAll:
		return bad("acks %d: want 0, 1 or -1 (all)", c.Acks)
	case c.MaxInFlight < 1:
		return bad("max in flight %d: want at least 1", c.MaxInFlight)
	case c.Linger < 0:
		return bad("linger %v: want 0 or more", c.Linger)
	case c.BatchBytes < 1:
		return bad("batch bytes %d: want at least 1", c.BatchBytes)
	case c.Retries < 0:
		return bad("retries %d: want 0 or more", c.Retries)
	case c.DeliveryTimeout <= 0:
		return bad("delivery timeout %v: want more than 0", c.DeliveryTimeout)
	case c.RequestTimeout <= 0:
		return bad("request timeout %v: want more than 0", c.RequestTimeout)
	case c.RetryBackoff <= 0 || c.RetryBackoffMax < c.RetryBackoff:
		return bad("retry backoff %v up to %v: want 0 < backoff <= max", c.RetryBackoff, c.RetryBackoffMax)
	case c.BufferBytes < 1:
		return bad("buffer bytes %d: want at least 1", c.BufferBytes)
	}
	if c.Idempotent {
		switch {
		case c.Acks != client.AcksAll:
			return bad("the idempotent producer needs acks=all, not acks=%s", AcksName(c.Acks))
		case c.MaxInFlight > MaxIdempotentInFlight:
			return bad("the idempotent producer allows at most %d requests in flight per partition, not %d", MaxIdempotentInFlight, c.MaxInFlight)
		case c.Retries < 1:
			return bad("the idempotent producer needs retries, not retries=0")
		}
	}
	return nil
}

// AcksName spells an acks value as Kafka's config does: "0", "1" or "all".
func AcksName(acks int32) string {
	if acks == client.AcksAll {
		return "all"
	}
	return fmt.Sprint(acks)
}
