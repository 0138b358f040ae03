package check

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tapes-dev/tapes/internal/sink"
)

// Anomaly kinds, in the order reports list them.
const (
	LostWrite           = "lost-write"
	Unseen              = "unseen"
	Duplicate           = "duplicate"
	InconsistentOffsets = "inconsistent-offsets"
	NonmonotonicPoll    = "nonmonotonic-poll"
	PollSkip            = "poll-skip"
	NonmonotonicSend    = "nonmonotonic-send"
	AbortedRead         = "aborted-read"
	IndeterminateRead   = "indeterminate-read"
	DuplicateEffect     = "duplicate-effect"
	NeverProcessed      = "never-processed"
	OutOfKeyOrder       = "out-of-key-order"
	// The kinds only transactional histories can show (txn.go).
	G1a               = "G1a"
	G1c               = "G1c"
	ZombieCommit      = "zombie-commit"
	HungLSO           = "hung-lso"
	ExternalDuplicate = "external-duplicate"
)

// Kinds lists every anomaly kind, in report order.
var Kinds = []string{
	LostWrite, Unseen, Duplicate, InconsistentOffsets, NonmonotonicPoll, PollSkip,
	NonmonotonicSend, AbortedRead, IndeterminateRead,
	DuplicateEffect, NeverProcessed, OutOfKeyOrder,
	G1a, G1c, ZombieCommit, HungLSO, ExternalDuplicate,
}

// Notes says, for the kinds that count what a run may show by design
// rather than a fault, what a nonzero count means; reports print it beside
// the count (chaos run, report.html), and do not mark the count as bad.
var Notes = map[string]string{
	NonmonotonicSend: "sends reordered, not lost: a producer that pipelines requests (several in flight, not idempotent) " +
		"had a later record acknowledged at a lower offset, before or without any fault; no expectation counts it",
	IndeterminateRead: "records whose send outcome the producer could not know (a timeout, several attempts) were read: allowed, as Jepsen's :info",
	HungLSO: "a read_committed reader stayed at one last stable offset while later offsets existed, longer than the threshold: " +
		"an open transaction holds it (a liveness cost, not lost data); the longest stretch is in the result's txn section",
	ExternalDuplicate: "an external effect (an SMS, an HTTP call) applied more than once for one input event: " +
		"not a log anomaly, the transaction covers the log and the offsets only; an idempotent receiver keyed by event_id shows none",
}

// TxnKinds are the kinds only transactional histories can check: absent
// from Result.Counts without them (chaos check leaves them out of its
// table then).
var TxnKinds = []string{G1a, G1c, ZombieCommit, HungLSO, ExternalDuplicate}

// sinkKinds are the kinds only a sink can check.
var sinkKinds = []string{DuplicateEffect, NeverProcessed, OutOfKeyOrder}

// MaxPerKind is the most anomalies of one kind Result.Anomalies lists;
// Result.Counts has the totals.
const MaxPerKind = 50

// LogRecord is one record of a full read of a partition.
type LogRecord struct {
	Offset int64 `json:"offset"`
	// EventID is the record's event_id header, "" without one.
	EventID string `json:"event_id"`
	// Key is nil for a keyless record.
	Key   *string `json:"key"`
	Value string  `json:"value"`
}

// Input is what Check reads.
type Input struct {
	// ProducerHistories are producerd --history files (at least one).
	ProducerHistories []string
	// ConsumerHistories are consumerd --history files, one per consumer
	// process run. Check needs at least one of them, or Log.
	ConsumerHistories []string
	// Log is a full read of every partition (ReadTopic), nil without one.
	Log map[int32][]LogRecord
	// LogStart is each partition's log start offset at the full read.
	LogStart map[int32]int64
	// TxnHistories are transactional histories (ReadTxnHistory), none for
	// a run without transactions.
	TxnHistories []string
	// HungLSOAfter is how long a read_committed reader may stay at one LSO
	// while later offsets exist before it is a hung-lso anomaly;
	// DefaultHungLSOAfter when zero.
	HungLSOAfter time.Duration
	// SinkDB is the consumer group's sink file, "" without one.
	SinkDB string
	// Expect is what Result.Valid is computed against; the zero value
	// requires nothing.
	Expect Expectation
}

// Anomaly is one anomaly and the records and offsets involved.
type Anomaly struct {
	Kind string `json:"kind"`
	// Partition is -1 when unknown, or when the records are in several
	// partitions (Detail then names them).
	Partition int32 `json:"partition"`
	// Offsets are the offsets involved (none when unknown: acks=0).
	Offsets  []int64  `json:"offsets,omitempty"`
	EventIDs []string `json:"event_ids"`
	// Consumer is the consumer involved, for the poll anomalies (the
	// reader or processor, for the transactional kinds).
	Consumer string `json:"consumer,omitempty"`
	// Topic is the topic involved, for the transactional kinds (their
	// histories name several topics); "" otherwise.
	Topic string `json:"topic,omitempty"`
	// Txns are the transactions involved, for the transactional kinds.
	Txns   []string `json:"txns,omitempty"`
	Detail string   `json:"detail"`
}

// String is the anomaly on one line.
func (a Anomaly) String() string {
	var b strings.Builder
	if a.Topic != "" {
		fmt.Fprintf(&b, "topic %s ", a.Topic)
	}
	if a.Partition >= 0 {
		fmt.Fprintf(&b, "partition %d ", a.Partition)
	}
	if len(a.Offsets) > 0 {
		b.WriteString("offsets ")
		b.WriteString(joinInts(a.Offsets))
		b.WriteByte(' ')
	}
	if len(a.EventIDs) > 0 {
		b.WriteString("events ")
		b.WriteString(strings.Join(a.EventIDs, ","))
		b.WriteByte(' ')
	}
	if len(a.Txns) > 0 {
		b.WriteString("txns ")
		b.WriteString(strings.Join(a.Txns, ","))
		b.WriteByte(' ')
	}
	if a.Consumer != "" {
		fmt.Fprintf(&b, "consumer %s ", a.Consumer)
	}
	s := strings.TrimSuffix(b.String(), " ")
	if s == "" {
		return a.Detail
	}
	return s + ": " + a.Detail
}

func joinInts(xs []int64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.FormatInt(x, 10)
	}
	return strings.Join(parts, ",")
}

// Result is what Check found. It marshals to the report's checker JSON.
type Result struct {
	// Counts has, for every kind the inputs could check, the number of
	// anomalies found (0 included). Kinds that could not be checked (the
	// sink kinds without a sink, the transactional kinds without
	// transactional histories) are absent.
	Counts map[string]int `json:"counts"`
	// Anomalies lists up to MaxPerKind anomalies of each kind, in Kinds
	// order, then by partition and offset.
	Anomalies []Anomaly `json:"anomalies"`
	// Sent is the number of producer history lines; Acked and Failed those
	// with status ok and error.
	Sent   int64 `json:"sent"`
	Acked  int64 `json:"acked"`
	Failed int64 `json:"failed"`
	// Processed is the number of record lines of the consumer histories.
	Processed int64 `json:"processed"`
	// Read is the number of distinct records read by a consumer or in the
	// full read.
	Read int64 `json:"read"`
	// LogRecords is the number of records of the full read; -1 without one.
	LogRecords int64 `json:"log_records"`
	// DeletedByRetention is the number of acknowledged records nobody read
	// that retention deleted (below the full read's log start, or in a
	// consumer's gap): not anomalies.
	DeletedByRetention int64 `json:"deleted_by_retention"`
	// Sink is the sink's counters, nil without a sink.
	Sink *sink.Stats `json:"sink,omitempty"`
	// Txn is what the transactional histories showed, nil without them.
	Txn *TxnStats `json:"txn,omitempty"`
	// Expectation is the name of Input.Expect; Valid says whether the
	// result meets it, and Why lists what does not.
	Expectation string   `json:"expectation"`
	Valid       bool     `json:"valid"`
	Why         []string `json:"why,omitempty"`
}

// Expectation says which anomaly kinds a valid run must not show, and which
// it must show (an experiment demonstrating an anomaly).
type Expectation struct {
	Name           string   `json:"name"`
	MustBeZero     []string `json:"must_be_zero"`
	MustBePositive []string `json:"must_be_positive,omitempty"`
}

// Safe is the expectation of acks=all, an idempotent producer, commit after
// processing and an idempotent sink: nothing lost, duplicated, reordered
// within a poll, skipped or read after a definite failure, and every
// acknowledged record processed exactly once. nonmonotonic-send,
// indeterminate-read and out-of-key-order are reported, not required.
var Safe = Expectation{Name: "safe", MustBeZero: []string{
	LostWrite, Unseen, Duplicate, InconsistentOffsets, NonmonotonicPoll, PollSkip, AbortedRead,
	DuplicateEffect, NeverProcessed,
}}

// ExactlyOnce is the expectation of a transactional read-process-write
// pipeline judged from transactional histories: read_committed readers see
// no aborted write and every committed write once, no committed
// transaction consumed an aborted write, no input was processed into
// committed output twice, and no fenced producer committed. hung-lso and external-duplicate are reported,
// not required (the experiments that must show them say so).
var ExactlyOnce = Expectation{Name: "exactly-once", MustBeZero: []string{AbortedRead, G1a, LostWrite, Duplicate, G1c, ZombieCommit}}

// None requires nothing: the result is only reported.
var None = Expectation{Name: "none"}

// Expectations are the named expectations, by name.
var Expectations = map[string]Expectation{Safe.Name: Safe, ExactlyOnce.Name: ExactlyOnce, None.Name: None}

// Meets reports whether r meets e, and if not, why (one reason per kind).
// A kind r could not check does not fail MustBeZero but fails
// MustBePositive; a kind that does not exist fails either.
func (r Result) Meets(e Expectation) (bool, []string) {
	var why []string
	for _, k := range e.MustBeZero {
		n, checked := r.Counts[k]
		switch {
		case !slices.Contains(Kinds, k):
			why = append(why, fmt.Sprintf("%s: no such anomaly kind", k))
		case checked && n != 0:
			why = append(why, fmt.Sprintf("%s = %d (must be 0)", k, n))
		}
	}
	for _, k := range e.MustBePositive {
		n, checked := r.Counts[k]
		switch {
		case !slices.Contains(Kinds, k):
			why = append(why, fmt.Sprintf("%s: no such anomaly kind", k))
		case !checked:
			why = append(why, fmt.Sprintf("%s not checked (must be positive)", k))
		case n == 0:
			why = append(why, fmt.Sprintf("%s = 0 (must be positive)", k))
		}
	}
	return len(why) == 0, why
}
