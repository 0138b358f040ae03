package storage

// Version 3: a Kafka record batch v2 (magic 2) stored as the producer sent
// it, compression included (fixed-width integers are big-endian):
//
//	crc      uint32  CRC32C of the 62 bytes from version to the end of Kafka's header
//	version  uint8   3
//	batch    Kafka's record batch v2, verbatim (see internal/recordbatch):
//	         its 61-byte header, then the records as the producer compressed them
//
// Kafka's own CRC covers the batch from its attributes on; the crc before
// the version covers what it does not (the version, baseOffset, batchLength,
// partitionLeaderEpoch, magic, Kafka's crc) and the rest of Kafka's header
// again, so that the header alone can be trusted (Log.ScanBatches,
// readPreamble) and the two CRCs together cover every byte. The producer's
// bytes are never rewritten, but for two fields Kafka's CRC leaves out:
// the partition leader epoch, which the leader sets (SetLeaderEpoch) before
// it proposes the batch to Raft, so that every replica stores the same
// bytes, and the base offset, which Log.Append sets as it stores the batch
// (a batch in a Raft entry carries 0). The crc is recomputed for both.

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/tapes-dev/tapes/internal/recordbatch"
)

// WrapKafka makes a storage batch (version 3) of a Kafka record batch v2
// that passed recordbatch.Validate, copying it. It checks Kafka's header
// against the batch's length (recordbatch.CheckHeader) and nothing else;
// failures wrap ErrCorruptBatch.
func WrapKafka(kafka []byte) (Batch, error) {
	if err := recordbatch.CheckHeader(kafka, len(kafka)); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorruptBatch, err)
	}
	b := make(Batch, batchVersionAt+1+len(kafka))
	b[batchVersionAt] = batchVersionKafka
	copy(b[batchVersionAt+1:], kafka)
	b.putKafkaHeaderCRC()
	return b, nil
}

// Kafka returns the Kafka record batch v2 of a version 3 batch: the bytes
// the producer sent (with its compression), with the base offset the log
// gave it (0 before Log.Append) and the partition leader epoch of the
// leader that appended it; ok is false for batches of versions 1 and 2
// (their records are Kafka's record format without the batch: convert them)
// and for bytes too short to be one. The result shares memory with b. This
// is what a Kafka Fetch returns verbatim.
func (b Batch) Kafka() (batch []byte, ok bool) {
	if len(b) < batchHeaderSizeKafka || b[batchVersionAt] != batchVersionKafka {
		return nil, false
	}
	return b[batchVersionAt+1:], true
}

// Attributes is a Kafka batch's attributes field (transactional: bit 4,
// control: bit 5), read from the header; 0 for versions 1 and 2, which
// are never transactional.
func (b Batch) Attributes() int16 {
	if kb, ok := b.Kafka(); ok {
		return recordbatch.Attributes(kb)
	}
	return 0
}

// Transactional reports a transactional producer's batch or a control
// batch (attributes bit 4).
func (b Batch) Transactional() bool {
	kb, ok := b.Kafka()
	return ok && recordbatch.IsTransactional(kb)
}

// Control reports a control batch (a transaction marker, attributes bit 5):
// not data; readers of records skip it.
func (b Batch) Control() bool {
	kb, ok := b.Kafka()
	return ok && recordbatch.IsControl(kb)
}

// SetLeaderEpoch writes the partition leader epoch into a Kafka batch in
// place (the leader, before it proposes the batch); batches of versions 1
// and 2 have none and are left as they are.
func (b Batch) SetLeaderEpoch(epoch int32) {
	if kb, ok := b.Kafka(); ok {
		recordbatch.SetPartitionLeaderEpoch(kb, epoch)
		b.putKafkaHeaderCRC()
	}
}

// setBaseOffset writes the base offset into a Kafka batch in place
// (segment.write, on the frame's copy).
func (b Batch) setBaseOffset(offset int64) {
	if kb, ok := b.Kafka(); ok {
		recordbatch.SetBaseOffset(kb, offset)
		b.putKafkaHeaderCRC()
	}
}

func (b Batch) kafkaHeaderCRC() uint32 {
	return crc32.Checksum(b[batchVersionAt:batchHeaderSizeKafka], castagnoli)
}

func (b Batch) putKafkaHeaderCRC() {
	binary.BigEndian.PutUint32(b[batchCRCAt:], b.kafkaHeaderCRC())
}

func (b Batch) checkKafkaHeaderCRC() error {
	if got, want := b.kafkaHeaderCRC(), binary.BigEndian.Uint32(b[batchCRCAt:]); got != want {
		return fmt.Errorf("%w: header crc %08x, header says %08x", ErrCorruptBatch, got, want)
	}
	return nil
}

// eachKafka decodes the records of a Kafka batch for Batch.each; a record's
// size is its encoded size before compression, near enough (fields and
// their lengths) for Log.Read's byte budget.
func eachKafka(kb []byte, baseOffset int64, fn func(r Record, size int)) error {
	recs, err := recordbatch.Records(kb, baseOffset)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrCorruptBatch, err)
	}
	if fn == nil {
		return nil
	}
	for _, r := range recs {
		size := minRecordSize + 1 + len(r.Key) + len(r.Value)
		for _, h := range r.Headers {
			size += minHeaderSize + len(h.Key) + len(h.Value)
		}
		fn(r, size)
	}
	return nil
}
