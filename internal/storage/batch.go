package storage

// The batch codec. A Batch's layout (fixed-width integers are big-endian):
//
//	crc             uint32  CRC32C (Castagnoli) of every byte after this field
//	version         uint8   batchVersion
//	count           int32   number of records, at least 1
//	firstTimestamp  int64   timestamp of the first record (ms since the epoch)
//	maxTimestamp    int64   largest timestamp of any record
//	records         count times, as in Kafka's record format v2:
//	    length          varint  bytes of the record after this field
//	    offsetDelta     varint  0, 1, ..., count-1
//	    timestampDelta  varint  timestamp - firstTimestamp (so 0 for the first record)
//	    keyLength       varint  -1 for a null key
//	    key             keyLength bytes
//	    valueLength     varint  -1 for a null value
//	    value           valueLength bytes
//	    headerCount     varint
//	    headers         headerCount times:
//	        keyLength   varint  (never null)
//	        key         keyLength bytes
//	        valueLength varint  -1 for a null value
//	        value       valueLength bytes
//
// A varint is a zig-zag signed varint (encoding/binary's PutVarint). A batch
// carries no base offset: the log assigns it on append.

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
)

// Header is one record header.
type Header struct {
	Key   string
	Value []byte // nil is a null value, distinct from an empty one
}

// Record is one record of a partition.
type Record struct {
	Offset    int64 // assigned by the log; ignored by EncodeBatch
	Timestamp int64 // milliseconds since the Unix epoch
	Key       []byte
	Value     []byte
	Headers   []Header
}

// Batch is an encoded record batch without its base offset and Raft index:
// what one producer request becomes, and what one Raft log entry carries.
type Batch []byte

const (
	batchVersion = 1

	batchCRCAt      = 0
	batchVersionAt  = 4
	batchCountAt    = 5
	batchFirstTsAt  = 9
	batchMaxTsAt    = 17
	batchHeaderSize = 25

	// minRecordSize is the smallest encoded record: six one-byte varints
	// (length, offsetDelta, timestampDelta, keyLength, valueLength, headerCount).
	minRecordSize = 6
	// minHeaderSize is the smallest encoded header: two one-byte varints.
	minHeaderSize = 2
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// EncodeBatch encodes records as one batch. Their Offset fields are ignored:
// the records get offset deltas 0..len(records)-1. A batch of no records is
// encoded, but Validate rejects it.
func EncodeBatch(records []Record) Batch {
	var first, maxTs int64
	if len(records) > 0 {
		first, maxTs = records[0].Timestamp, records[0].Timestamp
	}
	size := batchHeaderSize
	for i := range records {
		r := &records[i]
		maxTs = max(maxTs, r.Timestamp)
		body := recordBodySize(r, int64(i), r.Timestamp-first)
		size += varintLen(int64(body)) + body
	}
	b := make([]byte, batchHeaderSize, size)
	b[batchVersionAt] = batchVersion
	binary.BigEndian.PutUint32(b[batchCountAt:], uint32(len(records)))
	binary.BigEndian.PutUint64(b[batchFirstTsAt:], uint64(first))
	binary.BigEndian.PutUint64(b[batchMaxTsAt:], uint64(maxTs))
	for i := range records {
		r := &records[i]
		tsDelta := r.Timestamp - first
		b = binary.AppendVarint(b, int64(recordBodySize(r, int64(i), tsDelta)))
		b = binary.AppendVarint(b, int64(i))
		b = binary.AppendVarint(b, tsDelta)
		b = appendNullable(b, r.Key)
		b = appendNullable(b, r.Value)
		b = binary.AppendVarint(b, int64(len(r.Headers)))
		for _, h := range r.Headers {
			b = binary.AppendVarint(b, int64(len(h.Key)))
			b = append(b, h.Key...)
			b = appendNullable(b, h.Value)
		}
	}
	binary.BigEndian.PutUint32(b[batchCRCAt:], crc32.Checksum(b[batchVersionAt:], castagnoli))
	return b
}

func recordBodySize(r *Record, offsetDelta, tsDelta int64) int {
	n := varintLen(offsetDelta) + varintLen(tsDelta) + nullableLen(r.Key) + nullableLen(r.Value) +
		varintLen(int64(len(r.Headers)))
	for _, h := range r.Headers {
		n += varintLen(int64(len(h.Key))) + len(h.Key) + nullableLen(h.Value)
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
		return varintLen(-1)
	}
	return varintLen(int64(len(v))) + len(v)
}

// varintLen is the length of binary.AppendVarint(nil, x).
func varintLen(x int64) int {
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

// Count is the number of records the batch's header declares, or 0 when b is
// shorter than a header. Only a batch that passed Validate is sure to hold
// that many.
func (b Batch) Count() int {
	if len(b) < batchHeaderSize {
		return 0
	}
	return int(int32(binary.BigEndian.Uint32(b[batchCountAt:])))
}

// FirstTimestamp is the first record's timestamp, or 0 when b is shorter than
// a header.
func (b Batch) FirstTimestamp() int64 {
	if len(b) < batchHeaderSize {
		return 0
	}
	return int64(binary.BigEndian.Uint64(b[batchFirstTsAt:]))
}

// MaxTimestamp is the largest record timestamp, or 0 when b is shorter than a
// header.
func (b Batch) MaxTimestamp() int64 {
	if len(b) < batchHeaderSize {
		return 0
	}
	return int64(binary.BigEndian.Uint64(b[batchMaxTsAt:]))
}

// Validate checks b completely: header, CRC32C, and every record's structure
// (offset deltas 0..count-1, lengths within bounds, no trailing bytes, the
// header's timestamps matching the records'). Failures wrap ErrCorruptBatch.
func (b Batch) Validate() error {
	if err := b.checkHeader(); err != nil {
		return err
	}
	if err := b.checkCRC(); err != nil {
		return err
	}
	return b.each(0, nil)
}

// Records decodes b's records, numbering them from baseOffset. It checks the
// structure as Validate does, but not the CRC: call Validate first on bytes
// that may have been damaged. The records' keys and values share memory with b.
func (b Batch) Records(baseOffset int64) ([]Record, error) {
	if err := b.checkHeader(); err != nil {
		return nil, err
	}
	out := make([]Record, 0, b.Count())
	err := b.each(baseOffset, func(r Record, _ int) { out = append(out, r) })
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (b Batch) checkHeader() error {
	if len(b) < batchHeaderSize {
		return fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrCorruptBatch, len(b), batchHeaderSize)
	}
	if v := b[batchVersionAt]; v != batchVersion {
		return fmt.Errorf("%w: version %d, want %d", ErrCorruptBatch, v, batchVersion)
	}
	n := b.Count()
	if n < 1 || n > (len(b)-batchHeaderSize)/minRecordSize {
		return fmt.Errorf("%w: record count %d does not fit %d bytes", ErrCorruptBatch, n, len(b))
	}
	return nil
}

func (b Batch) checkCRC() error {
	want := binary.BigEndian.Uint32(b[batchCRCAt:])
	if got := crc32.Checksum(b[batchVersionAt:], castagnoli); got != want {
		return fmt.Errorf("%w: crc %08x, header says %08x", ErrCorruptBatch, got, want)
	}
	return nil
}

// each walks the records of a batch whose header passed checkHeader, calling
// fn (when not nil) with each record and its encoded size. It checks
// everything Validate promises except the CRC.
func (b Batch) each(baseOffset int64, fn func(r Record, size int)) error {
	first, want := b.FirstTimestamp(), b.MaxTimestamp()
	maxTs := int64(math.MinInt64)
	c := cursor{b: b[batchHeaderSize:]}
	count := b.Count()
	for i := 0; i < count; i++ {
		before := len(c.b)
		length := c.varint()
		if c.err != nil || length < minRecordSize-1 || length > int64(len(c.b)) {
			return fmt.Errorf("%w: record %d: length %d, %d bytes left", ErrCorruptBatch, i, length, len(c.b))
		}
		body := cursor{b: c.b[:length]}
		c.b = c.b[length:]
		offsetDelta := body.varint()
		tsDelta := body.varint()
		key := body.nullable()
		value := body.nullable()
		headerCount := body.varint()
		if body.err == nil && (headerCount < 0 || headerCount > int64(len(body.b)/minHeaderSize)) {
			return fmt.Errorf("%w: record %d: header count %d", ErrCorruptBatch, i, headerCount)
		}
		headers := body.b
		for j := int64(0); j < headerCount && body.err == nil; j++ {
			if body.nullable() == nil && body.err == nil {
				body.err = fmt.Errorf("null header key")
			}
			body.nullable()
		}
		switch {
		case body.err != nil:
			return fmt.Errorf("%w: record %d: %v", ErrCorruptBatch, i, body.err)
		case len(body.b) != 0:
			return fmt.Errorf("%w: record %d: %d trailing bytes", ErrCorruptBatch, i, len(body.b))
		case offsetDelta != int64(i):
			return fmt.Errorf("%w: record %d has offset delta %d", ErrCorruptBatch, i, offsetDelta)
		case i == 0 && tsDelta != 0:
			return fmt.Errorf("%w: first record's timestamp delta is %d", ErrCorruptBatch, tsDelta)
		}
		ts := first + tsDelta
		maxTs = max(maxTs, ts)
		if fn != nil {
			r := Record{Offset: baseOffset + int64(i), Timestamp: ts, Key: key, Value: value}
			if headerCount > 0 {
				r.Headers = decodeHeaders(headers, int(headerCount))
			}
			fn(r, before-len(c.b))
		}
	}
	if len(c.b) != 0 {
		return fmt.Errorf("%w: %d bytes after the last record", ErrCorruptBatch, len(c.b))
	}
	if maxTs != want {
		return fmt.Errorf("%w: header says max timestamp %d, records say %d", ErrCorruptBatch, want, maxTs)
	}
	return nil
}

// decodeHeaders decodes n headers that each has already walked.
func decodeHeaders(b []byte, n int) []Header {
	hs := make([]Header, n)
	c := cursor{b: b}
	for i := range hs {
		hs[i] = Header{Key: string(c.nullable()), Value: c.nullable()}
	}
	return hs
}

// cursor reads varints and length-prefixed bytes; after the first failure
// it keeps err and returns zero values.
type cursor struct {
	b   []byte
	err error
}

func (c *cursor) varint() int64 {
	if c.err != nil {
		return 0
	}
	v, n := binary.Varint(c.b)
	if n <= 0 {
		c.err = fmt.Errorf("bad varint")
		return 0
	}
	c.b = c.b[n:]
	return v
}

// nullable reads a length-prefixed byte string; length -1 gives nil, and an
// empty string gives a non-nil empty slice. The result's capacity is capped
// so that appending to it cannot overwrite the batch.
func (c *cursor) nullable() []byte {
	n := c.varint()
	if c.err != nil {
		return nil
	}
	if n == -1 {
		return nil
	}
	if n < 0 || n > int64(len(c.b)) {
		c.err = fmt.Errorf("length %d, %d bytes left", n, len(c.b))
		return nil
	}
	v := c.b[:n:n]
	c.b = c.b[n:]
	return v
}
