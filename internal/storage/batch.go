package storage

// The batch codec. A Batch's layout (fixed-width integers are big-endian):
//
//	crc             uint32  CRC32C (Castagnoli) of every byte after this field
//	version         uint8   batchVersion (2); version 1 is read too, see below
//	count           int32   number of records, at least 1
//	firstTimestamp  int64   timestamp of the first record (ms since the epoch)
//	maxTimestamp    int64   largest timestamp of any record
//	producerID      int64   idempotent producer's id; -1 (NoProducer) for none
//	producerEpoch   int32   its epoch; -1 for none
//	baseSequence    int32   sequence number of the first record; -1 for none
//	headerCRC       uint32  CRC32C of the 37 bytes from version to baseSequence
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
// The fixed header is 45 bytes. The crc covers everything, the producer
// fields included; headerCRC covers the fixed header alone, so that a reader
// of headers only (Log.ScanBatches) can trust them without reading the
// records.
//
// Version 1, written before producer fields existed, is the same without the
// four fields from producerID to headerCRC: a 25-byte fixed header, then the
// records. It is still accepted everywhere (segments on disk, Raft entries
// replayed, snapshot streams) and its batches report NoProducer. EncodeBatch
// and EncodeProducerBatch always write version 2.
//
// Version 3 is a Kafka record batch v2 stored verbatim behind a crc and the
// version byte (kafka.go, WrapKafka): what Kafka producers send and what
// the broker's gRPC Produce now writes (recordbatch.Encode). Every method
// of Batch reads all three versions.
//
// A varint is a zig-zag signed varint (encoding/binary's PutVarint). A batch
// carries no base offset: the log assigns it on append.

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"

	"github.com/tapes-dev/tapes/internal/recordbatch"
)

// Header is one record header: recordbatch's (Kafka's record format), so
// that records decoded from either batch format are the same values.
type Header = recordbatch.Header

// Record is one record of a partition. Offset is assigned by the log and
// ignored by EncodeBatch; Timestamp is in milliseconds since the Unix epoch;
// a nil Key or Value is null, distinct from an empty one.
type Record = recordbatch.Record

// Batch is an encoded record batch without its base offset and Raft index:
// what one producer request becomes, and what one Raft log entry carries.
type Batch []byte

// ProducerInfo is what an idempotent producer puts in each batch it sends to
// a partition: its id and epoch (from the controller) and the sequence number
// of the batch's first record (the records get BaseSequence,
// BaseSequence+1, ...; see LastSequence). This package stores the fields and
// checks their CRC; what they mean (duplicates, gaps, fencing) is for the
// partition's state machine.
type ProducerInfo struct {
	ID           int64
	Epoch        int32
	BaseSequence int32
}

// NoProducer marks a batch of a producer that is not idempotent, and every
// batch of format version 1.
var NoProducer = ProducerInfo{ID: -1, Epoch: -1, BaseSequence: -1}

// LastSequence is the sequence number of the last of count records that
// start at p.BaseSequence. As in Kafka, sequence numbers wrap from
// math.MaxInt32 to 0. A BaseSequence of -1 (no sequence) gives -1.
func (p ProducerInfo) LastSequence(count int) int32 {
	if p.BaseSequence == -1 || count < 1 {
		return p.BaseSequence
	}
	return int32((int64(p.BaseSequence) + int64(count) - 1) % (math.MaxInt32 + 1))
}

const (
	batchVersionV1    = 1 // without producer fields; still read
	batchVersion      = 2 // what EncodeBatch writes
	batchVersionKafka = 3 // a Kafka record batch v2, verbatim (kafka.go)

	batchCRCAt        = 0
	batchVersionAt    = 4
	batchCountAt      = 5
	batchFirstTsAt    = 9
	batchMaxTsAt      = 17
	batchHeaderSizeV1 = 25 // version 1's header; also what both versions share
	batchProducerAt   = 25
	batchEpochAt      = 33
	batchBaseSeqAt    = 37
	batchHeaderCRCAt  = 41
	batchHeaderSize   = 45 // version 2's header
	// batchHeaderSizeKafka is version 3's header: crc, version and Kafka's
	// 61-byte batch header, the largest of the three.
	batchHeaderSizeKafka = batchVersionAt + 1 + recordbatch.HeaderSize

	// minRecordSize is the smallest encoded record: six one-byte varints
	// (length, offsetDelta, timestampDelta, keyLength, valueLength, headerCount).
	minRecordSize = 6
	// minHeaderSize is the smallest encoded header: two one-byte varints.
	minHeaderSize = 2
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// EncodeBatch encodes records as one batch of a producer that is not
// idempotent: EncodeProducerBatch(NoProducer, records).
func EncodeBatch(records []Record) Batch {
	return EncodeProducerBatch(NoProducer, records)
}

// EncodeProducerBatch encodes records as one batch that carries p in its
// header. The records' Offset fields are ignored: they get offset deltas
// 0..len(records)-1. A batch of no records is encoded, but Validate rejects
// it.
func EncodeProducerBatch(p ProducerInfo, records []Record) Batch {
	var first, maxTs int64
	if len(records) > 0 {
		first, maxTs = records[0].Timestamp, records[0].Timestamp
	}
	size := batchHeaderSize
	for i := range records {
		r := &records[i]
		maxTs = max(maxTs, r.Timestamp)
		body := recordBodySize(r, int64(i), r.Timestamp-first)
		size += recordbatch.VarintLen(int64(body)) + body
	}
	b := make([]byte, batchHeaderSize, size)
	b[batchVersionAt] = batchVersion
	binary.BigEndian.PutUint32(b[batchCountAt:], uint32(len(records)))
	binary.BigEndian.PutUint64(b[batchFirstTsAt:], uint64(first))
	binary.BigEndian.PutUint64(b[batchMaxTsAt:], uint64(maxTs))
	binary.BigEndian.PutUint64(b[batchProducerAt:], uint64(p.ID))
	binary.BigEndian.PutUint32(b[batchEpochAt:], uint32(p.Epoch))
	binary.BigEndian.PutUint32(b[batchBaseSeqAt:], uint32(p.BaseSequence))
	binary.BigEndian.PutUint32(b[batchHeaderCRCAt:], Batch(b).headerCRC())
	for i := range records {
		r := &records[i]
		tsDelta := r.Timestamp - first
		b = binary.AppendVarint(b, int64(recordBodySize(r, int64(i), tsDelta)))
		b = binary.AppendVarint(b, int64(i))
		b = binary.AppendVarint(b, tsDelta)
		b = recordbatch.AppendPayload(b, r)
	}
	binary.BigEndian.PutUint32(b[batchCRCAt:], crc32.Checksum(b[batchVersionAt:], castagnoli))
	return b
}

// recordBodySize is the size of a record after its length field: Kafka's
// record without its attributes byte, the deltas in the other order.
func recordBodySize(r *Record, offsetDelta, tsDelta int64) int {
	return recordbatch.VarintLen(offsetDelta) + recordbatch.VarintLen(tsDelta) + recordbatch.PayloadSize(r)
}

// Count is the number of records the batch's header declares, or 0 when b is
// shorter than a version 1 header. Only a batch that passed Validate is sure
// to hold that many.
func (b Batch) Count() int {
	if kb, ok := b.Kafka(); ok {
		return int(recordbatch.Count(kb))
	}
	if len(b) < batchHeaderSizeV1 {
		return 0
	}
	return int(int32(binary.BigEndian.Uint32(b[batchCountAt:])))
}

// FirstTimestamp is the first record's timestamp, or 0 when b is shorter than
// a version 1 header.
func (b Batch) FirstTimestamp() int64 {
	if kb, ok := b.Kafka(); ok {
		return recordbatch.BaseTimestamp(kb)
	}
	if len(b) < batchHeaderSizeV1 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(b[batchFirstTsAt:]))
}

// MaxTimestamp is the largest record timestamp, or 0 when b is shorter than a
// version 1 header.
func (b Batch) MaxTimestamp() int64 {
	if kb, ok := b.Kafka(); ok {
		return recordbatch.MaxTimestamp(kb)
	}
	if len(b) < batchHeaderSizeV1 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(b[batchMaxTsAt:]))
}

// Producer is the producer fields of the batch's header: it reads three
// fixed-width fields and decodes nothing else (a Kafka batch's int16 epoch
// widened). A version 1 batch, or bytes too short for their version's
// header, give NoProducer. Only a batch that passed Validate is sure to
// carry what its producer wrote.
func (b Batch) Producer() ProducerInfo {
	if kb, ok := b.Kafka(); ok {
		p := recordbatch.ProducerOf(kb)
		return ProducerInfo{ID: p.ID, Epoch: int32(p.Epoch), BaseSequence: p.BaseSequence}
	}
	if len(b) < batchHeaderSize || b[batchVersionAt] != batchVersion {
		return NoProducer
	}
	return ProducerInfo{
		ID:           int64(binary.BigEndian.Uint64(b[batchProducerAt:])),
		Epoch:        int32(binary.BigEndian.Uint32(b[batchEpochAt:])),
		BaseSequence: int32(binary.BigEndian.Uint32(b[batchBaseSeqAt:])),
	}
}

// headerSize is the size of b's fixed header, by its version byte; 0 for an
// unknown version or bytes too short to hold the version.
func (b Batch) headerSize() int {
	if len(b) <= batchVersionAt {
		return 0
	}
	switch b[batchVersionAt] {
	case batchVersion:
		return batchHeaderSize
	case batchVersionV1:
		return batchHeaderSizeV1
	case batchVersionKafka:
		return batchHeaderSizeKafka
	}
	return 0
}

// headerCRC computes the header CRC of a version 2 batch of at least
// batchHeaderSize bytes.
func (b Batch) headerCRC() uint32 {
	return crc32.Checksum(b[batchVersionAt:batchHeaderCRCAt], castagnoli)
}

// checkHeaderCRC checks the header CRC of a batch whose header passed
// checkHeaderSize; version 1 has none.
func (b Batch) checkHeaderCRC() error {
	if b[batchVersionAt] == batchVersionKafka {
		return b.checkKafkaHeaderCRC()
	}
	if b[batchVersionAt] != batchVersion {
		return nil
	}
	if got, want := b.headerCRC(), binary.BigEndian.Uint32(b[batchHeaderCRCAt:]); got != want {
		return fmt.Errorf("%w: header crc %08x, header says %08x", ErrCorruptBatch, got, want)
	}
	return nil
}

// Validate checks b completely: header, CRC32C, and every record's structure
// (offset deltas 0..count-1, lengths within bounds, no trailing bytes, the
// header's timestamps matching the records'). Failures wrap ErrCorruptBatch.
//
// A Kafka batch (version 3) is checked by its headers and its two CRCs,
// which together cover every byte, without decompressing its records: their
// structure was checked by recordbatch.Validate on the leader before it
// proposed the batch, and every replica and every recovery decompressing
// every batch again would cost more than the append. Records still checks
// the structure of what it decodes.
func (b Batch) Validate() error {
	if err := b.checkHeader(); err != nil {
		return err
	}
	if err := b.checkCRC(); err != nil {
		return err
	}
	if b[batchVersionAt] == batchVersionKafka {
		return nil
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
	if kb, ok := b.Kafka(); ok {
		recs, err := recordbatch.Records(kb, baseOffset)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrCorruptBatch, err)
		}
		return recs, nil
	}
	out := make([]Record, 0, b.Count())
	err := b.each(baseOffset, func(r Record, _ int) { out = append(out, r) })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// checkHeader checks what the fixed header says against len(b): a known
// version, a whole header, a record count that fits.
func (b Batch) checkHeader() error {
	if err := b.checkHeaderSize(); err != nil {
		return err
	}
	return b.checkCount(len(b))
}

// checkHeaderSize checks that b starts with a whole header of a known version.
func (b Batch) checkHeaderSize() error {
	if len(b) < batchHeaderSizeV1 {
		return fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrCorruptBatch, len(b), batchHeaderSizeV1)
	}
	size := b.headerSize()
	if size == 0 {
		return fmt.Errorf("%w: version %d, want %d, %d or %d", ErrCorruptBatch, b[batchVersionAt], batchVersionV1, batchVersion, batchVersionKafka)
	}
	if len(b) < size {
		return fmt.Errorf("%w: %d bytes, shorter than the %d-byte version %d header", ErrCorruptBatch, len(b), size, b[batchVersionAt])
	}
	return nil
}

// checkCount checks that the header's record count fits a batch of
// batchLen bytes (b may be the header only).
func (b Batch) checkCount(batchLen int) error {
	if kb, ok := b.Kafka(); ok {
		if err := recordbatch.CheckHeader(kb, batchLen-(batchVersionAt+1)); err != nil {
			return fmt.Errorf("%w: %v", ErrCorruptBatch, err)
		}
		return nil
	}
	n := b.Count()
	if n < 1 || n > (batchLen-b.headerSize())/minRecordSize {
		return fmt.Errorf("%w: record count %d does not fit %d bytes", ErrCorruptBatch, n, batchLen)
	}
	return nil
}

// checkCRC checks both CRCs of a batch whose header passed checkHeader.
func (b Batch) checkCRC() error {
	if kb, ok := b.Kafka(); ok {
		if err := b.checkKafkaHeaderCRC(); err != nil {
			return err
		}
		if err := recordbatch.CheckCRC(kb); err != nil {
			return fmt.Errorf("%w: %v", ErrCorruptBatch, err)
		}
		return nil
	}
	want := binary.BigEndian.Uint32(b[batchCRCAt:])
	if got := crc32.Checksum(b[batchVersionAt:], castagnoli); got != want {
		return fmt.Errorf("%w: crc %08x, header says %08x", ErrCorruptBatch, got, want)
	}
	return b.checkHeaderCRC()
}

// each walks the records of a batch whose header passed checkHeader, calling
// fn (when not nil) with each record and its encoded size. It checks
// everything Validate promises except the CRC.
func (b Batch) each(baseOffset int64, fn func(r Record, size int)) error {
	if kb, ok := b.Kafka(); ok {
		return eachKafka(kb, baseOffset, fn)
	}
	first, want := b.FirstTimestamp(), b.MaxTimestamp()
	maxTs := int64(math.MinInt64)
	c := cursor{b: b[b.headerSize():]}
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
