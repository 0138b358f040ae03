// Package consumer owns the client side of a consumer group member: the
// group protocol (JoinGroup/SyncGroup with MEMBER_ID_REQUIRED, heartbeats,
// rejoining on REBALANCE_IN_PROGRESS, the leader computing the assignment
// with package assign), the eager (range) and incremental cooperative
// (cooperative-sticky, KIP-429) rebalance protocols, fetching from the
// assigned partitions, positions, and offset commits fenced by generation.
//
// Threading follows Kafka's Java consumer. The application calls Poll from
// one goroutine (the poll goroutine); every callback (Listener) runs on it,
// inside Poll, so the application commits in Revoked exactly what it has
// processed. A member goroutine talks to the coordinator: it runs the join
// and sync when the poll goroutine asks for a rebalance and heartbeats in
// between; under the cooperative protocol Poll keeps returning records of
// the partitions the member still owns while a rebalance is in progress.
// One fetcher goroutine per owned partition long-polls its leader and
// buffers records; Poll hands them out in offset order, at most
// max records per call.
//
// Not provided: several topics per member (one topic per consumer, as the
// project's daemons use), static membership, and Kafka's
// CommitFailedException hierarchy (commit errors keep their Kafka name).
package consumer
