// Package group owns the consumer group coordinator that runs inside every
// broker: Kafka's classic group membership protocol (JoinGroup, SyncGroup,
// Heartbeat, LeaveGroup with member ids, generations and rebalances) and
// committed offsets (OffsetCommit fenced by generation, OffsetFetch), with
// their state kept in the internal topic __consumer_offsets.
//
// The coordinator of group G is the leader of partition
// PartitionFor(G, N) of __consumer_offsets. A broker's [Coordinator] serves
// the groups of every such partition it leads: when it becomes a partition's
// ready leader (a new Raft term), it rebuilds that partition's groups and
// offsets by reading the partition from its log start (the latest record
// of each key wins, see records.go); when it stops leading, it drops them
// and answers NOT_COORDINATOR, and members find the next coordinator. Every
// write (an offset commit, a generation's assignment, a group becoming
// empty) is appended with acks=all and applied to the in-memory state only
// once committed, so what a member was told survives the coordinator's
// crash. A partition that has grown past Config.CompactAfter records is
// compacted by its coordinator (compact.go): the latest record of each key
// is written again and the log start moved past the rest. Transactional
// offset commits (TxnOffsetCommit, txn.go) are written as pending records
// of their producer and become committed offsets only when that
// producer's commit marker appears in the partition (an abort marker
// discards them); the coordinator finds markers by reading its partition.
//
// The assignment itself is computed by the group's leader member (package
// assign, through internal/consumerproto); the coordinator only carries the
// members' metadata and the leader's assignments as opaque bytes, as
// Kafka's does, choosing the group's protocol by Kafka's vote
// (group.chooseProtocol), so that any Kafka client can share a group.
// Session timeouts, rebalance timeouts and the initial rebalance delay are
// driven by one ticker per Coordinator; the time comes from Config.Now so
// tests can drive it.
package group
