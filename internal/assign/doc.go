// Package assign owns the partition assignment algorithms of consumer groups:
// given the partition counts of the topics and the members' subscriptions
// (with the partitions each member currently owns and the generation in which
// it got them), it computes which member gets which partitions.
//
// Two assignors are provided:
//
//   - [Range] ("range"), Kafka's RangeAssignor: eager, per topic the sorted
//     subscribers get contiguous ranges of partitions, the first ones one
//     more. Under the eager protocol every member revokes everything it owns
//     before each rebalance, so owned partitions are ignored.
//   - [CooperativeSticky] ("cooperative-sticky"), the KIP-429 incremental
//     cooperative protocol: the members as balanced as their subscriptions
//     allow (with identical subscriptions, within one partition, and each
//     topic split to within one too), sticky otherwise: as few owned
//     partitions move as that balance allows. A
//     partition that must move to another member is left out of the
//     assignment returned in that round: its current owner sees it missing
//     and revokes it, then triggers a second rebalance in which it is free
//     and handed to its new owner. A partition is therefore never assigned to
//     a new owner while a member of the group still claims it, and the second
//     rebalance computes the same assignment as the first: it hands over what
//     was revoked, to the members the first one meant, and nothing else.
//
// The package is pure: no I/O, no clocks, no randomness; the output is
// deterministic (members and partitions are sorted), and does not depend on
// the order of the subscriptions or of the partitions a member owns. The group coordinator
// runs the protocol (JoinGroup/SyncGroup, generations, fencing); this package
// only computes assignments.
package assign
