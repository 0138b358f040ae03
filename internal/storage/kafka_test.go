package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tapes-dev/tapes/internal/recordbatch"
)

// kafkaCodecs are the compressions a Kafka producer may use, with kgo's
// compressors (nil: none).
var kafkaCodecs = []struct {
	name string
	id   recordbatch.Codec
	kgo  kgo.CompressionCodec
}{
	{"none", recordbatch.CodecNone, kgo.NoCompression()},
	{"gzip", recordbatch.CodecGzip, kgo.GzipCompression()},
	{"snappy", recordbatch.CodecSnappy, kgo.SnappyCompression()},
	{"lz4", recordbatch.CodecLz4, kgo.Lz4Compression()},
	{"zstd", recordbatch.CodecZstd, kgo.ZstdCompression()},
}

// kafkaBytesAt is recordAt(first..first+count-1) as a Kafka producer sends
// it: a record batch v2 of producer p whose records kgo compressed with c.
func kafkaBytesAt(t testing.TB, first int64, count int, p recordbatch.Producer, c recordbatch.Codec, kc kgo.CompressionCodec) []byte {
	t.Helper()
	recs := make([]Record, count)
	for i := range recs {
		recs[i] = recordAt(first + int64(i))
	}
	b := recordbatch.Encode(p, recs)
	if c == recordbatch.CodecNone {
		return b
	}
	comp, err := kgo.DefaultCompressor(kc)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := comp.Compress(new(bytes.Buffer), b[recordbatch.HeaderSize:])
	b = append(b[:recordbatch.HeaderSize:recordbatch.HeaderSize], out...)
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))                   // batchLength
	binary.BigEndian.PutUint16(b[21:], uint16(c))                          // attributes
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], castagnoli)) // crc
	if _, err := recordbatch.Validate(b, 9); err != nil {
		t.Fatalf("test batch does not validate: %v", err)
	}
	return b
}

func wrap(t testing.TB, kb []byte) Batch {
	t.Helper()
	b, err := WrapKafka(kb)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// storedKafka returns the Kafka bytes of every version 3 frame of the log's
// segments, by base offset.
func storedKafka(t testing.TB, dir string) map[int64][]byte {
	t.Helper()
	out := map[int64][]byte{}
	segs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, s := range segs {
		data, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		for _, fp := range framePositions(t, s) {
			n := int64(binary.BigEndian.Uint32(data[fp.pos+8:])) + 12
			if kb, ok := Batch(data[fp.pos+frameHeaderSize : fp.pos+n]).Kafka(); ok {
				out[fp.base] = kb
			}
		}
	}
	return out
}

// TestKafkaBatchesStoredVerbatim: for every codec, a log of Kafka batches
// mixed with version 1 and 2 batches reads back every record, stores each
// Kafka batch as sent but for its base offset and leader epoch, reports its
// producer, and keeps all of it across a reopen that rebuilds the indexes
// and across a snapshot.
func TestKafkaBatchesStoredVerbatim(t *testing.T) {
	for _, codec := range kafkaCodecs {
		t.Run(codec.name, func(t *testing.T) {
			dir := t.TempDir()
			l := openLog(t, dir, smallConfig)
			sent := map[int64][]byte{}
			var raft uint64
			for l.EndOffset() < 300 {
				raft++
				end, count := l.EndOffset(), batchCount(raft)
				var b Batch
				switch raft % 3 {
				case 0:
					recs := make([]Record, count)
					for j := range recs {
						recs[j] = recordAt(end + int64(j))
					}
					b = encodeV1Batch(recs)
				case 1:
					b = batchAt(end, count)
				default:
					p := recordbatch.Producer{ID: 7, Epoch: 2, BaseSequence: int32(end)}
					kb := kafkaBytesAt(t, end, count, p, codec.id, codec.kgo)
					sent[end] = kb
					b = wrap(t, kb)
					b.SetLeaderEpoch(int32(raft))
				}
				if _, err := l.Append(raft, b); err != nil {
					t.Fatalf("append %d: %v", raft, err)
				}
			}
			end := l.EndOffset()
			checkRecords(t, readAll(t, l), 0, end)
			check := func(l *Log) {
				t.Helper()
				stored := storedKafka(t, l.dir)
				if len(stored) != len(sent) {
					t.Fatalf("%d Kafka batches stored, %d sent", len(stored), len(sent))
				}
				for base, kb := range sent {
					got := stored[base]
					if recordbatch.BaseOffset(got) != base || recordbatch.PartitionLeaderEpoch(got) < 1 {
						t.Fatalf("batch at %d stored with base offset %d, leader epoch %d", base, recordbatch.BaseOffset(got), recordbatch.PartitionLeaderEpoch(got))
					}
					if !bytes.Equal(got[16:], kb[16:]) || !bytes.Equal(got[8:12], kb[8:12]) {
						t.Fatalf("batch at %d not stored as sent", base)
					}
				}
				var kafkaMetas int
				for _, m := range scanAll(t, l, 0) {
					if _, ok := sent[m.BaseOffset]; ok {
						kafkaMetas++
						if m.Producer != (ProducerInfo{ID: 7, Epoch: 2, BaseSequence: int32(m.BaseOffset)}) ||
							m.MaxTimestamp != recordAt(m.LastOffset()).Timestamp {
							t.Fatalf("Kafka batch scanned as %+v", m)
						}
					}
				}
				if kafkaMetas != len(sent) {
					t.Fatalf("scan saw %d Kafka batches of %d", kafkaMetas, len(sent))
				}
				for o := int64(0); o < end; o += 23 {
					if got, ts, ok := l.OffsetForTimestamp(recordAt(o).Timestamp); !ok || got != o || ts != recordAt(o).Timestamp {
						t.Fatalf("OffsetForTimestamp(%d) = %d, %d, %v", recordAt(o).Timestamp, got, ts, ok)
					}
				}
			}
			check(l)
			// Recovery of mixed versions: indexes lost, the segments scanned.
			l.Close()
			idx, _ := filepath.Glob(filepath.Join(dir, "*index"))
			for _, p := range idx {
				os.Remove(p)
			}
			l = openLog(t, dir, smallConfig)
			if l.EndOffset() != end || l.LastRaftIndex() != raft {
				t.Fatalf("reopened: end %d raft %d, want %d %d", l.EndOffset(), l.LastRaftIndex(), end, raft)
			}
			checkRecords(t, readAll(t, l), 0, end)
			check(l)

			dst := restoredCopy(t, l)
			checkRecords(t, readAll(t, dst), 0, end)
			check(dst)
		})
	}
}

// TestKafkaBatchDamageRefused: every single-byte change of a stored Kafka
// batch is caught by Validate (the two CRCs cover every byte), Append
// refuses it, and Records never decodes damage into other records.
func TestKafkaBatchDamageRefused(t *testing.T) {
	for _, codec := range kafkaCodecs {
		good := wrap(t, kafkaBytesAt(t, 10, 3, recordbatch.NoProducer, codec.id, codec.kgo))
		if err := good.Validate(); err != nil {
			t.Fatalf("%s: %v", codec.name, err)
		}
		for i := range good {
			b := Batch(bytes.Clone(good))
			b[i] ^= 0x10
			if err := b.Validate(); !errors.Is(err, ErrCorruptBatch) {
				t.Fatalf("%s: byte %d flipped: Validate = %v", codec.name, i, err)
			}
		}
	}
	good := wrap(t, kafkaBytesAt(t, 10, 3, recordbatch.NoProducer, recordbatch.CodecNone, kgo.NoCompression()))
	l := openLog(t, t.TempDir(), smallConfig)
	bad := Batch(bytes.Clone(good))
	bad[len(bad)-2] ^= 1
	if _, err := l.Append(1, bad); !errors.Is(err, ErrCorruptBatch) {
		t.Fatalf("Append of a damaged Kafka batch: %v", err)
	}
	if l.EndOffset() != 0 {
		t.Fatalf("end %d after a refused append", l.EndOffset())
	}
	// A header that lies about the length or holds another magic is not
	// wrapped.
	kb := kafkaBytesAt(t, 10, 3, recordbatch.NoProducer, recordbatch.CodecNone, kgo.NoCompression())
	if _, err := WrapKafka(kb[:len(kb)-1]); !errors.Is(err, ErrCorruptBatch) {
		t.Fatalf("WrapKafka of a cut batch: %v", err)
	}
	// Records of a batch whose records are damaged (CRCs redone) fail.
	b := Batch(bytes.Clone(good))
	kbs, _ := b.Kafka()
	kbs[recordbatch.HeaderSize] = 0x7f // first record's length
	binary.BigEndian.PutUint32(kbs[17:], crc32.Checksum(kbs[21:], castagnoli))
	if _, err := b.Records(0); !errors.Is(err, ErrCorruptBatch) {
		t.Fatalf("Records of damaged records: %v", err)
	}
	if _, ok := batchAt(0, 2).Kafka(); ok {
		t.Fatal("a version 2 batch reports Kafka bytes")
	}
}

// TestTornKafkaTailCut: a crash inside the last frame (a compressed Kafka
// batch after version 1 and 2 ones) cuts the log before it on Open.
func TestTornKafkaTailCut(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Config{})
	if _, err := l.Append(1, encodeV1Batch([]Record{recordAt(0), recordAt(1)})); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(2, batchAt(2, 3)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(3, wrap(t, kafkaBytesAt(t, 5, 4, recordbatch.NoProducer, recordbatch.CodecSnappy, kgo.SnappyCompression()))); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(4, wrap(t, kafkaBytesAt(t, 9, 4, recordbatch.NoProducer, recordbatch.CodecZstd, kgo.ZstdCompression()))); err != nil {
		t.Fatal(err)
	}
	checkRecords(t, readAll(t, l), 0, 13)
	l.Close()
	seg := filepath.Join(dir, segmentFile(0))
	fi, err := os.Stat(seg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(seg, fi.Size()-5); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, Config{})
	if l.EndOffset() != 9 || l.LastRaftIndex() != 3 {
		t.Fatalf("after a torn tail: end %d, raft %d; want 9, 3", l.EndOffset(), l.LastRaftIndex())
	}
	checkRecords(t, readAll(t, l), 0, 9)
}

// TestLogAppendTimeKafkaBatch: every record of a LogAppendTime batch reads
// the batch's maxTimestamp, as Kafka's readers give it.
func TestLogAppendTimeKafkaBatch(t *testing.T) {
	kb := kafkaBytesAt(t, 0, 3, recordbatch.NoProducer, recordbatch.CodecNone, kgo.NoCompression())
	binary.BigEndian.PutUint16(kb[21:], 0x08)
	binary.BigEndian.PutUint64(kb[35:], 5_000_000)
	binary.BigEndian.PutUint32(kb[17:], crc32.Checksum(kb[21:], castagnoli))
	l := openLog(t, t.TempDir(), Config{})
	if _, err := l.Append(1, wrap(t, kb)); err != nil {
		t.Fatal(err)
	}
	recs, err := l.Read(0, 1<<20, 3)
	if err != nil || len(recs) != 3 {
		t.Fatalf("read: %d records, %v", len(recs), err)
	}
	for _, r := range recs {
		if r.Timestamp != 5_000_000 {
			t.Fatalf("record %d: timestamp %d, want the batch's append time", r.Offset, r.Timestamp)
		}
	}
	if got := l.Segments()[0].MaxTimestamp; got != 5_000_000 {
		t.Fatalf("segment max timestamp %d", got)
	}
}
