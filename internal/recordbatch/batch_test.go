package recordbatch

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"testing"

	"github.com/klauspost/compress/s2"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tapes-dev/tapes/internal/kerr"
)

// testRecords returns n records with keys, values, a null value and
// headers, as a producer would send them.
func testRecords(n int) []kmsg.Record {
	rs := make([]kmsg.Record, n)
	for i := range rs {
		rs[i] = kmsg.Record{
			TimestampDelta64: int64(i * 3),
			OffsetDelta:      int32(i),
			Key:              []byte{'k', byte('0' + i%10)},
			Value:            bytes.Repeat([]byte("value "), 20),
			Headers:          []kmsg.Header{{Key: "h", Value: []byte("v")}, {Key: "null"}},
		}
	}
	if n > 1 {
		rs[1].Value = nil
	}
	return rs
}

// encodeRecords encodes records as a batch's records section, each with its
// length.
func encodeRecords(rs []kmsg.Record) []byte {
	var out []byte
	for _, r := range rs {
		r.Length = 0
		body := r.AppendTo(nil)[1:] // without the one-byte varint 0
		r.Length = int32(len(body))
		out = r.AppendTo(out)
	}
	return out
}

// compressWithKgo compresses raw records with kgo's own compressor.
func compressWithKgo(t *testing.T, codec kgo.CompressionCodec, raw []byte) []byte {
	t.Helper()
	c, err := kgo.DefaultCompressor(codec)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := c.Compress(new(bytes.Buffer), raw)
	return bytes.Clone(out)
}

// buildBatch encodes a v2 batch of records (already compressed as attrs
// says) through kmsg.RecordBatch, with a correct length and CRC, after edit
// changed the header.
func buildBatch(records []byte, count int32, attrs int16, edit func(*kmsg.RecordBatch)) []byte {
	b := kmsg.RecordBatch{
		Magic:           2,
		Attributes:      attrs,
		LastOffsetDelta: count - 1,
		FirstTimestamp:  1_700_000_000_000,
		MaxTimestamp:    1_700_000_000_000 + int64(count-1)*3,
		ProducerID:      77,
		ProducerEpoch:   3,
		FirstSequence:   1000,
		NumRecords:      count,
		Records:         records,
	}
	if edit != nil {
		edit(&b)
	}
	out := b.AppendTo(nil)
	if b.Length == 0 {
		binary.BigEndian.PutUint32(out[lengthAt:], uint32(len(out)-logOverhead))
	}
	if b.CRC == 0 {
		binary.BigEndian.PutUint32(out[crcAt:], crc32.Checksum(out[attributesAt:], castagnoli))
	}
	return out
}

// xerialSnappy frames raw in the Java client's xerial snappy format, in
// blocks of chunk bytes.
func xerialSnappy(raw []byte, chunk int) []byte {
	out := append([]byte{}, xerialMagic...)
	out = binary.BigEndian.AppendUint32(out, 1)
	out = binary.BigEndian.AppendUint32(out, 1)
	for len(raw) > 0 {
		n := min(chunk, len(raw))
		block := s2.EncodeSnappy(nil, raw[:n])
		out = binary.BigEndian.AppendUint32(out, uint32(len(block)))
		out = append(out, block...)
		raw = raw[n:]
	}
	return out
}

// codecCase is raw records compressed one way, as producers send them.
type codecCase struct {
	name    string
	codec   Codec
	records []byte
}

// codecCases compresses raw with every codec (kgo's compressors, and the
// Java client's xerial snappy framing).
func codecCases(t *testing.T, raw []byte) []codecCase {
	return []codecCase{
		{"none", CodecNone, raw},
		{"gzip", CodecGzip, compressWithKgo(t, kgo.GzipCompression(), raw)},
		{"snappy", CodecSnappy, compressWithKgo(t, kgo.SnappyCompression(), raw)},
		{"snappy xerial (Java)", CodecSnappy, xerialSnappy(raw, 100)},
		{"lz4", CodecLz4, compressWithKgo(t, kgo.Lz4Compression(), raw)},
		{"zstd", CodecZstd, compressWithKgo(t, kgo.ZstdCompression(), raw)},
	}
}

func TestValidateAcceptsEveryCodec(t *testing.T) {
	raw := encodeRecords(testRecords(5))
	for _, tc := range codecCases(t, raw) {
		t.Run(tc.name, func(t *testing.T) {
			b := buildBatch(tc.records, 5, int16(tc.codec), nil)
			info, err := Validate(b, 9)
			if err != nil {
				t.Fatalf("Validate: %v", err)
			}
			want := Info{
				Size: len(b), Records: 5, Codec: tc.codec,
				FirstTimestamp: 1_700_000_000_000, MaxTimestamp: 1_700_000_000_012,
				ProducerID: 77, ProducerEpoch: 3, BaseSequence: 1000,
				UncompressedBytes: len(raw),
			}
			if info != want {
				t.Fatalf("info %+v, want %+v", info, want)
			}
		})
	}
}

func TestValidateRefusesAsKafkaDoes(t *testing.T) {
	raw := encodeRecords(testRecords(3))
	good := buildBatch(raw, 3, 0, nil)
	withCRC := func(b []byte) []byte {
		b = bytes.Clone(b)
		binary.BigEndian.PutUint32(b[crcAt:], crc32.Checksum(b[attributesAt:], castagnoli))
		return b
	}
	badDelta := testRecords(3)
	badDelta[2].OffsetDelta = 5
	hugeSnappy := binary.AppendUvarint(nil, 300<<20) // a block that claims 300 MiB
	hugeSnappy = append(hugeSnappy, 0, 0, 0, 0)
	cases := []struct {
		name    string
		batch   []byte
		version int16
		want    kerr.Code
	}{
		{"empty", nil, 9, kerr.InvalidRecord},
		{"cut before magic", good[:16], 9, kerr.InvalidRecord},
		{"magic 0", func() []byte { b := bytes.Clone(good); b[magicAt] = 0; return b }(), 9, kerr.InvalidRecord},
		{"magic 1", func() []byte { b := bytes.Clone(good); b[magicAt] = 1; return b }(), 9, kerr.InvalidRecord},
		{"wrong crc", func() []byte { b := bytes.Clone(good); b[len(b)-1] ^= 0xff; return b }(), 9, kerr.CorruptMessage},
		{"length beyond the records", good[:len(good)-1], 9, kerr.InvalidRecord},
		{"two batches", append(bytes.Clone(good), good...), 9, kerr.InvalidRecord},
		{"length below 14", buildBatch(raw, 3, 0, func(b *kmsg.RecordBatch) { b.Length = 13 })[:60], 9, kerr.CorruptMessage},
		{"length below the header", func() []byte {
			b := bytes.Clone(good[:40])
			binary.BigEndian.PutUint32(b[lengthAt:], 28)
			return b
		}(), 9, kerr.CorruptMessage},
		{"base offset not 0", buildBatch(raw, 3, 0, func(b *kmsg.RecordBatch) { b.FirstOffset = 7 }), 9, kerr.InvalidRecord},
		{"count above the records", buildBatch(raw, 4, 0, nil), 9, kerr.InvalidRecord},
		{"count below the records", buildBatch(raw, 2, 0, nil), 9, kerr.InvalidRecord},
		{"count 0", buildBatch(nil, 0, 0, nil), 9, kerr.InvalidRecord},
		{"lastOffsetDelta off", buildBatch(raw, 3, 0, func(b *kmsg.RecordBatch) { b.LastOffsetDelta = 1 }), 9, kerr.InvalidRecord},
		{"offset delta 5 at record 2", buildBatch(encodeRecords(badDelta), 3, 0, nil), 9, kerr.InvalidRecord},
		{"record length past the end", withCRC(append(bytes.Clone(good[:len(good)-1]), 0x7f)), 9, kerr.InvalidRecord},
		{"bytes after the records", buildBatch(append(bytes.Clone(raw), 0), 3, 0, nil), 9, kerr.InvalidRecord},
		{"control batch", buildBatch(raw, 3, attrControl, nil), 9, kerr.InvalidRecord},
		{"zstd before Produce v7", buildBatch(compressWithKgo(t, kgo.ZstdCompression(), raw), 3, int16(CodecZstd), nil), 6, kerr.UnsupportedCompressionType},
		{"codec 5", buildBatch(raw, 3, 5, nil), 9, kerr.UnsupportedCompressionType},
		{"gzip that is not gzip", buildBatch(raw, 3, int16(CodecGzip), nil), 9, kerr.CorruptMessage},
		{"lz4 that is not lz4", buildBatch(raw, 3, int16(CodecLz4), nil), 9, kerr.CorruptMessage},
		{"snappy claiming 300 MiB", buildBatch(hugeSnappy, 3, int16(CodecSnappy), nil), 9, kerr.CorruptMessage},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Validate(tc.batch, tc.version)
			if !kerr.Is(err, tc.want) {
				t.Fatalf("Validate: %v, want %s", err, tc.want)
			}
		})
	}
}
