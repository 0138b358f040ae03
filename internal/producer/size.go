package producer

import tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"

// batchOverhead is the fixed header of an encoded batch: the broker stores
// what gRPC producers send as Kafka record batches v2 (recordbatch.Encode),
// and max.message.bytes counts that batch, its 61-byte header
// (recordbatch.HeaderSize) and the records.
const batchOverhead = 61

// encodedSize is the size of r inside an encoded batch, as record offsetDelta
// with timestampDelta to the batch's first record (Kafka's record format v2:
// a length varint, then the record's attributes byte and fields).
func encodedSize(r *tapesv1.Record, offsetDelta, tsDelta int64) int {
	body := 1 + varintSize(offsetDelta) + varintSize(tsDelta) + bytesSize(r.Key) + bytesSize(r.Value) +
		varintSize(int64(len(r.Headers)))
	for _, h := range r.Headers {
		body += varintSize(int64(len(h.Key))) + len(h.Key) + bytesSize(h.Value)
	}
	return varintSize(int64(body)) + body
}

// SingleRecordBatchSize is the encoded size of a batch holding r alone: a
// record for which it exceeds the topic's max.message.bytes can never be
// written (RECORD_TOO_LARGE).
func SingleRecordBatchSize(r *tapesv1.Record) int {
	return batchOverhead + encodedSize(r, 0, 0)
}

// bytesSize is a nullable byte string's size: a length varint (-1 for nil)
// and the bytes.
func bytesSize(b []byte) int {
	if b == nil {
		return 1
	}
	return varintSize(int64(len(b))) + len(b)
}

// varintSize is the length of x as a zig-zag varint.
func varintSize(x int64) int {
	u := uint64(x<<1) ^ uint64(x>>63)
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}
