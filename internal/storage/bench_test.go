package storage

import (
	"bytes"
	"testing"
)

// benchBatch is 100 records with 100-byte values, as a producer batch.
func benchBatch() Batch {
	recs := make([]Record, 100)
	for i := range recs {
		recs[i] = Record{Timestamp: 1_700_000_000_000 + int64(i), Value: bytes.Repeat([]byte{byte(i)}, 100)}
	}
	return EncodeBatch(recs)
}

// benchBatches is the number of benchBatch batches in benchLog.
const benchBatches = 2000

// benchLog is a log of benchBatches copies of benchBatch (about 20 MB) in
// 4 MB segments; it is closed when b ends.
func benchLog(b *testing.B) (*Log, Batch) {
	l, err := Open(b.TempDir(), Config{SegmentBytes: 4 << 20}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	batch := benchBatch()
	for i := 0; i < benchBatches; i++ {
		if _, err := l.Append(uint64(i+1), batch); err != nil {
			b.Fatal(err)
		}
	}
	return l, batch
}

// BenchmarkAppend measures Append (validation, framing, write, index) of
// 100-record batches; MB/s counts batch bytes.
func BenchmarkAppend(b *testing.B) {
	l, err := Open(b.TempDir(), Config{SegmentBytes: 64 << 20}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	batch := benchBatch()
	b.SetBytes(int64(len(batch)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := l.Append(uint64(i+1), batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)*100/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkRead measures Read of one batch's worth of records (100) at
// offsets spread over a 20 MB log; MB/s counts batch bytes.
func BenchmarkRead(b *testing.B) {
	l, batch := benchLog(b)
	var recordBytes int
	if err := batch.each(0, func(_ Record, n int) { recordBytes += n }); err != nil {
		b.Fatal(err)
	}
	end := l.EndOffset()
	b.SetBytes(int64(len(batch)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		o := int64(i*7919%benchBatches) * 100
		recs, err := l.Read(o, recordBytes, end)
		if err != nil || len(recs) != 100 {
			b.Fatalf("Read(%d) = %d records, %v", o, len(recs), err)
		}
	}
	b.ReportMetric(float64(b.N)*100/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkScanBatches measures ScanBatches over a log of 4000 batches of
// about 10 KB (100 records with 90-byte values, producer fields set), in
// 8 MB segments, from the page cache; batches/s counts batches visited. For
// comparison, "read" reads the same log's records with Read, as rebuilding
// producer state without ScanBatches would.
func BenchmarkScanBatches(b *testing.B) {
	l, err := Open(b.TempDir(), Config{SegmentBytes: 8 << 20}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	recs := make([]Record, 100)
	for i := range recs {
		recs[i] = Record{Timestamp: 1_700_000_000_000 + int64(i), Value: bytes.Repeat([]byte{byte(i)}, 90)}
	}
	const batches = 4000
	var size int
	for i := 0; i < batches; i++ {
		batch := EncodeProducerBatch(ProducerInfo{ID: int64(i % 50), Epoch: 1, BaseSequence: int32(i / 50 * 100)}, recs)
		size = len(batch)
		if _, err := l.Append(uint64(i+1), batch); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("scan", func(b *testing.B) {
		b.SetBytes(int64(size) * batches)
		for i := 0; i < b.N; i++ {
			n := 0
			err := l.ScanBatches(0, func(m BatchMeta) bool {
				n++
				return m.Producer.Epoch == 1
			})
			if err != nil || n != batches {
				b.Fatalf("scanned %d batches, %v", n, err)
			}
		}
		b.ReportMetric(float64(b.N)*batches/b.Elapsed().Seconds(), "batches/s")
		b.ReportMetric(float64(size), "batch-bytes")
	})
	b.Run("read", func(b *testing.B) {
		b.SetBytes(int64(size) * batches)
		end := l.EndOffset()
		for i := 0; i < b.N; i++ {
			for o := int64(0); o < end; {
				got, err := l.Read(o, 1<<20, end)
				if err != nil || len(got) == 0 {
					b.Fatalf("Read(%d) = %d records, %v", o, len(got), err)
				}
				o = got[len(got)-1].Offset + 1
			}
		}
		b.ReportMetric(float64(b.N)*batches/b.Elapsed().Seconds(), "batches/s")
	})
}
