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
// # Expectations
//
// An Expectation names the kinds that must be zero (and those that must be
// positive, for experiments that must show an anomaly). Safe is the profile
// of acks=all, an idempotent producer, commit after processing and an
// idempotent sink. A kind the inputs could not check (the sink kinds without
// a sink) is absent from Result.Counts and does not fail MustBeZero.
package check
