// Package broker owns one tapes broker process: its gRPC server (the client
// API, the controller calls and the Raft transport, all on one port), its
// seat in the controller quorum, and the partition replicas the controller's
// assignment gives it. It reconciles the replicas it hosts with the
// replicated metadata, forwards controller commands to the controller leader,
// and reports each partition it leads (leader, epoch, ISR) back to it.
package broker
