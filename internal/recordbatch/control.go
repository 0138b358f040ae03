package recordbatch

import (
	"encoding/binary"

	"github.com/tapes-dev/tapes/internal/kerr"
)

// Transactions in Kafka's batch format. A transactional producer's batch has
// attributes bit 4 set; the transaction coordinator ends a transaction in a
// partition with a control batch (bits 4 and 5), as Kafka's
// EndTransactionMarker: the producer's id and epoch, base sequence -1, one
// record whose key is
//
//	version int16  0
//	type    int16  0 abort, 1 commit
//
// and whose value is
//
//	version           int16  0
//	coordinatorEpoch  int32
//
// uncompressed, CreateTime. The partition's log sets its base offset and
// leader epoch as for any batch.

// Control record types (the key's type field).
const (
	ControlAbort  int16 = 0
	ControlCommit int16 = 1
)

// Marker is what a control batch says: which producer's transaction it
// ends, how, and the coordinator epoch that wrote it.
type Marker struct {
	ProducerID       int64
	ProducerEpoch    int16
	Commit           bool
	CoordinatorEpoch int32
}

// markerKeySize and markerValueSize are the control record's key and value.
const (
	markerKeySize   = 4
	markerValueSize = 6
)

// IsTransactional reports attributes bit 4 of a batch of at least
// HeaderSize bytes.
func IsTransactional(b []byte) bool { return Attributes(b)&attrTransactional != 0 }

// IsControl reports attributes bit 5 of a batch of at least HeaderSize
// bytes.
func IsControl(b []byte) bool { return Attributes(b)&attrControl != 0 }

// EncodeTransactional encodes records as Encode does, as a transactional
// batch of p (attributes bit 4).
func EncodeTransactional(p Producer, records []Record) []byte {
	b := Encode(p, records)
	binary.BigEndian.PutUint16(b[attributesAt:], uint16(Attributes(b)|attrTransactional))
	putCRC(b)
	return b
}

// EncodeMarker encodes m as Kafka's control batch with timestamp ts
// (milliseconds): base offset 0 and leader epoch -1 until the log sets them.
func EncodeMarker(m Marker, ts int64) []byte {
	typ := ControlAbort
	if m.Commit {
		typ = ControlCommit
	}
	key := make([]byte, markerKeySize)
	binary.BigEndian.PutUint16(key[2:], uint16(typ))
	value := make([]byte, markerValueSize)
	binary.BigEndian.PutUint32(value[2:], uint32(m.CoordinatorEpoch))
	b := Encode(Producer{ID: m.ProducerID, Epoch: m.ProducerEpoch, BaseSequence: -1},
		[]Record{{Timestamp: ts, Key: key, Value: value}})
	binary.BigEndian.PutUint16(b[attributesAt:], uint16(attrTransactional|attrControl))
	putCRC(b)
	return b
}

// ParseMarker reads the marker of a control batch (IsControl). Errors are
// CORRUPT_MESSAGE: not a control batch, not one record, a key or value not
// of version 0 and their sizes, an unknown type.
func ParseMarker(b []byte) (Marker, error) {
	if err := CheckHeader(b, len(b)); err != nil {
		return Marker{}, err
	}
	if !IsControl(b) {
		return Marker{}, kerr.New(kerr.CorruptMessage, "record batch at %d is not a control batch", BaseOffset(b))
	}
	recs, err := Records(b, BaseOffset(b))
	if err != nil {
		return Marker{}, err
	}
	if len(recs) != 1 {
		return Marker{}, kerr.New(kerr.CorruptMessage, "control batch at %d holds %d records, want 1", BaseOffset(b), len(recs))
	}
	key, value := recs[0].Key, recs[0].Value
	if len(key) != markerKeySize || binary.BigEndian.Uint16(key) != 0 {
		return Marker{}, kerr.New(kerr.CorruptMessage, "control batch at %d: key %x is not a version 0 control record key", BaseOffset(b), key)
	}
	typ := int16(binary.BigEndian.Uint16(key[2:]))
	if typ != ControlAbort && typ != ControlCommit {
		return Marker{}, kerr.New(kerr.CorruptMessage, "control batch at %d: control record type %d is not abort (0) or commit (1)", BaseOffset(b), typ)
	}
	if len(value) < markerValueSize || binary.BigEndian.Uint16(value) != 0 {
		return Marker{}, kerr.New(kerr.CorruptMessage, "control batch at %d: value %x is not a version 0 end-transaction marker", BaseOffset(b), value)
	}
	p := ProducerOf(b)
	return Marker{ProducerID: p.ID, ProducerEpoch: p.Epoch, Commit: typ == ControlCommit,
		CoordinatorEpoch: int32(binary.BigEndian.Uint32(value[2:]))}, nil
}
