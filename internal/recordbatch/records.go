package recordbatch

import (
	"encoding/binary"
	"math"

	"github.com/tapes-dev/tapes/internal/kerr"
)

// Header is one record header.
type Header struct {
	Key   string
	Value []byte // nil is a null value, distinct from an empty one
}

// Record is one record of a partition.
type Record struct {
	Offset    int64 // the batch's base offset plus the offset delta; ignored by Encode
	Timestamp int64 // milliseconds since the Unix epoch
	Key       []byte
	Value     []byte
	Headers   []Header
}

// Producer is an idempotent producer's fields of a batch header: its id and
// epoch (from InitProducerId) and the sequence number of the batch's first
// record. NoProducer for a producer that is not idempotent.
type Producer struct {
	ID           int64
	Epoch        int16
	BaseSequence int32
}

// NoProducer is what a producer that is not idempotent writes.
var NoProducer = Producer{ID: -1, Epoch: -1, BaseSequence: -1}

// Records decodes the records of the batch b, decompressing them, numbered
// from baseOffset (the header's own base offset is not used: a batch not
// yet appended carries 0). It checks b's header (CheckHeader) and the
// records' structure as Validate does, but not the CRC: call CheckCRC first
// on bytes that may have been damaged. Keys null stay nil, empty ones
// non-nil and empty; a LogAppendTime batch gives every record the header's
// maxTimestamp, as Kafka's readers do. The records share memory with b when
// it is not compressed. Failures are *kerr.Error (CORRUPT_MESSAGE,
// INVALID_RECORD). Safe for concurrent use.
func Records(b []byte, baseOffset int64) ([]Record, error) {
	if err := CheckHeader(b, len(b)); err != nil {
		return nil, err
	}
	codec := Codec(Attributes(b) & attrCodecMask)
	raw, err := decompress(codec, b[HeaderSize:])
	if err != nil {
		return nil, kerr.New(kerr.CorruptMessage, "%v records do not decompress: %v", codec, err)
	}
	count := Count(b)
	logAppend := Attributes(b)&attrLogAppendTime != 0
	appendTs := MaxTimestamp(b)
	out := make([]Record, 0, min(int(count), len(raw)/minRecordSize))
	_, err = walk(raw, count, BaseTimestamp(b), func(i int32, ts int64, key, value, headers []byte, headerCount int) {
		if logAppend {
			ts = appendTs
		}
		r := Record{Offset: baseOffset + int64(i), Timestamp: ts, Key: key, Value: value}
		if headerCount > 0 {
			r.Headers = decodeHeaders(headers, headerCount)
		}
		out = append(out, r)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// decodeHeaders decodes n headers that walk has already checked.
func decodeHeaders(b []byte, n int) []Header {
	hs := make([]Header, n)
	c := cursor{b: b}
	for i := range hs {
		hs[i] = Header{Key: string(c.bytes(false)), Value: c.bytes(true)}
	}
	return hs
}

// Encode encodes records as one uncompressed CreateTime batch of magic 2
// from producer p: base offset 0, partition leader epoch -1 (the log sets
// both), baseTimestamp the first record's timestamp, maxTimestamp the
// largest, offset deltas 0..len(records)-1 (the records' Offset fields are
// ignored), a correct CRC. With no records it encodes a batch that Validate
// refuses (count 0).
func Encode(p Producer, records []Record) []byte {
	var first int64
	maxTs := int64(math.MinInt64)
	if len(records) > 0 {
		first = records[0].Timestamp
	} else {
		maxTs = -1
	}
	size := HeaderSize
	for i := range records {
		r := &records[i]
		maxTs = max(maxTs, r.Timestamp)
		body := recordBodySize(r, int64(i), r.Timestamp-first)
		size += VarintLen(int64(body)) + body
	}
	b := make([]byte, HeaderSize, size)
	binary.BigEndian.PutUint32(b[leaderEpochAt:], math.MaxUint32) // -1
	b[magicAt] = Magic
	binary.BigEndian.PutUint32(b[lastDeltaAt:], uint32(len(records)-1))
	binary.BigEndian.PutUint64(b[baseTimestampAt:], uint64(first))
	binary.BigEndian.PutUint64(b[maxTimestampAt:], uint64(maxTs))
	binary.BigEndian.PutUint64(b[producerIDAt:], uint64(p.ID))
	binary.BigEndian.PutUint16(b[epochAt:], uint16(p.Epoch))
	binary.BigEndian.PutUint32(b[baseSequenceAt:], uint32(p.BaseSequence))
	binary.BigEndian.PutUint32(b[countAt:], uint32(len(records)))
	for i := range records {
		r := &records[i]
		tsDelta := r.Timestamp - first
		b = binary.AppendVarint(b, int64(recordBodySize(r, int64(i), tsDelta)))
		b = append(b, 0) // attributes
		b = binary.AppendVarint(b, tsDelta)
		b = binary.AppendVarint(b, int64(i))
		b = AppendPayload(b, r)
	}
	Seal(b)
	return b
}

// recordBodySize is the size of a record after its length field.
func recordBodySize(r *Record, offsetDelta, tsDelta int64) int {
	return 1 + VarintLen(tsDelta) + VarintLen(offsetDelta) + PayloadSize(r)
}

// AppendPayload appends what follows a record's deltas in record format v2:
// key, value (length -1 for null), header count, headers (never-null key,
// nullable value). tapes' own batch versions 1 and 2 (internal/storage)
// encode the same.
func AppendPayload(b []byte, r *Record) []byte {
	b = appendNullable(b, r.Key)
	b = appendNullable(b, r.Value)
	b = binary.AppendVarint(b, int64(len(r.Headers)))
	for _, h := range r.Headers {
		b = binary.AppendVarint(b, int64(len(h.Key)))
		b = append(b, h.Key...)
		b = appendNullable(b, h.Value)
	}
	return b
}

// PayloadSize is len(AppendPayload(nil, r)).
func PayloadSize(r *Record) int {
	n := nullableLen(r.Key) + nullableLen(r.Value) + VarintLen(int64(len(r.Headers)))
	for _, h := range r.Headers {
		n += VarintLen(int64(len(h.Key))) + len(h.Key) + nullableLen(h.Value)
	}
	return n
}

func appendNullable(b, v []byte) []byte {
	if v == nil {
		return binary.AppendVarint(b, -1)
	}
	b = binary.AppendVarint(b, int64(len(v)))
	return append(b, v...)
}

func nullableLen(v []byte) int {
	if v == nil {
		return 1
	}
	return VarintLen(int64(len(v))) + len(v)
}

// VarintLen is the length of binary.AppendVarint(nil, x).
func VarintLen(x int64) int {
	ux := uint64(x) << 1
	if x < 0 {
		ux = ^ux
	}
	n := 1
	for ux >= 0x80 {
		ux >>= 7
		n++
	}
	return n
}
