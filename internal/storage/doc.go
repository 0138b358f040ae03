// Package storage owns the on-disk log of one partition replica, and the
// record batch codec that producers, the Raft FSM and this log share.
//
// A Batch is what one produce request becomes and what one Raft entry
// carries: records with offset deltas, protected by a CRC32C, and in its
// header the idempotent producer's id, epoch and base sequence (ProducerInfo;
// NoProducer for other producers and for batches of format version 1, which
// is still read). A Batch of version 3 is a Kafka record batch v2 kept as
// the producer sent it, compression included (WrapKafka; Batch.Kafka returns
// those bytes, with the base offset and partition leader epoch of the
// append, for a Kafka Fetch to answer verbatim); its records decode through
// internal/recordbatch. Log.ScanBatches reads those headers without the records,
// so that the partition's producer state can be rebuilt cheaply from the log
// after a restart or a snapshot install.
//
// A Log stores batches in a directory of segment files, assigning offsets as
// it appends, and remembers the highest Raft index it has applied so that
// entries replayed after a restart are refused (ErrAlreadyApplied) instead of
// being stored twice.
//
// Files in a log directory:
//
//	00000000000000000000.log        a segment: stored batches (frames), named by base offset
//	00000000000000000000.index      its sparse offset index
//	00000000000000000000.timeindex  its sparse time index
//	checkpoint.json                 log start offset and the Raft index that last moved it
//	.snap-N/                        hard links held by a Snapshot until Release
//
// Restore also uses two siblings of the directory, DIR.restore and DIR.old,
// while it swaps a snapshot in; Open finishes or undoes a swap that a crash
// interrupted.
//
// Concurrency: the writing methods (Append, DeleteBefore, Snapshot, Restore,
// Sync, Close) are serialized internally and are meant to be called from one
// goroutine (the Raft FSM). The reading methods (Read, ReadBatches, ScanBatches,
// StartOffset, EndOffset, LastRaftIndex, OffsetForTimestamp, Segments,
// RetentionPoint) may be called from any number of goroutines at any time;
// they hold a read lock only to copy positions and read file bytes outside
// it, so they do not hold up appends.
//
// Durability: appends are not fsynced; the Raft log is the durable copy and
// Raft replays what a crash lost. Sync (which Snapshot and DeleteBefore call)
// makes everything appended so far durable. Open repairs what a crash left:
// it cuts a torn or corrupt tail and rebuilds indexes that do not match.
// Every fsync of this package goes through SyncFile and is counted by kind
// (Fsyncs; the broker exports the counts as tapes_fsyncs_total).
package storage
