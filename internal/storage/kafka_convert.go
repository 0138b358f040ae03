package storage

// Kafka's record batch (magic 2) for Kafka's Fetch: a version 3 batch is
// one already (Batch.Kafka); one of version 1 or 2 is converted. Kafka's
// layout (big-endian; recordbatch has the whole of it):
//
//	baseOffset            int64
//	batchLength           int32   bytes after this field
//	partitionLeaderEpoch  int32
//	magic                 int8    2
//	crc                   uint32  CRC32C of every byte after it
//	attributes            int16   0: no compression, CreateTime, not transactional, not control
//	lastOffsetDelta       int32   count-1
//	baseTimestamp         int64   the first record's timestamp
//	maxTimestamp          int64
//	producerId            int64
//	producerEpoch         int16
//	baseSequence          int32
//	recordCount           int32
//	records               each: length varint, attributes int8 (0),
//	                      timestampDelta varint, offsetDelta varint, then
//	                      key, value and headers as a stored record has them
//
// A stored record is length, offsetDelta, timestampDelta, then the same
// key, value and headers bytes: so each record is rewritten by swapping its
// two deltas and inserting the attributes byte, its length grows by one, and
// keys, values and headers are copied, not decoded (a null key or value
// stays length -1, an empty one length 0).

import (
	"encoding/binary"
	"fmt"

	"github.com/tapes-dev/tapes/internal/recordbatch"
)

// NoLeaderEpoch is the partition leader epoch of converted batches: versions
// 1 and 2 do not record the leader's epoch (Kafka's -1, "no partition leader
// epoch").
const NoLeaderEpoch int32 = -1

// AppendKafka appends b, whose first record is at baseOffset, as one Kafka
// record batch (magic 2). A version 3 batch is appended verbatim, as the
// producer sent it (its compression, its CRC, the leader epoch it was
// appended in), with baseOffset in its header. One of version 1 or 2 is
// converted: partition leader epoch NoLeaderEpoch, the producer fields of
// b's header (producerEpoch narrowed to Kafka's int16) and CreateTime
// timestamps. b must be a stored batch (it passed Validate when appended;
// ReadBatches checked its CRC); a record whose structure is damaged gives
// an error wrapping ErrCorruptBatch and dst unchanged.
func (b Batch) AppendKafka(dst []byte, baseOffset int64) ([]byte, error) {
	if kb, ok := b.Kafka(); ok {
		start := len(dst)
		dst = append(dst, kb...)
		recordbatch.SetBaseOffset(dst[start:], baseOffset)
		return dst, nil
	}
	if err := b.checkHeader(); err != nil {
		return dst, err
	}
	if v := b[batchVersionAt]; v != batchVersion && v != batchVersionV1 {
		// Only the record layout of versions 1 and 2 is rewritten here.
		return dst, fmt.Errorf("%w: version %d is not converted to a Kafka batch", ErrCorruptBatch, v)
	}
	count := b.Count()
	p := b.Producer()
	epoch := NoLeaderEpoch
	start := len(dst)
	dst = binary.BigEndian.AppendUint64(dst, uint64(baseOffset))
	dst = binary.BigEndian.AppendUint32(dst, 0) // batchLength, below
	dst = binary.BigEndian.AppendUint32(dst, uint32(epoch))
	dst = append(dst, recordbatch.Magic)
	dst = binary.BigEndian.AppendUint32(dst, 0) // crc, below
	dst = binary.BigEndian.AppendUint16(dst, 0) // attributes
	dst = binary.BigEndian.AppendUint32(dst, uint32(count-1))
	dst = binary.BigEndian.AppendUint64(dst, uint64(b.FirstTimestamp()))
	dst = binary.BigEndian.AppendUint64(dst, uint64(b.MaxTimestamp()))
	dst = binary.BigEndian.AppendUint64(dst, uint64(p.ID))
	dst = binary.BigEndian.AppendUint16(dst, uint16(int16(p.Epoch)))
	dst = binary.BigEndian.AppendUint32(dst, uint32(p.BaseSequence))
	dst = binary.BigEndian.AppendUint32(dst, uint32(count))
	c := cursor{b: b[b.headerSize():]}
	for i := 0; i < count; i++ {
		length := c.varint()
		if c.err != nil || length < minRecordSize-1 || length > int64(len(c.b)) {
			return dst[:start], fmt.Errorf("%w: record %d: length %d, %d bytes left", ErrCorruptBatch, i, length, len(c.b))
		}
		body := cursor{b: c.b[:length]}
		c.b = c.b[length:]
		offsetDelta := body.varint()
		tsDelta := body.varint()
		if body.err != nil {
			return dst[:start], fmt.Errorf("%w: record %d: %v", ErrCorruptBatch, i, body.err)
		}
		dst = binary.AppendVarint(dst, length+1)
		dst = append(dst, 0) // record attributes
		dst = binary.AppendVarint(dst, tsDelta)
		dst = binary.AppendVarint(dst, offsetDelta)
		dst = append(dst, body.b...) // key, value, headers
	}
	if len(c.b) != 0 {
		return dst[:start], fmt.Errorf("%w: %d bytes after the last record", ErrCorruptBatch, len(c.b))
	}
	recordbatch.Seal(dst[start:])
	return dst, nil
}
