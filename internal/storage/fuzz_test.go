package storage

import (
	"errors"
	"reflect"
	"testing"
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
	f.Fuzz(func(t *testing.T, data []byte) {
		b := Batch(data)
		_, _, _ = b.Count(), b.FirstTimestamp(), b.MaxTimestamp()
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
		if derr != nil {
			t.Fatalf("Validate accepts what Records rejects: %v", derr)
		}
		if len(recs) != b.Count() {
			t.Fatalf("%d records, header says %d", len(recs), b.Count())
		}
		again, err := EncodeBatch(recs).Records(42)
		if err != nil || !reflect.DeepEqual(again, recs) {
			t.Fatalf("re-encoding changed the records: %v", err)
		}
	})
}
