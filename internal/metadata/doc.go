// Package metadata owns the cluster's metadata and the controller quorum's
// state machine: brokers, topics with their configs, the replica assignment
// of every partition, and each partition's leader, leader epoch and ISR as
// partition leaders report them. Commands are JSON, applied in Raft order on
// every broker, so every broker answers Metadata from its own copy.
//
// It also owns the rules that do not need Raft: topic name and config
// validation, and replica assignment.
package metadata
