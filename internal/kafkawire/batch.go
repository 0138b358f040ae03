package kafkawire

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"

	"github.com/tapes-dev/tapes/internal/kerr"
)

// Kafka's record batch v2 (magic 2), the only format Produce v3+ carries.
// Fixed-width integers are big-endian:
//
//	baseOffset            int64   0 from a producer; the log sets it
//	batchLength           int32   bytes after this field
//	partitionLeaderEpoch  int32   set by the leader on append
//	magic                 int8    2
//	crc                   uint32  CRC32C of every byte from attributes on
//	attributes            int16   bits 0-2 codec, 3 log-append time, 4 transactional, 5 control
//	lastOffsetDelta       int32   recordCount - 1
//	baseTimestamp         int64
//	maxTimestamp          int64
//	producerId            int64   -1 for none
//	producerEpoch         int16
//	baseSequence          int32
//	recordCount           int32
//	records               compressed by the codec as a whole; each record:
//	    length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
//	    keyLength varint (-1 null), key, valueLength varint (-1 null), value,
//	    headerCount varint, headers (keyLength varint, key, valueLength varint, value)
//
// The CRC does not cover baseOffset, batchLength nor partitionLeaderEpoch, so
// the log may set them on append without recomputing it. A varint is a
// zig-zag varint, as encoding/binary's Varint.
const (
	batchBaseOffsetAt    = 0
	batchLengthAt        = 8
	batchLeaderEpochAt   = 12
	batchMagicAt         = 16
	batchCRCAt           = 17
	batchAttributesAt    = 21
	batchLastDeltaAt     = 23
	batchBaseTimestampAt = 27
	batchMaxTimestampAt  = 35
	batchProducerIDAt    = 43
	batchEpochAt         = 51
	batchBaseSequenceAt  = 53
	batchCountAt         = 57
	batchHeaderSize      = 61 // Kafka's RECORD_BATCH_OVERHEAD

	batchLogOverhead = 12 // baseOffset and batchLength: what batchLength does not count
	minLegacyRecord  = 14 // Kafka's RECORD_OVERHEAD_V0: a smaller batchLength is corrupt

	attrCodecMask     = 0x07
	attrTransactional = 0x10
	attrControl       = 0x20

	// zstdSinceProduce: Produce v7 is the first that may carry zstd (KIP-110).
	zstdSinceProduce = 7
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// BatchInfo is what ValidateBatch read from a valid batch.
type BatchInfo struct {
	Size          int // bytes of the batch, as sent
	Records       int32
	Codec         Codec
	Transactional bool
	// FirstTimestamp is baseTimestamp; MaxTimestamp is the largest record
	// timestamp (the header's maxTimestamp is not checked against it, as
	// Kafka does not).
	FirstTimestamp int64
	MaxTimestamp   int64
	ProducerID     int64
	ProducerEpoch  int16
	BaseSequence   int32
	// UncompressedBytes is the size of the records section decompressed.
	UncompressedBytes int
}

// ValidateBatch checks the records of one partition of a Produce request of
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
func ValidateBatch(b []byte, produceVersion int16) (BatchInfo, error) {
	if len(b) < batchMagicAt+1 {
		return BatchInfo{}, kerr.New(kerr.InvalidRecord, "Produce v%d: %d bytes of records hold no record batch", produceVersion, len(b))
	}
	length := int64(int32(binary.BigEndian.Uint32(b[batchLengthAt:])))
	if length < minLegacyRecord {
		return BatchInfo{}, kerr.New(kerr.CorruptMessage, "record batch length %d is below the minimum %d", length, minLegacyRecord)
	}
	size := batchLogOverhead + length
	if size > int64(len(b)) {
		return BatchInfo{}, kerr.New(kerr.InvalidRecord, "Produce v%d: record batch of %d bytes in %d bytes of records", produceVersion, size, len(b))
	}
	if magic := int8(b[batchMagicAt]); magic != 2 {
		return BatchInfo{}, kerr.New(kerr.InvalidRecord, "Produce v%d: record batch of magic %d; only magic 2 is accepted", produceVersion, magic)
	}
	if size != int64(len(b)) {
		return BatchInfo{}, kerr.New(kerr.InvalidRecord, "Produce v%d: %d bytes after the first record batch; exactly one batch per partition is accepted", produceVersion, int64(len(b))-size)
	}
	if size < batchHeaderSize {
		return BatchInfo{}, kerr.New(kerr.CorruptMessage, "record batch of %d bytes is smaller than its %d-byte header", size, batchHeaderSize)
	}
	want := binary.BigEndian.Uint32(b[batchCRCAt:])
	if got := crc32.Checksum(b[batchAttributesAt:], castagnoli); got != want {
		return BatchInfo{}, kerr.New(kerr.CorruptMessage, "record batch crc32c is %08x, header says %08x", got, want)
	}
	attrs := binary.BigEndian.Uint16(b[batchAttributesAt:])
	info := BatchInfo{
		Size:           len(b),
		Records:        int32(binary.BigEndian.Uint32(b[batchCountAt:])),
		Codec:          Codec(attrs & attrCodecMask),
		Transactional:  attrs&attrTransactional != 0,
		FirstTimestamp: int64(binary.BigEndian.Uint64(b[batchBaseTimestampAt:])),
		ProducerID:     int64(binary.BigEndian.Uint64(b[batchProducerIDAt:])),
		ProducerEpoch:  int16(binary.BigEndian.Uint16(b[batchEpochAt:])),
		BaseSequence:   int32(binary.BigEndian.Uint32(b[batchBaseSequenceAt:])),
	}
	switch {
	case info.Codec > CodecZstd:
		return BatchInfo{}, kerr.New(kerr.UnsupportedCompressionType, "record batch compression id %d is unknown", info.Codec)
	case info.Codec == CodecZstd && produceVersion < zstdSinceProduce:
		return BatchInfo{}, kerr.New(kerr.UnsupportedCompressionType, "Produce v%d may not carry zstd (v%d or later)", produceVersion, zstdSinceProduce)
	case attrs&attrControl != 0:
		return BatchInfo{}, kerr.New(kerr.InvalidRecord, "a producer may not write a control batch")
	}
	if base := int64(binary.BigEndian.Uint64(b[batchBaseOffsetAt:])); base != 0 {
		return BatchInfo{}, kerr.New(kerr.InvalidRecord, "record batch base offset is %d, should be 0", base)
	}
	lastDelta := int32(binary.BigEndian.Uint32(b[batchLastDeltaAt:]))
	switch {
	case info.Records <= 0:
		return BatchInfo{}, kerr.New(kerr.InvalidRecord, "record batch count is %d", info.Records)
	case int64(lastDelta)+1 != int64(info.Records):
		return BatchInfo{}, kerr.New(kerr.InvalidRecord, "record batch lastOffsetDelta %d disagrees with its record count %d", lastDelta, info.Records)
	}
	records, err := decompress(info.Codec, b[batchHeaderSize:])
	if err != nil {
		return BatchInfo{}, kerr.New(kerr.CorruptMessage, "%v records do not decompress: %v", info.Codec, err)
	}
	info.UncompressedBytes = len(records)
	maxTs, err := walkRecords(records, info.Records, info.FirstTimestamp)
	if err != nil {
		return BatchInfo{}, err
	}
	info.MaxTimestamp = maxTs
	return info, nil
}

// walkRecords checks count records in b (decompressed) and nothing after
// them, returning the largest timestamp.
func walkRecords(b []byte, count int32, baseTs int64) (int64, error) {
	c := cursor{b: b}
	maxTs := int64(math.MinInt64)
	// A record is at least 7 bytes (length, attributes and five one-byte
	// varints): a count that cannot fit is refused before walking.
	if int64(count)*7 > int64(len(b)) {
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
		body.bytes(true) // key
		body.bytes(true) // value
		headers := body.varint()
		if body.err == nil && (headers < 0 || headers > int64(len(body.b))/2) {
			return 0, kerr.New(kerr.InvalidRecord, "record %d: header count %d", i, headers)
		}
		for j := int64(0); j < headers && body.err == nil; j++ {
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
		maxTs = max(maxTs, baseTs+tsDelta)
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
		c.err = errors.New(msg)
	}
	c.b = nil
}

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

// bytes skips a length-prefixed field; length -1 is null, allowed when
// nullable.
func (c *cursor) bytes(nullable bool) {
	n := c.varint()
	switch {
	case c.err != nil:
	case n == -1 && nullable:
	case n < 0 || n > int64(len(c.b)):
		c.fail("field length out of range")
	default:
		c.b = c.b[n:]
	}
}
