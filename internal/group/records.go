package group

import (
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/tapes-dev/tapes/internal/consumerproto"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
)

// Record is one record of a __consumer_offsets partition.
//
// The key is a small JSON object naming what the record is about, so that
// `cluster consume __consumer_offsets` is readable:
//
//	{"kind":"offset","group":"G","topic":"T","partition":P}  value: OffsetValue
//	{"kind":"group","group":"G"}                             value: GroupValue
//	{"kind":"txn-offset","group":"G","topic":"T","partition":P,"producer_id":I,"producer_epoch":E}
//	                                                         value: OffsetValue, or none
//
// A txn-offset record is a transactional offset commit (TxnOffsetCommit) of
// producer I, pending until a transaction marker of I follows it in the
// partition (a Kafka control batch written by the transaction coordinator
// through WriteTxnMarkers): a commit marker makes it the group's committed
// offset, an abort marker discards it. The latest txn-offset record of
// (group, topic, partition, producer) wins (the epoch is not part of that
// identity); one without value withdraws the pending commit (compaction
// writes it, compact.go).
//
// Values are protobuf messages in their JSON form (opaque metadata and
// assignments in base64; group records of the earlier typed format are
// upgraded as they are decoded, see upgradeLegacy). When a coordinator
// rebuilds a partition, the latest record of each key wins, except that a
// group record of an older generation never replaces a newer one (two
// writes of one group may commit out of order).
type Record struct {
	Key   []byte
	Value []byte
	// Offset is the record's offset in the partition: set by Log.Read,
	// ignored by Log.Append.
	Offset int64
	// Marker, set only by Log.Read, says that the entry at Offset is a
	// transaction marker (Key and Value are then unused).
	Marker *Marker
}

// Marker is a transaction marker found in a __consumer_offsets partition:
// a Kafka control batch (attributes bits 4 and 5) of one record whose key
// is version 0 and type 0 (abort) or 1 (commit), with the producer id and
// epoch in the batch header.
type Marker struct {
	ProducerID    int64
	ProducerEpoch int16
	Commit        bool
}

const (
	kindOffset    = "offset"
	kindGroup     = "group"
	kindTxnOffset = "txn-offset"
)

// recordKey is a record's key as written. ProducerEpoch is not part of
// what a txn-offset record is about: identity() drops it.
type recordKey struct {
	Kind          string `json:"kind"`
	Group         string `json:"group"`
	Topic         string `json:"topic,omitempty"`
	Partition     int32  `json:"partition"`
	ProducerID    int64  `json:"producer_id,omitempty"`
	ProducerEpoch int16  `json:"producer_epoch,omitempty"`
}

// identity is what the record is about: the latest record of an identity
// decides it.
func (k recordKey) identity() recordKey {
	k.ProducerEpoch = 0
	return k
}

// txnOffsetRecord is producer's pending commit of offset v (nil v: the
// pending commit withdrawn).
func txnOffsetRecord(group, topic string, partition int32, producerID int64, epoch int16, v *tapesv1.OffsetValue) Record {
	k := recordKey{Kind: kindTxnOffset, Group: group, Topic: topic, Partition: partition, ProducerID: producerID, ProducerEpoch: epoch}
	if v == nil {
		kb, err := json.Marshal(k)
		if err != nil {
			panic(fmt.Sprintf("group: encode key: %v", err)) // plain struct: cannot fail
		}
		return Record{Key: kb}
	}
	return encodeRecord(k, v)
}

func offsetRecord(group, topic string, partition int32, v *tapesv1.OffsetValue) Record {
	return encodeRecord(recordKey{Kind: kindOffset, Group: group, Topic: topic, Partition: partition}, v)
}

func groupRecord(group string, v *tapesv1.GroupValue) Record {
	return encodeRecord(recordKey{Kind: kindGroup, Group: group}, v)
}

func encodeRecord(k recordKey, v proto.Message) Record {
	kb, err := json.Marshal(k)
	if err != nil {
		panic(fmt.Sprintf("group: encode key: %v", err)) // plain struct: cannot fail
	}
	vb, err := protojson.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("group: encode value: %v", err))
	}
	return Record{Key: kb, Value: vb}
}

// decoded is one decoded record: a marker, or a record of which at most
// one of offset and group is set (none: a txn-offset record withdrawing a
// pending commit).
type decoded struct {
	at     int64
	marker *Marker
	key    recordKey
	offset *tapesv1.OffsetValue
	group  *tapesv1.GroupValue
}

func decodeRecord(r Record) (decoded, error) {
	d := decoded{at: r.Offset, marker: r.Marker}
	if r.Marker != nil {
		return d, nil
	}
	if err := json.Unmarshal(r.Key, &d.key); err != nil {
		return d, fmt.Errorf("record key %q: %w", r.Key, err)
	}
	var m proto.Message
	switch d.key.Kind {
	case kindTxnOffset:
		if r.Value == nil {
			return d, nil
		}
		fallthrough
	case kindOffset:
		d.offset = &tapesv1.OffsetValue{}
		m = d.offset
	case kindGroup:
		d.group = &tapesv1.GroupValue{}
		m = d.group
	default:
		return d, fmt.Errorf("record key %q: unknown kind %q", r.Key, d.key.Kind)
	}
	if err := protojson.Unmarshal(r.Value, m); err != nil {
		return d, fmt.Errorf("record %q: value: %w", r.Key, err)
	}
	if d.group != nil {
		upgradeLegacy(d.group)
	}
	return d, nil
}

// upgradeLegacy converts a group record of the typed format (written before
// metadata and assignments became opaque: GroupValueMember's
// legacy_subscription and legacy_assignment) into the bytes today's format
// holds: that format's consumers were tapes' own, under protocol type
// "consumer", so their subscription and assignment are encoded in Kafka's
// consumer protocol, as today's consumerd sends them. A member with
// metadata or an assignment in bytes is left as it is.
func upgradeLegacy(v *tapesv1.GroupValue) {
	for _, vm := range v.Members {
		if s := vm.LegacySubscription; s != nil && vm.Metadata == nil {
			vm.Metadata = consumerproto.EncodeSubscription(consumerproto.Subscription{Topics: s.Topics,
				Owned: toPartitions(s.Owned), Generation: s.Generation})
		}
		if a := vm.LegacyAssignment; a != nil && vm.MemberAssignment == nil {
			vm.MemberAssignment = consumerproto.EncodeAssignment(toPartitions(a), consumerproto.AssignmentVersion)
		}
		vm.LegacySubscription, vm.LegacyAssignment = nil, nil
	}
}
