package storage

import (
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tapes-dev/tapes/internal/recordbatch"
)

// FuzzBatch feeds arbitrary bytes to the decoder. It must never panic; what
// Validate accepts must decode, and re-encode to a batch that decodes to the
// same records. `go test` runs the seeds; `go test -fuzz FuzzBatch` explores.
func FuzzBatch(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte(batchAt(0, 1)))
	f.Add([]byte(batchAt(10, 7)))
	f.Add([]byte(EncodeBatch([]Record{{Key: []byte{}, Value: nil, Headers: []Header{{Key: "h"}}}})))
	f.Add([]byte(EncodeBatch(nil)))
	long := batchAt(3, 4)
	f.Add([]byte(long[:len(long)/2]))
	for _, i := range []int{0, batchCountAt + 3, batchHeaderSize, batchHeaderSize + 1, len(long) - 1} {
		b := append(Batch(nil), long...)
		b[i] ^= 0x41
		f.Add([]byte(b))
		f.Add([]byte(reseal(b)))
	}
	// Producer fields (format version 2) and format version 1.
	prod := EncodeProducerBatch(ProducerInfo{ID: 77, Epoch: 3, BaseSequence: math.MaxInt32 - 1}, []Record{recordAt(1), recordAt(2), recordAt(3)})
	f.Add([]byte(prod))
	f.Add([]byte(prod[:batchHeaderSize]))
	for _, i := range []int{batchVersionAt, batchProducerAt, batchEpochAt + 3, batchBaseSeqAt, batchHeaderCRCAt + 1} {
		b := append(Batch(nil), prod...)
		b[i] ^= 0x03
		f.Add([]byte(b))
		f.Add([]byte(reseal(b)))
	}
	old := encodeV1Batch([]Record{recordAt(4), recordAt(5)})
	f.Add([]byte(old))
	f.Add([]byte(old[:batchHeaderSizeV1]))
	for _, i := range []int{batchVersionAt, batchCountAt + 3, batchMaxTsAt + 7, batchHeaderSizeV1 + 1} {
		b := append(Batch(nil), old...)
		b[i] ^= 0x03
		f.Add([]byte(b))
		f.Add([]byte(reseal(b)))
	}
	// Format version 3: Kafka batches, one compressed.
	kafka := wrap(f, kafkaBytesAt(f, 0, 3, recordbatch.Producer{ID: 5, Epoch: 1, BaseSequence: 9}, recordbatch.CodecNone, kgo.NoCompression()))
	f.Add([]byte(kafka))
	f.Add([]byte(wrap(f, kafkaBytesAt(f, 0, 3, recordbatch.NoProducer, recordbatch.CodecSnappy, kgo.SnappyCompression()))))
	for _, i := range []int{0, batchVersionAt, batchVersionAt + 1 + 57, batchHeaderSizeKafka} {
		b := append(Batch(nil), kafka...)
		b[i] ^= 0x03
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b := Batch(data)
		_, _, _, _ = b.Count(), b.FirstTimestamp(), b.MaxTimestamp(), b.Producer()
		recs, derr := b.Records(42)
		verr := b.Validate()
		if verr != nil {
			if !errors.Is(verr, ErrCorruptBatch) {
				t.Fatalf("Validate error %v does not wrap ErrCorruptBatch", verr)
			}
			if derr != nil && !errors.Is(derr, ErrCorruptBatch) {
				t.Fatalf("Records error %v does not wrap ErrCorruptBatch", derr)
			}
			return
		}
		if _, kafka := b.Kafka(); kafka && derr != nil {
			// Validate checks a Kafka batch's CRCs, not its records
			// (recordbatch.Validate did before it was proposed).
			if !errors.Is(derr, ErrCorruptBatch) {
				t.Fatalf("Records error %v does not wrap ErrCorruptBatch", derr)
			}
			return
		}
		if derr != nil {
			t.Fatalf("Validate accepts what Records rejects: %v", derr)
		}
		if len(recs) != b.Count() {
			t.Fatalf("%d records, header says %d", len(recs), b.Count())
		}
		p := b.Producer()
		if _, kafka := b.Kafka(); kafka && p.Epoch > math.MaxInt16 {
			t.Fatalf("Kafka batch reports epoch %d", p.Epoch)
		}
		if b[batchVersionAt] == batchVersionV1 && p != NoProducer {
			t.Fatalf("version 1 batch reports producer %+v", p)
		}
		re := EncodeProducerBatch(p, recs)
		again, err := re.Records(42)
		if err != nil || !reflect.DeepEqual(again, recs) || re.Producer() != p {
			t.Fatalf("re-encoding changed the records or the producer: %v", err)
		}
		if err := re.Validate(); err != nil {
			t.Fatalf("re-encoded batch: %v", err)
		}
	})
}
