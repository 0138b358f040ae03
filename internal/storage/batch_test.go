package storage

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"reflect"
	"testing"
)

func TestBatchRoundTrip(t *testing.T) {
	in := []Record{
		{Timestamp: 5000, Key: nil, Value: []byte("null key")},
		{Timestamp: 4000, Key: []byte{}, Value: []byte("empty key, earlier timestamp")},
		{Timestamp: 9000, Key: []byte("k"), Value: nil},
		{Timestamp: 9000, Key: []byte("k"), Value: []byte{}},
		{Timestamp: math.MinInt64 + 1, Key: []byte("far past"), Value: []byte("v")},
		{Timestamp: math.MaxInt64, Key: []byte("far future"), Value: []byte("v"), Headers: []Header{
			{Key: "event_id", Value: []byte("e-1")},
			{Key: "schema_version", Value: []byte{}},
			{Key: "", Value: nil},
		}},
		{Timestamp: 6000, Key: make([]byte, 300), Value: make([]byte, 70000)},
	}
	b := EncodeBatch(in)
	if err := b.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if b.Count() != len(in) || b.FirstTimestamp() != 5000 || b.MaxTimestamp() != math.MaxInt64 {
		t.Fatalf("header: count %d first %d max %d", b.Count(), b.FirstTimestamp(), b.MaxTimestamp())
	}
	out, err := b.Records(100)
	if err != nil {
		t.Fatalf("Records: %v", err)
	}
	if len(out) != len(in) {
		t.Fatalf("got %d records, want %d", len(out), len(in))
	}
	for i := range in {
		want := in[i]
		want.Offset = 100 + int64(i)
		if !reflect.DeepEqual(out[i], want) {
			t.Errorf("record %d:\n got %+v\nwant %+v", i, out[i], want)
		}
		// reflect.DeepEqual does not tell nil from empty: check it.
		if (out[i].Key == nil) != (in[i].Key == nil) || (out[i].Value == nil) != (in[i].Value == nil) {
			t.Errorf("record %d: key nil %v value nil %v, want %v %v", i, out[i].Key == nil, out[i].Value == nil, in[i].Key == nil, in[i].Value == nil)
		}
	}
	if h := out[5].Headers; h[1].Value == nil || h[2].Value != nil {
		t.Errorf("header values: empty became nil or null became empty: %#v", h)
	}
	// Appending to a decoded key must not overwrite the batch.
	_ = append(out[2].Key, 'X')
	if again, _ := b.Records(100); !reflect.DeepEqual(again, out) {
		t.Errorf("appending to a decoded key changed the batch")
	}
}

// reseal recomputes b's CRCs (the header CRC of a version 2 batch, then the
// CRC of the whole), so that a test reaches the structure checks.
func reseal(b Batch) Batch {
	if len(b) >= batchHeaderSize && b[batchVersionAt] == batchVersion {
		binary.BigEndian.PutUint32(b[batchHeaderCRCAt:], b.headerCRC())
	}
	binary.BigEndian.PutUint32(b[batchCRCAt:], crc32.Checksum(b[batchVersionAt:], castagnoli))
	return b
}

func TestBatchValidateRejects(t *testing.T) {
	good := batchAt(0, 3)
	cp := func() Batch { return append(Batch(nil), good...) }
	cases := map[string]Batch{
		"no records":           EncodeBatch(nil),
		"shorter than header":  good[:batchHeaderSize-1],
		"last byte missing":    good[:len(good)-1],
		"trailing byte":        reseal(append(cp(), 0)),
		"wrong version":        reseal(func() Batch { b := cp(); b[batchVersionAt] = 9; return b }()),
		"count too high":       reseal(func() Batch { b := cp(); b[batchCountAt+3] = 4; return b }()),
		"count too low":        reseal(func() Batch { b := cp(); b[batchCountAt+3] = 2; return b }()),
		"count negative":       reseal(func() Batch { b := cp(); b[batchCountAt] = 0xff; return b }()),
		"max timestamp wrong":  reseal(func() Batch { b := cp(); b[batchMaxTsAt+7]++; return b }()),
		"offset delta skipped": reseal(func() Batch { b := cp(); b[batchHeaderSize+1] = 2; return b }()),
	}
	for name, b := range cases {
		if err := b.Validate(); !errors.Is(err, ErrCorruptBatch) {
			t.Errorf("%s: Validate = %v, want ErrCorruptBatch", name, err)
		}
	}
	// Every single-byte change is caught, by the CRC or the structure.
	for i := range good {
		b := cp()
		b[i] ^= 0x10
		if err := b.Validate(); !errors.Is(err, ErrCorruptBatch) {
			t.Fatalf("byte %d flipped: Validate = %v", i, err)
		}
	}
	if err := good.Validate(); err != nil {
		t.Fatalf("the unmodified batch: %v", err)
	}
}

func TestBatchShortHeaderAccessors(t *testing.T) {
	short := Batch{1, 2, 3}
	if short.Count() != 0 || short.FirstTimestamp() != 0 || short.MaxTimestamp() != 0 {
		t.Fatalf("accessors on a short batch: %d %d %d", short.Count(), short.FirstTimestamp(), short.MaxTimestamp())
	}
	if _, err := short.Records(0); !errors.Is(err, ErrCorruptBatch) {
		t.Fatalf("Records on a short batch: %v", err)
	}
}
