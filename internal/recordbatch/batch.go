package recordbatch

import (
	"encoding/binary"
	"hash/crc32"
	"math"

	"github.com/tapes-dev/tapes/internal/kerr"
)

// Offsets of the fields of a batch header (see the package documentation).
const (
	baseOffsetAt    = 0
	lengthAt        = 8
	leaderEpochAt   = 12
	magicAt         = 16
	crcAt           = 17
	attributesAt    = 21
	lastDeltaAt     = 23
	baseTimestampAt = 27
	maxTimestampAt  = 35
	producerIDAt    = 43
	epochAt         = 51
	baseSequenceAt  = 53
	countAt         = 57

	// HeaderSize is the fixed header of a v2 batch (Kafka's
	// RECORD_BATCH_OVERHEAD); the records follow it.
	HeaderSize = 61
	// Magic is the only batch format accepted.
	Magic = 2

	logOverhead     = 12 // baseOffset and batchLength: what batchLength does not count
	minLegacyRecord = 14 // Kafka's RECORD_OVERHEAD_V0: a smaller batchLength is corrupt

	attrCodecMask     = 0x07
	attrLogAppendTime = 0x08
	attrTransactional = 0x10
	attrControl       = 0x20

	// zstdSinceProduce: Produce v7 is the first that may carry zstd (KIP-110).
	zstdSinceProduce = 7
	// minRecordSize is the smallest record: its length, attributes and five
	// one-byte varints.
	minRecordSize = 7
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Info is what Validate read from a valid batch.
type Info struct {
	Size          int // bytes of the batch, as sent
	Records       int32
	Codec         Codec
	Transactional bool
	// FirstTimestamp is baseTimestamp; MaxTimestamp is the largest record
	// timestamp (the header's maxTimestamp is not checked against it, as
	// Kafka does not; SetMaxTimestamp corrects it as Kafka's log does).
	FirstTimestamp int64
	MaxTimestamp   int64
	ProducerID     int64
	ProducerEpoch  int16
	BaseSequence   int32
	// UncompressedBytes is the size of the records section decompressed.
	UncompressedBytes int
}

// Validate checks the records of one partition of a Produce request of
// version produceVersion (3 or later) as Kafka's broker does before an
// append, decompressing only to read the records, and returns what the
// header says. Failures are *kerr.Error with the name Kafka answers (see
// ARCHITECTURE.md, "Kafka's wire protocol"):
//
//   - INVALID_RECORD: no whole batch, magic 0 or 1, more than one batch or
//     bytes after it, a base offset other than 0, a control batch, a record
//     count or lastOffsetDelta that disagrees with the records, records whose
//     lengths, offset deltas or headers do not parse.
//   - CORRUPT_MESSAGE: a batchLength below the batch header, a wrong CRC32C,
//     records that do not decompress.
//   - UNSUPPORTED_COMPRESSION_TYPE: zstd before Produce v7, codec bits 5-7.
//
// b is not modified nor kept. Safe for concurrent use.
func Validate(b []byte, produceVersion int16) (Info, error) {
	if len(b) < magicAt+1 {
		return Info{}, kerr.New(kerr.InvalidRecord, "Produce v%d: %d bytes of records hold no record batch", produceVersion, len(b))
	}
	length := int64(int32(binary.BigEndian.Uint32(b[lengthAt:])))
	if length < minLegacyRecord {
		return Info{}, kerr.New(kerr.CorruptMessage, "record batch length %d is below the minimum %d", length, minLegacyRecord)
	}
	size := logOverhead + length
	if size > int64(len(b)) {
		return Info{}, kerr.New(kerr.InvalidRecord, "Produce v%d: record batch of %d bytes in %d bytes of records", produceVersion, size, len(b))
	}
	if magic := int8(b[magicAt]); magic != Magic {
		return Info{}, kerr.New(kerr.InvalidRecord, "Produce v%d: record batch of magic %d; only magic 2 is accepted", produceVersion, magic)
	}
	if size != int64(len(b)) {
		return Info{}, kerr.New(kerr.InvalidRecord, "Produce v%d: %d bytes after the first record batch; exactly one batch per partition is accepted", produceVersion, int64(len(b))-size)
	}
	if err := CheckCRC(b); err != nil {
		return Info{}, err
	}
	attrs := binary.BigEndian.Uint16(b[attributesAt:])
	info := Info{
		Size:           len(b),
		Records:        int32(binary.BigEndian.Uint32(b[countAt:])),
		Codec:          Codec(attrs & attrCodecMask),
		Transactional:  attrs&attrTransactional != 0,
		FirstTimestamp: int64(binary.BigEndian.Uint64(b[baseTimestampAt:])),
		ProducerID:     int64(binary.BigEndian.Uint64(b[producerIDAt:])),
		ProducerEpoch:  int16(binary.BigEndian.Uint16(b[epochAt:])),
		BaseSequence:   int32(binary.BigEndian.Uint32(b[baseSequenceAt:])),
	}
	switch {
	case info.Codec > CodecZstd:
		return Info{}, kerr.New(kerr.UnsupportedCompressionType, "record batch compression id %d is unknown", info.Codec)
	case info.Codec == CodecZstd && produceVersion < zstdSinceProduce:
		return Info{}, kerr.New(kerr.UnsupportedCompressionType, "Produce v%d may not carry zstd (v%d or later)", produceVersion, zstdSinceProduce)
	case attrs&attrControl != 0:
		return Info{}, kerr.New(kerr.InvalidRecord, "a producer may not write a control batch")
	}
	if base := BaseOffset(b); base != 0 {
		return Info{}, kerr.New(kerr.InvalidRecord, "record batch base offset is %d, should be 0", base)
	}
	lastDelta := int32(binary.BigEndian.Uint32(b[lastDeltaAt:]))
	switch {
	case info.Records <= 0:
		return Info{}, kerr.New(kerr.InvalidRecord, "record batch count is %d", info.Records)
	case int64(lastDelta)+1 != int64(info.Records):
		return Info{}, kerr.New(kerr.InvalidRecord, "record batch lastOffsetDelta %d disagrees with its record count %d", lastDelta, info.Records)
	}
	records, err := decompress(info.Codec, b[HeaderSize:])
	if err != nil {
		return Info{}, kerr.New(kerr.CorruptMessage, "%v records do not decompress: %v", info.Codec, err)
	}
	info.UncompressedBytes = len(records)
	maxTs, err := walk(records, info.Records, info.FirstTimestamp, nil)
	if err != nil {
		return Info{}, err
	}
	info.MaxTimestamp = maxTs
	return info, nil
}

// CheckHeader checks the header of a stored batch of size bytes, of which
// b holds at least the header: batchLength equal to size-12, magic 2, a
// record count that the records could hold. It reads nothing past the
// header; it is what a reader of stored batches checks before trusting the
// header's fields. Failures are CORRUPT_MESSAGE.
func CheckHeader(b []byte, size int) error {
	if len(b) < HeaderSize || size < HeaderSize {
		return kerr.New(kerr.CorruptMessage, "record batch of %d bytes is smaller than its %d-byte header", min(len(b), size), HeaderSize)
	}
	if length := int64(int32(binary.BigEndian.Uint32(b[lengthAt:]))); length+logOverhead != int64(size) {
		return kerr.New(kerr.CorruptMessage, "record batch length %d in %d bytes", length, size)
	}
	if magic := int8(b[magicAt]); magic != Magic {
		return kerr.New(kerr.CorruptMessage, "record batch of magic %d, want %d", magic, Magic)
	}
	n := Count(b)
	uncompressed := Codec(Attributes(b)&attrCodecMask) == CodecNone
	if n < 1 || uncompressed && int64(n)*minRecordSize > int64(size-HeaderSize) {
		return kerr.New(kerr.CorruptMessage, "record batch count %d does not fit %d bytes", n, size)
	}
	return nil
}

// CheckCRC checks the CRC32C of a batch of at least HeaderSize bytes: from
// attributes to the end. Failures are CORRUPT_MESSAGE.
func CheckCRC(b []byte) error {
	if len(b) < HeaderSize {
		return kerr.New(kerr.CorruptMessage, "record batch of %d bytes is smaller than its %d-byte header", len(b), HeaderSize)
	}
	want := binary.BigEndian.Uint32(b[crcAt:])
	if got := crc32.Checksum(b[attributesAt:], castagnoli); got != want {
		return kerr.New(kerr.CorruptMessage, "record batch crc32c is %08x, header says %08x", got, want)
	}
	return nil
}

// Seal finishes a batch built in place (b is the whole batch, header
// included): batchLength from len(b), and the CRC over attributes..end.
// Encode uses it, and so does storage's conversion of its own batch
// versions for Kafka's Fetch.
func Seal(b []byte) {
	binary.BigEndian.PutUint32(b[lengthAt:], uint32(len(b)-logOverhead))
	putCRC(b)
}

// putCRC sets the CRC of b after its attributes..end changed.
func putCRC(b []byte) {
	binary.BigEndian.PutUint32(b[crcAt:], crc32.Checksum(b[attributesAt:], castagnoli))
}

// Header fields of a batch of at least HeaderSize bytes (CheckHeader).

// BaseOffset is the offset of the batch's first record.
func BaseOffset(b []byte) int64 { return int64(binary.BigEndian.Uint64(b[baseOffsetAt:])) }

// PartitionLeaderEpoch is the leader epoch the batch was appended in.
func PartitionLeaderEpoch(b []byte) int32 { return int32(binary.BigEndian.Uint32(b[leaderEpochAt:])) }

// Attributes is the batch's attributes field.
func Attributes(b []byte) int16 { return int16(binary.BigEndian.Uint16(b[attributesAt:])) }

// Count is the header's record count.
func Count(b []byte) int32 { return int32(binary.BigEndian.Uint32(b[countAt:])) }

// BaseTimestamp is the header's baseTimestamp.
func BaseTimestamp(b []byte) int64 { return int64(binary.BigEndian.Uint64(b[baseTimestampAt:])) }

// MaxTimestamp is the header's maxTimestamp: the largest record timestamp
// of a batch that went through SetMaxTimestamp, the append time of a
// LogAppendTime batch.
func MaxTimestamp(b []byte) int64 { return int64(binary.BigEndian.Uint64(b[maxTimestampAt:])) }

// ProducerOf is the header's producer id, epoch and base sequence.
func ProducerOf(b []byte) Producer {
	return Producer{
		ID:           int64(binary.BigEndian.Uint64(b[producerIDAt:])),
		Epoch:        int16(binary.BigEndian.Uint16(b[epochAt:])),
		BaseSequence: int32(binary.BigEndian.Uint32(b[baseSequenceAt:])),
	}
}

// SetBaseOffset writes the base offset into b in place. Kafka's CRC does not
// cover it.
func SetBaseOffset(b []byte, offset int64) {
	binary.BigEndian.PutUint64(b[baseOffsetAt:], uint64(offset))
}

// SetPartitionLeaderEpoch writes the leader epoch into b in place. Kafka's
// CRC does not cover it.
func SetPartitionLeaderEpoch(b []byte, epoch int32) {
	binary.BigEndian.PutUint32(b[leaderEpochAt:], uint32(epoch))
}

// SetMaxTimestamp makes b a CreateTime batch whose maxTimestamp is maxTs
// (Info.MaxTimestamp, the largest record timestamp), as Kafka's log does
// before an append (LogValidator: setMaxTimestamp(CREATE_TIME, max)),
// recomputing the CRC only when something changed. It reports whether b
// changed. b must have passed Validate.
func SetMaxTimestamp(b []byte, maxTs int64) bool {
	attrs := Attributes(b)
	if attrs&attrLogAppendTime == 0 && MaxTimestamp(b) == maxTs {
		return false
	}
	binary.BigEndian.PutUint16(b[attributesAt:], uint16(attrs&^attrLogAppendTime))
	binary.BigEndian.PutUint64(b[maxTimestampAt:], uint64(maxTs))
	putCRC(b)
	return true
}

// walk checks count records in b (decompressed) and nothing after them,
// returning the largest timestamp (baseTs plus the deltas), and calls fn
// (when not nil) with each record's fields as they lie in b: key and value
// nil for a null one, header keys never null, headers the encoded headers
// section (headerCount of them, walked already). Validate and Records share
// it: one record walk.
func walk(b []byte, count int32, baseTs int64, fn func(i int32, ts int64, key, value, headers []byte, headerCount int)) (int64, error) {
	c := cursor{b: b}
	maxTs := int64(math.MinInt64)
	if int64(count)*minRecordSize > int64(len(b)) {
		return 0, kerr.New(kerr.InvalidRecord, "record count %d does not fit %d bytes of records", count, len(b))
	}
	for i := int32(0); i < count; i++ {
		length := c.varint()
		if c.err != nil || length < 0 || length > int64(len(c.b)) {
			return 0, kerr.New(kerr.InvalidRecord, "record %d: length %d with %d bytes left", i, length, len(c.b))
		}
		body := cursor{b: c.b[:length]}
		c.b = c.b[length:]
		body.byte() // attributes, unused in v2
		tsDelta := body.varint()
		offsetDelta := body.varint()
		key := body.bytes(true)
		value := body.bytes(true)
		headerCount := body.varint()
		if body.err == nil && (headerCount < 0 || headerCount > int64(len(body.b))/2) {
			return 0, kerr.New(kerr.InvalidRecord, "record %d: header count %d", i, headerCount)
		}
		headers := body.b
		for j := int64(0); j < headerCount && body.err == nil; j++ {
			body.bytes(false)
			body.bytes(true)
		}
		switch {
		case body.err != nil:
			return 0, kerr.New(kerr.InvalidRecord, "record %d: %v", i, body.err)
		case len(body.b) != 0:
			return 0, kerr.New(kerr.InvalidRecord, "record %d: %d bytes after its headers", i, len(body.b))
		case offsetDelta != int64(i):
			return 0, kerr.New(kerr.InvalidRecord, "record %d has offset delta %d", i, offsetDelta)
		}
		ts := baseTs + tsDelta
		maxTs = max(maxTs, ts)
		if fn != nil {
			fn(i, ts, key, value, headers, int(headerCount))
		}
	}
	if len(c.b) != 0 {
		return 0, kerr.New(kerr.InvalidRecord, "%d bytes after the batch's %d records", len(c.b), count)
	}
	return maxTs, nil
}

// cursor reads a record's fields; after the first failure it keeps err and
// reads nothing more.
type cursor struct {
	b   []byte
	err error
}

func (c *cursor) fail(msg string) {
	if c.err == nil {
		c.err = errorString(msg)
	}
	c.b = nil
}

type errorString string

func (e errorString) Error() string { return string(e) }

func (c *cursor) byte() {
	if len(c.b) < 1 {
		c.fail("attributes cut short")
		return
	}
	c.b = c.b[1:]
}

func (c *cursor) varint() int64 {
	if c.err != nil {
		return 0
	}
	v, n := binary.Varint(c.b)
	if n <= 0 {
		c.fail("bad varint")
		return 0
	}
	c.b = c.b[n:]
	return v
}

// bytes reads a length-prefixed field; length -1 is null (nil), allowed
// when nullable; an empty field is a non-nil empty slice. The result's
// capacity is capped so that appending to it cannot overwrite what follows.
func (c *cursor) bytes(nullable bool) []byte {
	n := c.varint()
	switch {
	case c.err != nil:
	case n == -1 && nullable:
	case n < 0 || n > int64(len(c.b)):
		c.fail("field length out of range")
	default:
		v := c.b[:n:n]
		c.b = c.b[n:]
		return v
	}
	return nil
}
