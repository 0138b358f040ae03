package txn

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/tapes-dev/tapes/internal/group"
)

// StateTopic is the internal topic holding transaction state.
const StateTopic = "__transaction_state"

// PartitionFor returns the partition of __transaction_state (of n) that
// holds transactionalID: Kafka's Utils.abs(transactionalId.hashCode()) % n,
// the rule the consumer groups use (group.PartitionFor).
func PartitionFor(transactionalID string, n int32) int32 {
	return group.PartitionFor(transactionalID, n)
}

// Record is one record of a __transaction_state partition, the same
// key/value pair the group coordinator's log holds.
//
// The key is {"transactional_id":"T"}; the value the transaction's state
// (value, JSON), so that `cluster consume __transaction_state` is
// readable. The latest record of each key wins: one transactional id has
// at most one write in flight, so its records are in the order of its
// state changes. A record without value (a tombstone) removes its id: the
// id expired (expire.go), and its next InitProducerId starts afresh.
type Record = group.Record

// Log is one partition of __transaction_state as the coordinator uses it:
// the interface the group coordinator uses for __consumer_offsets (the
// broker implements both over its local replica).
type Log = group.Log

// State is a transaction's state, by Kafka's names (TransactionState).
type State string

// Kafka's transaction states. PrepareEpochFence is never stored: a fenced
// transaction is written as PrepareAbort with the bumped epoch.
const (
	Empty          State = "Empty"
	Ongoing        State = "Ongoing"
	PrepareCommit  State = "PrepareCommit"
	PrepareAbort   State = "PrepareAbort"
	CompleteCommit State = "CompleteCommit"
	CompleteAbort  State = "CompleteAbort"
	Dead           State = "Dead"
)

// States lists every state a transaction can be listed in.
var States = []State{Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort, Dead}

// TopicPartition names one partition of a transaction.
type TopicPartition struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
}

func (tp TopicPartition) String() string { return fmt.Sprintf("%s-%d", tp.Topic, tp.Partition) }

// value is a transaction's stored state (Kafka's TransactionMetadata).
type value struct {
	ProducerID int64 `json:"producer_id"`
	// LastProducerID and LastProducerEpoch: the id and epoch before the
	// last bump by a producer that named them (KIP-360), -1 otherwise, so
	// that a retried bump gets the same answer.
	LastProducerID    int64            `json:"last_producer_id"`
	ProducerEpoch     int16            `json:"producer_epoch"`
	LastProducerEpoch int16            `json:"last_producer_epoch"`
	TimeoutMs         int32            `json:"timeout_ms"`
	State             State            `json:"state"`
	Partitions        []TopicPartition `json:"partitions,omitempty"`
	// StartMs is when the ongoing transaction added its first partition
	// (-1 when none is ongoing or being completed).
	StartMs  int64 `json:"start_ms"`
	UpdateMs int64 `json:"update_ms"`
}

type recordKey struct {
	TransactionalID string `json:"transactional_id"`
}

func encodeRecord(id string, v value) Record {
	kb, err := json.Marshal(recordKey{TransactionalID: id})
	if err != nil {
		panic(fmt.Sprintf("txn: encode key: %v", err)) // plain struct: cannot fail
	}
	vb, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("txn: encode value: %v", err))
	}
	return Record{Key: kb, Value: vb}
}

// tombstone is the record that removes id (Kafka's, null value).
func tombstone(id string) Record {
	r := encodeRecord(id, value{})
	r.Value = nil
	return r
}

// decodeRecord decodes r; a tombstone decodes as state Dead.
func decodeRecord(r Record) (string, value, error) {
	var k recordKey
	var v value
	if err := json.Unmarshal(r.Key, &k); err != nil || k.TransactionalID == "" {
		return "", v, fmt.Errorf("record key %q: not a transactional id (%v)", r.Key, err)
	}
	if r.Value == nil {
		return k.TransactionalID, value{State: Dead}, nil // a tombstone: the id expired
	}
	if err := json.Unmarshal(r.Value, &v); err != nil {
		return "", v, fmt.Errorf("record %q: value: %w", r.Key, err)
	}
	switch v.State {
	case Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort, Dead:
	default:
		return "", v, fmt.Errorf("record %q: unknown state %q", r.Key, v.State)
	}
	return k.TransactionalID, v, nil
}

func millis(t time.Time) int64 { return t.UnixMilli() }
