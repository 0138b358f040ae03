// Package check owns the checker of tapes' chaos experiments: it reads what
// the producers sent (producer.HistoryLine files), what the consumers
// processed (consumer.HistoryLine files), optionally a full read of the
// topic (ReadTopic) and a consumer group's sink (through sink.ComputeStats),
// and names every anomaly it finds, with the records and offsets involved,
// in the vocabulary of Jepsen's Kafka workload. `chaos check` is its command
// line; the experiment runner writes its Result as the report's checker
// JSON.
//
// # Anomalies
//
// A record is identified by its event_id header (records without one by
// their value, shown as value:"..."). "Read" means processed by a consumer
// (a "record" line of a consumer history) or present in the full read.
//
//   - lost-write: acknowledged (status ok) and never read, although a later
//     offset of its partition was read. With an unknown offset (acks=0), a
//     later send of the same producer (event_id PRODUCER-HEX-N, higher N) to
//     the same partition was read.
//   - unseen: acknowledged and never read. Every lost-write is also unseen;
//     an unseen record that is not a lost-write was simply not read by the
//     end (with a full read at the end: it is not in the log).
//   - duplicate: one event_id at several (partition, offset) positions, from
//     the consumers, the full read and the producers' acknowledged offsets.
//   - inconsistent-offsets: several records seen at one (partition, offset)
//     by the consumers, the full read and the producers' acknowledged
//     offsets.
//   - nonmonotonic-poll: within one ownership of a partition by a consumer
//     (from the "assigned" line that includes it to the "revoked" or "lost"
//     line that includes it, in one history file), a record processed at an
//     offset at or below the previous one. A "gap" line or a new "assigned"
//     line resets the ownership's order.
//   - poll-skip: within one ownership, a jump of more than one offset over
//     offsets known to exist: read by any consumer, in the full read, or
//     acknowledged with acks=all (committed, so in the log unless retention
//     deleted it, which a "gap" line reports and which is not a skip).
//   - nonmonotonic-send: within one producer (PRODUCER-HEX) and one
//     partition, a record acknowledged at a lower offset than a record the
//     producer sent before it (lower N). Expected from a keyless or
//     non-idempotent pipelining producer; the caller decides.
//   - aborted-read: a record read whose send failed definitely: the history
//     shows no attempt, or one attempt answered with an error that means the
//     broker appended nothing (NOT_ENOUGH_REPLICAS, NOT_LEADER_OR_FOLLOWER,
//     ...).
//   - indeterminate-read: a record read whose send failed with an outcome
//     the producer could not know (REQUEST_TIMED_OUT, NETWORK_EXCEPTION,
//     NOT_ENOUGH_REPLICAS_AFTER_APPEND, PRODUCER_CLOSED, or several
//     attempts): being visible is allowed, as Jepsen's :info operations. It
//     is reported, never part of the safe expectation.
//
// With a sink (Input.SinkDB), sink.ComputeStats adds duplicate-effect (its
// Duplicates), never-processed (NeverProcessed) and out-of-key-order
// (OutOfKeyOrder).
//
// Acknowledged records that nobody read and that retention deleted (an
// offset below the full read's log start, or inside a consumer's "gap") are
// neither lost nor unseen: Result.DeletedByRetention counts them.
//
// # Transactional histories
//
// Input.TxnHistories are JSON-lines files of TxnLine (txnhistory.go),
// written beside the producer and consumer histories by the processes of a
// transactional pipeline; without them Check reads and judges exactly what
// it did before, and the kinds below are absent from Result.Counts. Line
// types: "begin" (txn, transactional_id, producer_id, epoch; written once
// InitProducerId answered), "send" (a
// record sent in txn: event_id, topic, partition, offset or -1, status),
// "end" (txn, outcome commit|abort, status requested|ok|error|unknown; the
// requested line is written before EndTxn is sent), "isolation" (the
// process reads read_committed or read_uncommitted from here on), "read"
// (event_id at topic, partition, offset), "step" (a read-process-write step
// of txn: the inputs it consumed and whose offsets it committed; its
// outputs are txn's sends), "lso" (a read_committed reader saw partition
// topic/partition at lso with high watermark hw, at at), "effect" (an
// external sink, named by process, applied input_event_id's effect once).
//
// A transaction is committed when a commit was answered ok, or asked and
// one of its writes was read by a read_committed reader; aborted when no
// commit was ever asked (an abort answered or not, a process killed before
// committing, a fenced zombie that never got to EndTxn); unknown otherwise.
// The writer of a record read or consumed is the transaction whose ok send
// is at its position, else the only one that sent its event_id there with
// an unknown offset.
//
//   - aborted-read: a read_committed reader read a write of an aborted
//     transaction (counted with the non-transactional aborted-read).
//     read_uncommitted readers may: TxnStats.AbortedSeenUncommitted.
//   - G1a: a committed transaction consumed (a step input) a write of an
//     aborted transaction.
//   - lost-write: a committed transaction's acknowledged write that no
//     read_committed reader read, though one read a later offset of its
//     partition.
//   - duplicate: an input position consumed by steps of several committed
//     transactions; an event_id read by read_committed readers at several
//     positions.
//   - G1c: a cycle of write-read dependencies between committed
//     transactions (T1 -wr-> T2: a step of T2 consumed a write of T1).
//     Write-write order (offsets within a partition) gives no edges: Kafka
//     allows write cycles (G0) and interleaves concurrent transactions'
//     writes; read-write anti-dependencies cannot be derived from the
//     histories. So G0, G1b, G2 and cycles through ww edges are not
//     detected.
//   - zombie-commit: a committed transaction of transactional id T at
//     epoch e whose commit was asked after a transaction of T at a higher
//     epoch began (begin lines are written once InitProducerId answered):
//     a fenced producer committed. Judged on the lines' at (one host's
//     clock); a commit asked before the successor began is not judged.
//   - hung-lso: a read_committed reader's observations of one partition
//     stayed at one LSO, with the high watermark above it, for
//     Input.HungLSOAfter or longer (DefaultHungLSOAfter); the transaction
//     whose write is at the LSO is named. TxnStats.LongestLSOHang has the
//     longest stretch, whatever its length.
//   - external-duplicate: an external sink applied one input event's
//     effect more than once (counted per sink and event; not a log
//     anomaly).
//
// # Expectations
//
// An Expectation names the kinds that must be zero (and those that must be
// positive, for experiments that must show an anomaly). Safe is the profile
// of acks=all, an idempotent producer, commit after processing and an
// idempotent sink. A kind the inputs could not check (the sink kinds without
// a sink) is absent from Result.Counts and does not fail MustBeZero.
package check
