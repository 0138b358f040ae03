// Package producer is the producer of producerd: it batches records per
// partition, sends the batches to partition leaders through the shared
// client's routing with up to MaxInFlight requests per partition, retries
// what Kafka's producer retries, numbers the batches of an idempotent
// producer, and reports every record's outcome exactly once. The same
// package writes the history file (History) and keeps the latency figures
// of `producerd perf` (Latencies).
//
// # Partitions
//
// A keyed record goes to partitioner.ForKey(key, partitions), Kafka's
// murmur2 choice; a keyless one to the sticky partitioner, which moves on
// after the batch it fills reaches BatchBytes.
//
// # Batches
//
// Each partition has one open batch that Send appends to. A batch is closed
// when the next record would take it past BatchBytes (or the topic's
// max.message.bytes, whichever is smaller), and otherwise when it is its
// partition's turn to send and it has waited Linger. As in Kafka, a batch
// that waits for a free in-flight slot keeps filling up to BatchBytes. One
// batch is one Produce request for one partition: the broker API has no
// multi-partition produce.
//
// # Retries
//
// Each attempt is one request to the leader the client's metadata names (or
// the leader a NOT_LEADER_OR_FOLLOWER answer hinted at) with a deadline of
// RequestTimeout. A retriable Kafka error (kerr.Code.Retriable) or a
// transport failure is retried after a backoff (RetryBackoff doubling to
// RetryBackoffMax, ±20% jitter) while the batch has had at most Retries
// failed attempts and is younger than DeliveryTimeout; errors that may mean
// the leader moved also refresh the metadata. A retried batch goes back
// ahead of every newer batch of its partition, and the partition sends
// nothing else while a retried batch waits for its backoff.
//
// Without idempotence that is all: a batch whose answer was lost is sent
// again and may be written twice, and with several requests in flight a
// retried batch may land after newer ones (Kafka's at-least-once; the
// lesson, not hidden).
//
// # Idempotence
//
// With Idempotent, New asks the cluster for a producer id (InitProducerId);
// each partition numbers its records from 0 (a batch's base sequence is the
// previous batch's plus its record count, fixed when the batch is closed),
// and the broker appends only the batch that follows the last one it holds,
// answers a retried batch it already has with duplicate=true and its
// original offset, and refuses a gap with OUT_OF_ORDER_SEQUENCE_NUMBER.
// Ordering then holds with up to 5 requests in flight, as in Kafka:
//
//   - A partition sends its first batch alone and pipelines only after it was
//     acknowledged (a broker that does not know the producer yet would take
//     any sequence).
//   - When an attempt fails retriably, the partition stops sending, waits
//     for its in-flight requests to end, and resends the failed batches in
//     sequence order, one at a time until one succeeds; then pipelining
//     resumes.
//   - OUT_OF_ORDER_SEQUENCE_NUMBER for a batch that was sent while an earlier
//     batch of the partition was still unacknowledged is expected (that
//     batch failed, or the broker handled the two requests out of order): the
//     batch is resent once no earlier batch is in flight, and such attempts
//     do not count against Retries. The same error for a batch sent with
//     nothing before it unacknowledged means the broker lost batches it had
//     acknowledged: the batch fails.
//   - A batch that fails for good (retries or delivery timeout exhausted, or
//     a non-retriable error) fails in sequence order, once nothing is in
//     flight. The partition then bumps its producer epoch and renumbers the
//     batches behind it from 0, so that they are not refused as a gap. If the
//     failed batch may have been written (an attempt's outcome was unknown),
//     the batches behind it that were already sent fail with it: their
//     outcome is unknown too.
//
// # Outcomes
//
// Every record handed to Send is reported once, through Config.OnBatch,
// with its partition, offset (-1 when unknown), the number of requests that
// carried it, and an error name when it failed: a Kafka error name from the
// broker, NETWORK_EXCEPTION for a transport failure, REQUEST_TIMED_OUT for
// an attempt that was not answered in time or a batch older than
// DeliveryTimeout, and PRODUCER_CLOSED for records whose outcome was still
// open when Close gave up waiting.
package producer
