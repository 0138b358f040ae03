// Package recordbatch is Kafka's record batch v2 (magic 2), the only format
// Produce v3+ carries and what tapes stores (internal/storage keeps each
// batch as the producer sent it): Validate checks a batch as Kafka's broker
// does before an append, Records decodes one (decompressing), Encode builds
// an uncompressed one from records, and the header accessors and setters
// read and write single fields in place.
//
// The layout (fixed-width integers are big-endian):
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
//
// Errors are *kerr.Error with Kafka's names. Every function is safe for
// concurrent use on distinct or unmodified buffers.
package recordbatch
