// Package txn is the transaction coordinator that runs inside every broker
// (issue 13 point 1): Kafka's transactional producer protocol
// (InitProducerId with a transactional id, AddPartitionsToTxn,
// AddOffsetsToTxn, EndTxn, DescribeTransactions, ListTransactions) with its
// state kept in the internal topic __transaction_state.
//
// The coordinator of transactional id T is the ready leader of partition
// PartitionFor(T, N) of __transaction_state (Kafka's formula, the one the
// consumer groups use). It is modelled on the group coordinator
// (internal/group): a broker's [Coordinator] serves the transactional ids
// of every such partition it leads; when it becomes a partition's ready
// leader (a new Raft term) it rebuilds every transaction's state by reading
// the partition from its log start (the latest record of each id wins) and
// finishes what was prepared: a transaction found in PrepareCommit or
// PrepareAbort has its markers (re)sent to every partition, then
// CompleteCommit or CompleteAbort is written. Every state change is
// appended with acks=all and applied to the in-memory state only once
// committed, and one transactional id has at most one write in flight
// (another request meanwhile is CONCURRENT_TRANSACTIONS), so the log's
// order is the order of its state changes.
//
// Markers are written through [Markers] (the broker sends Kafka's
// WriteTxnMarkers to each partition's leader); the coordinator retries the
// partitions that failed with the project's one backoff (client.Backoff)
// until every partition holds its marker or the coordinator loses the
// partition's leadership. Transactions older than their timeout are
// aborted by the coordinator with the producer epoch bumped, so the
// producer is fenced (Kafka's transaction.timeout.ms); time comes from
// Config.Now and the ticker from Config.Tick, so tests drive both
// (testing/synctest).
package txn
