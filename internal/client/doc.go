// Package client owns the Go client every tapes binary and test shares
// (producerd, consumerd, cluster, chaos): dialing brokers, the metadata
// cache (brokers, and per partition its leader and leader epoch), routing
// Produce, Fetch and ListOffsets to the partition leader, and retrying what
// Kafka's client retries.
//
// Routing and retries. A leader-routed call looks the leader up in the
// cache, sends the request with a per-attempt deadline
// (Config.RequestTimeout) and, on an error worth retrying, waits (backoff
// from Config.RetryBackoff, doubling to about a second) and tries again until
// the caller's context ends. What makes the cache stale: its age
// (Config.MetadataMaxAge), NOT_LEADER_OR_FOLLOWER (whose leader hint is used
// at once when its epoch is newer than the cached one), LEADER_NOT_AVAILABLE,
// UNKNOWN_TOPIC_OR_PARTITION, and transport failures (gRPC Unavailable, or an
// attempt's own deadline).
//
// Every retry loop (any broker, leader, coordinator, and the per-topic
// results of CreateTopics and DeleteTopics) shares one Backoff and calls
// Config.OnRetry before each wait. A Kafka error is retried when its code is
// retriable or the broker marked its detail retriable. While no broker has
// ever answered and every address refuses connections, Config.UnreachableAfter
// ends a call with *UnreachableError (ErrUnreachable) instead of retrying
// until the deadline.
//
// Errors. Every error a broker sent arrives as *kerr.Error (match it with
// kerr.Is or kerr.CodeOf), wrapped with the operation and partition. When the
// caller's context ends during retries, the error wraps both the context's
// error and the last error seen.
//
// Produce and unknown outcomes: see ProduceOptions.
package client
