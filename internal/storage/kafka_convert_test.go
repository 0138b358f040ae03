package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tapes-dev/tapes/internal/recordbatch"
)

// decodeKafka decodes one Kafka record batch with franz-go's kmsg, checking
// its length and CRC32C as a Kafka client does, and returns its header and
// records as storage Records.
func decodeKafka(t *testing.T, kb []byte) (kmsg.RecordBatch, []Record) {
	t.Helper()
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(kb); err != nil {
		t.Fatalf("kmsg.RecordBatch: %v", err)
	}
	if int(rb.Length) != len(kb)-12 {
		t.Fatalf("batchLength %d, batch is %d bytes", rb.Length, len(kb))
	}
	if rb.Magic != 2 {
		t.Fatalf("magic %d", rb.Magic)
	}
	if got := crc32.Checksum(kb[21:], crc32.MakeTable(crc32.Castagnoli)); uint32(rb.CRC) != got {
		t.Fatalf("crc %08x, bytes give %08x", uint32(rb.CRC), got)
	}
	var out []Record
	src := rb.Records
	for i := 0; i < int(rb.NumRecords); i++ {
		length, n := binary.Varint(src)
		if n <= 0 || int(length) > len(src)-n {
			t.Fatalf("record %d: bad length", i)
		}
		var kr kmsg.Record
		if err := kr.ReadFrom(src[:n+int(length)]); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		src = src[n+int(length):]
		if kr.Attributes != 0 || int(kr.OffsetDelta) != i {
			t.Fatalf("record %d: attributes %d, offset delta %d", i, kr.Attributes, kr.OffsetDelta)
		}
		r := Record{Offset: rb.FirstOffset + int64(kr.OffsetDelta), Timestamp: rb.FirstTimestamp + kr.TimestampDelta64, Key: kr.Key, Value: kr.Value}
		for _, h := range kr.Headers {
			r.Headers = append(r.Headers, Header{Key: h.Key, Value: h.Value})
		}
		out = append(out, r)
	}
	if len(src) != 0 {
		t.Fatalf("%d bytes after the records", len(src))
	}
	return rb, out
}

func TestAppendKafkaRoundTrip(t *testing.T) {
	var recs []Record
	// Values of 0..199 bytes: records whose length varint grows by a byte
	// when the attributes byte is added (body length 63 -> 64).
	for i := range 200 {
		recs = append(recs, Record{Timestamp: 1_700_000_000_000 + int64(i%7)*3 - 5, Key: []byte("k"), Value: bytes.Repeat([]byte{'v'}, i)})
	}
	recs[0].Timestamp = 1_700_000_000_000
	recs[1].Key, recs[2].Key = nil, []byte{}
	recs[3].Value, recs[4].Value = nil, []byte{}
	recs[5].Headers = []Header{{Key: "a", Value: []byte("1")}, {Key: "null", Value: nil}, {Key: "empty", Value: []byte{}}, {Key: "", Value: []byte("x")}}
	prod := ProducerInfo{ID: 12345678901, Epoch: 3, BaseSequence: 77}
	for _, tc := range []struct {
		name string
		b    Batch
		p    ProducerInfo
	}{
		{"v2", EncodeBatch(recs), NoProducer},
		{"v2 idempotent", EncodeProducerBatch(prod, recs), prod},
		{"v1", encodeV1Batch(recs), NoProducer},
		{"one record", EncodeBatch(recs[5:6]), NoProducer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := tc.b.Records(1000)
			if err != nil {
				t.Fatal(err)
			}
			prefix := []byte("before")
			kb, err := tc.b.AppendKafka(append([]byte{}, prefix...), 1000)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(kb, prefix) {
				t.Fatal("AppendKafka did not append")
			}
			rb, got := decodeKafka(t, kb[len(prefix):])
			if rb.FirstOffset != 1000 || rb.PartitionLeaderEpoch != -1 || rb.Attributes != 0 ||
				int(rb.LastOffsetDelta) != len(want)-1 || int(rb.NumRecords) != len(want) ||
				rb.FirstTimestamp != tc.b.FirstTimestamp() || rb.MaxTimestamp != tc.b.MaxTimestamp() {
				t.Fatalf("header %+v", rb)
			}
			if rb.ProducerID != tc.p.ID || int32(rb.ProducerEpoch) != tc.p.Epoch || rb.FirstSequence != tc.p.BaseSequence {
				t.Fatalf("producer %d/%d/%d, want %+v", rb.ProducerID, rb.ProducerEpoch, rb.FirstSequence, tc.p)
			}
			if !reflect.DeepEqual(got, want) {
				for i := range want {
					if !reflect.DeepEqual(got[i], want[i]) {
						t.Fatalf("record %d:\n got %+v\nwant %+v", i, got[i], want[i])
					}
				}
				t.Fatalf("records differ")
			}
			// Null and empty stay apart.
			for i, r := range got {
				if (r.Key == nil) != (want[i].Key == nil) || (r.Value == nil) != (want[i].Value == nil) {
					t.Fatalf("record %d: null/empty key or value changed", i)
				}
				for j, h := range r.Headers {
					if (h.Value == nil) != (want[i].Headers[j].Value == nil) {
						t.Fatalf("record %d header %d: null/empty value changed", i, j)
					}
				}
			}
		})
	}
}

func TestAppendKafkaRefusesDamage(t *testing.T) {
	good := EncodeBatch([]Record{{Timestamp: 1, Value: []byte("abc")}, {Timestamp: 2, Value: []byte("de")}})
	for name, b := range map[string]Batch{
		"short":          good[:10],
		"truncated":      good[:len(good)-2],
		"trailing bytes": append(append(Batch{}, good...), 0, 0, 0, 0, 0, 0),
		"unknown version": func() Batch {
			b := append(Batch{}, good...)
			b[batchVersionAt] = 9
			return reseal(b)
		}(),
		"bad length": func() Batch {
			b := append(Batch{}, good...)
			b[batchHeaderSize] = 0x7e // a record length of 63: past the end
			return b
		}(),
	} {
		dst := []byte("keep")
		out, err := b.AppendKafka(dst, 5)
		if !errors.Is(err, ErrCorruptBatch) {
			t.Fatalf("%s: %v, want ErrCorruptBatch", name, err)
		}
		if string(out) != "keep" {
			t.Fatalf("%s: dst changed to %q", name, out)
		}
	}
}

// BenchmarkReadBatchesKafka measures what Kafka's Fetch costs the broker
// per batch: ReadBatches of one 100-record batch at offsets spread over a
// 20 MB log (from the page cache), then AppendKafka; "read" is Read of the
// same records, gRPC's Fetch path. MB/s counts stored batch bytes.
func BenchmarkReadBatchesKafka(b *testing.B) {
	l, batch := benchLog(b)
	end := l.EndOffset()
	b.Run("batches+kafka", func(b *testing.B) {
		b.SetBytes(int64(len(batch)))
		var dst []byte
		for i := 0; i < b.N; i++ {
			o := int64(i*7919%benchBatches) * 100
			bs, err := l.ReadBatches(o, len(batch), end, true)
			if err != nil || len(bs) != 1 {
				b.Fatalf("ReadBatches(%d) = %d batches, %v", o, len(bs), err)
			}
			if dst, err = bs[0].Batch.AppendKafka(dst[:0], bs[0].BaseOffset); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)*100/b.Elapsed().Seconds(), "records/s")
	})
	b.Run("read", func(b *testing.B) {
		b.SetBytes(int64(len(batch)))
		for i := 0; i < b.N; i++ {
			o := int64(i*7919%benchBatches) * 100
			if recs, err := l.Read(o, 1<<30, o+100); err != nil || len(recs) != 100 {
				b.Fatalf("Read(%d) = %d records, %v", o, len(recs), err)
			}
		}
		b.ReportMetric(float64(b.N)*100/b.Elapsed().Seconds(), "records/s")
	})
}

// TestAppendKafkaPassesKafkaBatchesVerbatim: a Kafka batch appended to the
// log and read back with ReadBatches comes out of AppendKafka as the
// producer sent it (compression and CRC), with only the base offset and the
// leader epoch the log and the leader gave it.
func TestAppendKafkaPassesKafkaBatchesVerbatim(t *testing.T) {
	for _, codec := range kafkaCodecs {
		t.Run(codec.name, func(t *testing.T) {
			l := openLog(t, t.TempDir(), smallConfig)
			if _, err := l.Append(1, batchAt(0, 3)); err != nil { // a version 2 batch first
				t.Fatal(err)
			}
			sent := kafkaBytesAt(t, 3, 5, recordbatch.Producer{ID: 9, Epoch: 1, BaseSequence: 0}, codec.id, codec.kgo)
			b := wrap(t, sent)
			b.SetLeaderEpoch(7)
			if _, err := l.Append(2, b); err != nil {
				t.Fatal(err)
			}
			bs, err := l.ReadBatches(3, 1<<20, l.EndOffset(), true)
			if err != nil || len(bs) != 1 || bs[0].BaseOffset != 3 {
				t.Fatalf("ReadBatches(3) = %+v, %v", bs, err)
			}
			got, err := bs[0].Batch.AppendKafka(nil, bs[0].BaseOffset)
			if err != nil {
				t.Fatal(err)
			}
			if recordbatch.BaseOffset(got) != 3 || recordbatch.PartitionLeaderEpoch(got) != 7 {
				t.Fatalf("base offset %d, leader epoch %d; want 3, 7", recordbatch.BaseOffset(got), recordbatch.PartitionLeaderEpoch(got))
			}
			// Everything from magic on is the producer's.
			if !bytes.Equal(got[16:], sent[16:]) || len(got) != len(sent) {
				t.Fatalf("%s batch not passed verbatim:\n got %x\nsent %x", codec.name, got, sent)
			}
			if err := recordbatch.CheckCRC(got); err != nil {
				t.Fatal(err)
			}
		})
	}
}
