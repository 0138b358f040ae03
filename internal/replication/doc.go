// Package replication owns one partition replica on one broker: its Raft
// group (hashicorp/raft with a raft-boltdb log store), the state machine that
// applies committed record batches to the on-disk partition log
// (internal/storage), and the leader-side rules of Kafka's API on top of it:
// acks 0/1/all, min.insync.replicas, the ISR computed from followers' real log
// progress, the high watermark, long-poll fetches and retention.
//
// Offsets are assigned by the state machine when an entry is applied, so
// every replica stores the same record at the same offset.
package replication
