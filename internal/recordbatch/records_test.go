package recordbatch

import (
	"bytes"
	"encoding/binary"
	"math"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tapes-dev/tapes/internal/kerr"
)

// sampleRecords has a null key, an empty key, a null value, an empty value,
// headers with null and empty values, and timestamps out of order.
func sampleRecords() []Record {
	return []Record{
		{Timestamp: 1_700_000_000_500, Key: []byte("k1"), Value: []byte("v1"), Headers: []Header{{Key: "h", Value: []byte("x")}, {Key: "null"}, {Key: "empty", Value: []byte{}}}},
		{Timestamp: 1_700_000_000_100, Key: nil, Value: nil},
		{Timestamp: 1_700_000_000_900, Key: []byte{}, Value: []byte{}},
		{Timestamp: 1_700_000_000_900, Key: []byte("k1"), Value: bytes.Repeat([]byte("long "), 100)},
	}
}

func withOffsets(rs []Record, base int64) []Record {
	out := append([]Record(nil), rs...)
	for i := range out {
		out[i].Offset = base + int64(i)
	}
	return out
}

func TestEncodeValidatesAndDecodesBack(t *testing.T) {
	p := Producer{ID: 12, Epoch: 3, BaseSequence: 40}
	b := Encode(p, sampleRecords())
	info, err := Validate(b, 3)
	if err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if info.Records != 4 || info.FirstTimestamp != 1_700_000_000_500 || info.MaxTimestamp != 1_700_000_000_900 ||
		info.ProducerID != 12 || info.ProducerEpoch != 3 || info.BaseSequence != 40 || info.Codec != CodecNone {
		t.Fatalf("info %+v", info)
	}
	if MaxTimestamp(b) != info.MaxTimestamp || ProducerOf(b) != p || PartitionLeaderEpoch(b) != -1 || Count(b) != 4 {
		t.Fatalf("header: max ts %d, producer %+v, epoch %d", MaxTimestamp(b), ProducerOf(b), PartitionLeaderEpoch(b))
	}
	got, err := Records(b, 100)
	if err != nil {
		t.Fatalf("Records: %v", err)
	}
	if want := withOffsets(sampleRecords(), 100); !reflect.DeepEqual(got, want) {
		t.Fatalf("records\n got %+v\nwant %+v", got, want)
	}
	if got[1].Key != nil || got[2].Key == nil || got[0].Headers[1].Value != nil || got[0].Headers[2].Value == nil {
		t.Fatal("null and empty are not kept apart")
	}
	// kmsg, an independent reader, agrees.
	var kb kmsg.RecordBatch
	if err := kb.ReadFrom(b); err != nil {
		t.Fatalf("kmsg reads the batch: %v", err)
	}
	if kb.NumRecords != 4 || kb.MaxTimestamp != info.MaxTimestamp || int(kb.Length) != len(b)-12 {
		t.Fatalf("kmsg reads %+v", kb)
	}
}

// TestRecordsOfEveryCodec: batches compressed by kgo's compressors decode to
// the records written.
func TestRecordsOfEveryCodec(t *testing.T) {
	kr := testRecords(5)
	raw := encodeRecords(kr)
	for _, tc := range codecCases(t, raw) {
		t.Run(tc.name, func(t *testing.T) {
			b := buildBatch(tc.records, 5, int16(tc.codec), nil)
			got, err := Records(b, 7)
			if err != nil {
				t.Fatalf("Records: %v", err)
			}
			if len(got) != 5 {
				t.Fatalf("%d records", len(got))
			}
			for i, r := range got {
				want := kr[i]
				if r.Offset != 7+int64(i) || r.Timestamp != 1_700_000_000_000+want.TimestampDelta64 ||
					!bytes.Equal(r.Key, want.Key) || (r.Value == nil) != (want.Value == nil) || !bytes.Equal(r.Value, want.Value) ||
					len(r.Headers) != 2 || r.Headers[0].Key != "h" || string(r.Headers[0].Value) != "v" || r.Headers[1].Value != nil {
					t.Fatalf("record %d: %+v, want %+v", i, r, want)
				}
			}
		})
	}
}

// TestLogAppendTimeBatch: every record of a LogAppendTime batch reads the
// header's maxTimestamp; SetMaxTimestamp turns it into a CreateTime batch
// with the records' own maximum and a CRC that checks.
func TestLogAppendTimeBatch(t *testing.T) {
	b := Encode(NoProducer, sampleRecords())
	binary.BigEndian.PutUint16(b[attributesAt:], attrLogAppendTime)
	binary.BigEndian.PutUint64(b[maxTimestampAt:], 1_800_000_000_000)
	putCRC(b)
	rs, err := Records(b, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Timestamp != 1_800_000_000_000 {
			t.Fatalf("record %d has timestamp %d, want the append time", r.Offset, r.Timestamp)
		}
	}
	if !SetMaxTimestamp(b, 1_700_000_000_900) || Attributes(b) != 0 || MaxTimestamp(b) != 1_700_000_000_900 {
		t.Fatalf("SetMaxTimestamp: attributes %x, max %d", Attributes(b), MaxTimestamp(b))
	}
	if err := CheckCRC(b); err != nil {
		t.Fatal(err)
	}
	if SetMaxTimestamp(b, 1_700_000_000_900) {
		t.Fatal("SetMaxTimestamp changed a batch already right")
	}
}

// TestRecordsRefusesDamage: a stored batch whose header or records are
// damaged is refused, never decoded into something else.
func TestRecordsRefusesDamage(t *testing.T) {
	good := Encode(NoProducer, sampleRecords())
	for name, edit := range map[string]func([]byte) []byte{
		"cut":            func(b []byte) []byte { return b[:len(b)-1] },
		"magic 1":        func(b []byte) []byte { b[magicAt] = 1; return b },
		"count 0":        func(b []byte) []byte { binary.BigEndian.PutUint32(b[countAt:], 0); return b },
		"count too high": func(b []byte) []byte { binary.BigEndian.PutUint32(b[countAt:], 5); return b },
		"record length":  func(b []byte) []byte { b[HeaderSize] = 0x7f; return b },
		"short":          func(b []byte) []byte { return b[:40] },
	} {
		b := edit(bytes.Clone(good))
		if _, err := Records(b, 0); !kerr.Is(err, kerr.CorruptMessage) && !kerr.Is(err, kerr.InvalidRecord) {
			t.Errorf("%s: %v", name, err)
		}
	}
	bad := bytes.Clone(good)
	bad[len(bad)-1] ^= 1
	if err := CheckCRC(bad); !kerr.Is(err, kerr.CorruptMessage) {
		t.Fatalf("CheckCRC of a damaged batch: %v", err)
	}
}

func TestVarintLen(t *testing.T) {
	for _, x := range []int64{0, 1, -1, 63, -64, 64, -65, 1 << 20, -(1 << 20), math.MaxInt64, math.MinInt64} {
		if got, want := VarintLen(x), len(binary.AppendVarint(nil, x)); got != want {
			t.Errorf("VarintLen(%d) = %d, want %d", x, got, want)
		}
	}
}
