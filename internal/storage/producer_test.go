package storage

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
)

// goldenRecords are the records of the golden batches below.
var goldenRecords = []Record{
	{Timestamp: 1_700_000_000_000, Key: []byte("k"), Value: []byte("v1"), Headers: []Header{{Key: "event_id", Value: []byte("e1")}}},
	{Timestamp: 1_699_999_999_990, Key: nil, Value: []byte{}},
}

// goldenV1 is EncodeBatch(goldenRecords) as the code wrote it before batches
// carried producer fields (format version 1): bytes that logs on disk, Raft
// logs and snapshot streams of that time hold.
const goldenV1 = "ba769260" + "01" + "00000002" + "0000018bcfe56800" + "0000018bcfe56800" +
	"280000026b04763102106576656e745f69640465310a0213010000"

// goldenV2 is EncodeProducerBatch(goldenProducer, goldenRecords) in format
// version 2. It pins the format: changing it breaks every log on disk.
const goldenV2 = "2759116d" + "02" + "00000002" + "0000018bcfe56800" + "0000018bcfe56800" +
	"0000000000001092" + "00000007" + "00000064" + "acd7a353" +
	"280000026b04763102106576656e745f69640465310a0213010000"

var goldenProducer = ProducerInfo{ID: 4242, Epoch: 7, BaseSequence: 100}

func mustHex(t testing.TB, s string) Batch {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// encodeV1Batch encodes records in format version 1, the format before
// producer fields: a version 2 batch without its 20 bytes of producer fields
// and header CRC, version byte 1, CRC recomputed. TestGoldenBatches checks
// that it gives the bytes the old code wrote.
func encodeV1Batch(records []Record) Batch {
	v2 := EncodeBatch(records)
	b := append(Batch(nil), v2[:batchHeaderSizeV1]...)
	b[batchVersionAt] = batchVersionV1
	b = append(b, v2[batchHeaderSize:]...)
	binary.BigEndian.PutUint32(b[batchCRCAt:], crc32.Checksum(b[batchVersionAt:], castagnoli))
	return b
}

func checkGoldenRecords(t *testing.T, b Batch) {
	t.Helper()
	if err := b.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	recs, err := b.Records(10)
	if err != nil {
		t.Fatal(err)
	}
	for i := range goldenRecords {
		want := goldenRecords[i]
		want.Offset = 10 + int64(i)
		if !reflect.DeepEqual(recs[i], want) {
			t.Fatalf("record %d: got %+v, want %+v", i, recs[i], want)
		}
	}
	if b.Count() != 2 || b.FirstTimestamp() != 1_700_000_000_000 || b.MaxTimestamp() != 1_700_000_000_000 {
		t.Fatalf("header: %d %d %d", b.Count(), b.FirstTimestamp(), b.MaxTimestamp())
	}
}

func TestGoldenBatches(t *testing.T) {
	v1, v2 := mustHex(t, goldenV1), mustHex(t, goldenV2)

	// Old bytes decode with the new code, and report no producer.
	checkGoldenRecords(t, v1)
	if p := v1.Producer(); p != NoProducer {
		t.Fatalf("version 1 Producer() = %+v", p)
	}
	if got := encodeV1Batch(goldenRecords); !bytes.Equal(got, v1) {
		t.Fatalf("encodeV1Batch = %x, the old code wrote %x", got, v1)
	}

	// The new format, as the comment at the top of batch.go describes it.
	got := EncodeProducerBatch(goldenProducer, goldenRecords)
	if !bytes.Equal(got, v2) {
		t.Fatalf("EncodeProducerBatch = %x, want %x", got, v2)
	}
	checkGoldenRecords(t, v2)
	if p := v2.Producer(); p != goldenProducer {
		t.Fatalf("Producer() = %+v", p)
	}
	be := binary.BigEndian
	switch {
	case v2[4] != 2:
		t.Fatalf("version %d", v2[4])
	case !bytes.Equal(v2[5:25], v1[5:25]):
		t.Fatal("count and timestamps differ from version 1")
	case int64(be.Uint64(v2[25:])) != 4242 || int32(be.Uint32(v2[33:])) != 7 || int32(be.Uint32(v2[37:])) != 100:
		t.Fatalf("producer fields %x", v2[25:41])
	case be.Uint32(v2[41:]) != crc32.Checksum(v2[4:41], castagnoli):
		t.Fatal("header crc is not the CRC32C of bytes 4..40")
	case be.Uint32(v2[0:]) != crc32.Checksum(v2[4:], castagnoli):
		t.Fatal("crc is not the CRC32C of everything after it")
	case !bytes.Equal(v2[45:], v1[25:]):
		t.Fatal("records are encoded differently from version 1")
	}
	// EncodeBatch is the version 2 format with NoProducer.
	nb := EncodeBatch(goldenRecords)
	if nb[batchVersionAt] != batchVersion || nb.Producer() != NoProducer ||
		int64(be.Uint64(nb[25:])) != -1 || int32(be.Uint32(nb[33:])) != -1 || int32(be.Uint32(nb[37:])) != -1 {
		t.Fatalf("EncodeBatch header %x", nb[:batchHeaderSize])
	}
}

func TestProducerRoundTrip(t *testing.T) {
	recs := []Record{{Timestamp: 3, Value: []byte("a")}, {Timestamp: 1, Key: []byte("k")}, {Timestamp: 2, Headers: []Header{{Key: "h"}}}}
	for _, p := range []ProducerInfo{
		NoProducer,
		{ID: 0, Epoch: 0, BaseSequence: 0},
		{ID: 1, Epoch: 1, BaseSequence: math.MaxInt32 - 1}, // the sequence wraps inside the batch
		{ID: math.MaxInt64, Epoch: math.MaxInt16, BaseSequence: math.MaxInt32},
		{ID: math.MaxInt64, Epoch: math.MaxInt32, BaseSequence: 12345},
		{ID: -1, Epoch: -1, BaseSequence: 7}, // stored as given: meaning is the FSM's business
	} {
		b := EncodeProducerBatch(p, recs)
		if err := b.Validate(); err != nil {
			t.Fatalf("%+v: Validate: %v", p, err)
		}
		if got := b.Producer(); got != p {
			t.Fatalf("Producer() = %+v, want %+v", got, p)
		}
		out, err := b.Records(50)
		if err != nil {
			t.Fatal(err)
		}
		again, err := EncodeBatch(out).Records(50)
		if err != nil || !reflect.DeepEqual(again, out) {
			t.Fatalf("%+v: records changed: %v", p, err)
		}
		if b.Count() != 3 || b.FirstTimestamp() != 3 || b.MaxTimestamp() != 3 {
			t.Fatalf("%+v: header %d %d %d", p, b.Count(), b.FirstTimestamp(), b.MaxTimestamp())
		}
		// The same records in version 1: same records, no producer.
		v1 := encodeV1Batch(recs)
		if err := v1.Validate(); err != nil {
			t.Fatal(err)
		}
		if v1out, err := v1.Records(50); err != nil || !reflect.DeepEqual(v1out, out) {
			t.Fatalf("version 1 records differ: %v", err)
		}
		if v1.Producer() != NoProducer {
			t.Fatalf("version 1 Producer() = %+v", v1.Producer())
		}
	}
}

func TestProducerOfDamagedOrShortBatches(t *testing.T) {
	good := EncodeProducerBatch(goldenProducer, goldenRecords)
	for name, b := range map[string]Batch{
		"empty":                 nil,
		"version byte only":     good[:5],
		"version 1 header only": good[:batchHeaderSizeV1],
		"cut in producer":       good[:batchHeaderSize-1],
		"unknown version":       func() Batch { b := bytes.Clone(good); b[batchVersionAt] = 4; return b }(),
		"version 1":             mustHex(t, goldenV1),
	} {
		if p := b.Producer(); p != NoProducer {
			t.Errorf("%s: Producer() = %+v, want NoProducer", name, p)
		}
	}
	if p := good[:batchHeaderSize].Producer(); p != goldenProducer {
		t.Errorf("header only: Producer() = %+v", p)
	}
}

func TestValidateVersions(t *testing.T) {
	v2 := EncodeProducerBatch(goldenProducer, goldenRecords)
	cp := func() Batch { return bytes.Clone(v2) }
	// Producer fields changed with only the batch CRC redone: the header
	// CRC catches it (as a reader of headers alone would).
	for _, at := range []int{batchProducerAt + 7, batchEpochAt, batchBaseSeqAt + 3, batchHeaderCRCAt} {
		b := cp()
		b[at] ^= 1
		binary.BigEndian.PutUint32(b[batchCRCAt:], crc32.Checksum(b[batchVersionAt:], castagnoli))
		if err := b.Validate(); !errors.Is(err, ErrCorruptBatch) {
			t.Errorf("byte %d changed, crc redone: Validate = %v", at, err)
		}
		if err := reseal(b).Validate(); err != nil {
			t.Errorf("byte %d changed, both CRCs redone: %v", at, err)
		}
	}
	for name, b := range map[string]Batch{
		// A version 2 batch relabelled version 1 reads its producer
		// fields as records.
		"version 2 as 1": reseal(func() Batch { b := cp(); b[batchVersionAt] = 1; return b }()),
		// A version 1 batch relabelled version 2 lacks 20 header bytes.
		"version 1 as 2": reseal(func() Batch { b := encodeV1Batch(goldenRecords); b[batchVersionAt] = 2; return b }()),
		"version 0":      reseal(func() Batch { b := cp(); b[batchVersionAt] = 0; return b }()),
		"version 4":      reseal(func() Batch { b := cp(); b[batchVersionAt] = 4; return b }()),
		// A version 2 batch relabelled Kafka's (version 3) is no Kafka batch.
		"version 2 as 3": reseal(func() Batch { b := cp(); b[batchVersionAt] = 3; return b }()),
		"v1 count high": reseal(func() Batch {
			b := encodeV1Batch(goldenRecords)
			b[batchCountAt+3] = 3
			return b
		}()),
	} {
		if err := b.Validate(); !errors.Is(err, ErrCorruptBatch) {
			t.Errorf("%s: Validate = %v", name, err)
		}
		if _, err := b.Records(0); !errors.Is(err, ErrCorruptBatch) {
			t.Errorf("%s: Records = %v", name, err)
		}
	}
	// Every single-byte change of a version 1 batch is caught too.
	v1 := encodeV1Batch([]Record{recordAt(1), recordAt(2), recordAt(3)})
	for i := range v1 {
		b := Batch(bytes.Clone(v1))
		b[i] ^= 0x10
		if err := b.Validate(); !errors.Is(err, ErrCorruptBatch) {
			t.Fatalf("version 1, byte %d flipped: Validate = %v", i, err)
		}
	}
}

func TestLastSequence(t *testing.T) {
	for _, tc := range []struct {
		base  int32
		count int
		want  int32
	}{
		{0, 1, 0},
		{0, 5, 4},
		{100, 10, 109},
		{math.MaxInt32, 1, math.MaxInt32},
		{math.MaxInt32, 2, 0},
		{math.MaxInt32 - 2, 5, 1},
		{-1, 5, -1},
	} {
		p := ProducerInfo{ID: 1, BaseSequence: tc.base}
		if got := p.LastSequence(tc.count); got != tc.want {
			t.Errorf("LastSequence(base %d, count %d) = %d, want %d", tc.base, tc.count, got, tc.want)
		}
	}
}

// Scan tests. The batch at Raft index r has batchCount(r) records and
// producer producerOf(r); it is written in format version 1 when isV1(r).

func batchCount(r uint64) int { return 1 + int(r%7) }
func isV1(r uint64) bool      { return r%11 == 5 }

func producerOf(r uint64) ProducerInfo {
	if r%3 == 0 || isV1(r) {
		return NoProducer
	}
	return ProducerInfo{ID: 1000 + int64(r%4), Epoch: int32(r % 2), BaseSequence: int32(r * 3)}
}

// metaOf is what ScanBatches must report for the batch at Raft index r
// stored at base.
func metaOf(r uint64, base int64) BatchMeta {
	n := batchCount(r)
	return BatchMeta{BaseOffset: base, Count: n, RaftIndex: r, MaxTimestamp: recordAt(base + int64(n) - 1).Timestamp, Producer: producerOf(r)}
}

// pfiller appends the batches described above and remembers their metas.
type pfiller struct {
	t     testing.TB
	l     *Log
	raft  uint64
	metas []BatchMeta
}

func (f *pfiller) batches(n int) {
	f.t.Helper()
	for i := 0; i < n; i++ {
		f.raft++
		r := f.raft
		end := f.l.EndOffset()
		recs := make([]Record, batchCount(r))
		for j := range recs {
			recs[j] = recordAt(end + int64(j))
		}
		b := EncodeProducerBatch(producerOf(r), recs)
		if isV1(r) {
			b = encodeV1Batch(recs)
		}
		base, err := f.l.Append(r, b)
		if err != nil || base != end {
			f.t.Fatalf("append at Raft index %d = %d, %v; want %d", r, base, err, end)
		}
		f.metas = append(f.metas, metaOf(r, base))
	}
}

func scanAll(t testing.TB, l *Log, from int64) []BatchMeta {
	t.Helper()
	var out []BatchMeta
	if err := l.ScanBatches(from, func(m BatchMeta) bool { out = append(out, m); return true }); err != nil {
		t.Fatalf("ScanBatches(%d): %v", from, err)
	}
	return out
}

// decodeAll reads every frame of every segment and decodes its batch
// completely (both CRCs, every record): the metas a scan must agree with.
func decodeAll(t testing.TB, l *Log) []BatchMeta {
	t.Helper()
	l.mu.RLock()
	segs, start := l.segs, l.logStart
	l.mu.RUnlock()
	var out []BatchMeta
	for _, s := range segs {
		sc := newFrameScanner(s.f, 0, s.size)
		for {
			h, b, err := sc.next()
			if err != nil {
				break
			}
			if err := b.Validate(); err != nil {
				t.Fatalf("%s: %v", s.logPath, err)
			}
			recs, err := b.Records(h.baseOffset)
			if err != nil {
				t.Fatal(err)
			}
			m := BatchMeta{BaseOffset: recs[0].Offset, Count: len(recs), RaftIndex: h.raftIndex, MaxTimestamp: math.MinInt64, Producer: b.Producer()}
			for _, r := range recs {
				m.MaxTimestamp = max(m.MaxTimestamp, r.Timestamp)
			}
			if m.LastOffset() >= start {
				out = append(out, m)
			}
		}
	}
	return out
}

// wantFrom is the part of metas a scan from from must report.
func wantFrom(metas []BatchMeta, from, start, end int64) []BatchMeta {
	var out []BatchMeta
	for _, m := range metas {
		if m.LastOffset() >= max(from, start) && m.BaseOffset < end {
			out = append(out, m)
		}
	}
	return out
}

// checkScans compares scans from many offsets with metas (what was
// written) and with decoding every batch.
func checkScans(t *testing.T, l *Log, metas []BatchMeta) {
	t.Helper()
	start, end := l.StartOffset(), l.EndOffset()
	all := wantFrom(metas, start, start, end)
	if dec := decodeAll(t, l); !reflect.DeepEqual(dec, all) {
		t.Fatalf("decoding every batch gives %d batches, written %d:\n%+v\n%+v", len(dec), len(all), dec, all)
	}
	froms := []int64{math.MinInt64, -1, 0, start - 1, start, start + 1, end - 1, end, end + 1, math.MaxInt64}
	for i, m := range all {
		if i%3 == 0 {
			froms = append(froms, m.BaseOffset, m.LastOffset(), m.BaseOffset+int64(m.Count)/2)
		}
	}
	for _, from := range froms {
		got, want := scanAll(t, l, from), wantFrom(metas, from, start, end)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("ScanBatches(%d) of [%d, %d):\n got %+v\nwant %+v", from, start, end, got, want)
		}
	}
	// Stopping early: fn sees exactly the batches until it says stop.
	for _, n := range []int{1, 2, len(all) / 2} {
		if n < 1 || n > len(all) {
			continue
		}
		var got []BatchMeta
		err := l.ScanBatches(start, func(m BatchMeta) bool { got = append(got, m); return len(got) < n })
		if err != nil || !reflect.DeepEqual(got, all[:n]) {
			t.Fatalf("stop after %d: %d batches, %v", n, len(got), err)
		}
	}
}

func TestScanBatchesAgreesWithDecoding(t *testing.T) {
	l := openLog(t, t.TempDir(), smallConfig)
	f := &pfiller{t: t, l: l}
	if got := scanAll(t, l, 0); len(got) != 0 {
		t.Fatalf("scan of an empty log: %+v", got)
	}
	f.batches(300)
	segs := l.Segments()
	if len(segs) < 20 {
		t.Fatalf("only %d segments: the test needs many", len(segs))
	}
	var v1, prod int
	for _, m := range f.metas {
		switch {
		case isV1(m.RaftIndex):
			v1++
		case m.Producer != NoProducer:
			prod++
		}
	}
	if v1 < 20 || prod < 100 {
		t.Fatalf("%d version 1 batches, %d with a producer: the test needs both", v1, prod)
	}
	checkScans(t, l, f.metas)

	// Reopened: sealed segments come from their index files.
	l = reopen(t, l)
	f.l = l
	checkScans(t, l, f.metas)

	// Retention: the log start inside a multi-record batch in the middle of
	// a segment, so the first batch scanned begins below the start.
	var cut BatchMeta
	for _, m := range f.metas {
		if m.BaseOffset > segs[5].BaseOffset && m.Count >= 3 {
			cut = m
			break
		}
	}
	f.raft++
	if _, err := l.DeleteBefore(cut.BaseOffset+1, f.raft); err != nil {
		t.Fatal(err)
	}
	if got := scanAll(t, l, 0); len(got) == 0 || got[0] != cut {
		t.Fatalf("after retention to %d, the scan begins with %+v, want %+v", cut.BaseOffset+1, got[0], cut)
	}
	checkScans(t, l, f.metas)
	l = reopen(t, l)
	f.l = l
	checkScans(t, l, f.metas)
	f.batches(40)
	checkScans(t, l, f.metas)

	// Everything deleted: nothing to scan, from anywhere.
	f.raft++
	if _, err := l.DeleteBefore(l.EndOffset(), f.raft); err != nil {
		t.Fatal(err)
	}
	for _, from := range []int64{0, l.EndOffset() - 1, l.EndOffset()} {
		if got := scanAll(t, l, from); len(got) != 0 {
			t.Fatalf("scan of an emptied log from %d: %+v", from, got)
		}
	}
	f.batches(3)
	checkScans(t, l, f.metas)

	l.Close()
	if err := l.ScanBatches(0, func(BatchMeta) bool { return true }); !errors.Is(err, ErrClosed) {
		t.Fatalf("ScanBatches after Close = %v", err)
	}
}

func TestScanBatchesAfterRestore(t *testing.T) {
	src := openLog(t, t.TempDir(), smallConfig)
	f := &pfiller{t: t, l: src}
	f.batches(150)
	f.raft++
	if _, err := src.DeleteBefore(src.Segments()[3].BaseOffset+2, f.raft); err != nil {
		t.Fatal(err)
	}
	f.batches(10)
	want := scanAll(t, src, 0)
	snap, err := src.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var stream bytes.Buffer
	if _, err := snap.WriteTo(&stream); err != nil {
		t.Fatal(err)
	}
	snap.Release()

	// Into a log that holds something else.
	dst := openLog(t, filepath.Join(t.TempDir(), "dst"), smallConfig)
	(&pfiller{t: t, l: dst, raft: 5}).batches(90)
	if err := dst.Restore(&stream); err != nil {
		t.Fatal(err)
	}
	if got := scanAll(t, dst, 0); !reflect.DeepEqual(got, want) {
		t.Fatalf("after Restore the scan differs: %d batches, want %d", len(got), len(want))
	}
	checkScans(t, dst, f.metas)
	dst = reopen(t, dst)
	checkScans(t, dst, f.metas)
	g := &pfiller{t: t, l: dst, raft: f.raft, metas: f.metas}
	g.batches(30)
	checkScans(t, dst, g.metas)
}

// A log written in format version 1 (as the code before producer fields
// wrote it), read back with the current code, then carried on in version 2.
func TestOldFormatLogReadBack(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, smallConfig)
	var raft uint64
	for l.EndOffset() < 400 {
		raft++
		end := l.EndOffset()
		recs := make([]Record, batchCount(raft))
		for j := range recs {
			recs[j] = recordAt(end + int64(j))
		}
		if _, err := l.Append(raft, encodeV1Batch(recs)); err != nil {
			t.Fatal(err)
		}
	}
	end := l.EndOffset()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// The files hold version 1 batches: the frames are unchanged, so they
	// are what the old code wrote.
	segs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	if len(segs) < 5 {
		t.Fatalf("%d segments", len(segs))
	}
	for _, s := range segs {
		data, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		for _, fp := range framePositions(t, s) {
			if v := data[fp.pos+frameHeaderSize+batchVersionAt]; v != batchVersionV1 {
				t.Fatalf("%s: frame at %d has version %d", s, fp.pos, v)
			}
		}
	}
	// Index files lost too: Open rebuilds them by scanning version 1 frames.
	idx, _ := filepath.Glob(filepath.Join(dir, "*index"))
	for _, p := range idx[:4] {
		os.Remove(p)
	}

	l = openLog(t, dir, smallConfig)
	if l.EndOffset() != end || l.LastRaftIndex() != raft {
		t.Fatalf("reopened: end %d raft %d, want %d %d", l.EndOffset(), l.LastRaftIndex(), end, raft)
	}
	checkRecords(t, readAll(t, l), 0, end)
	metas := scanAll(t, l, 0)
	next := int64(0)
	for _, m := range metas {
		if m != (BatchMeta{BaseOffset: next, Count: batchCount(m.RaftIndex), RaftIndex: m.RaftIndex, MaxTimestamp: recordAt(next + int64(m.Count) - 1).Timestamp, Producer: NoProducer}) {
			t.Fatalf("version 1 batch scanned as %+v", m)
		}
		next += int64(m.Count)
	}
	if next != end {
		t.Fatalf("scan ends at %d, log at %d", next, end)
	}
	for o := int64(0); o < end; o += 37 {
		if got, ts, ok := l.OffsetForTimestamp(recordAt(o).Timestamp); !ok || got != o || ts != recordAt(o).Timestamp {
			t.Fatalf("OffsetForTimestamp(%d) = %d, %d, %v", recordAt(o).Timestamp, got, ts, ok)
		}
	}

	// Version 2 batches follow in the same log; both survive a snapshot.
	f := &pfiller{t: t, l: l, raft: raft, metas: metas}
	f.batches(100)
	checkRecords(t, readAll(t, l), 0, l.EndOffset())
	checkScans(t, l, f.metas)
	dst := restoredCopy(t, l)
	checkRecords(t, readAll(t, dst), 0, dst.EndOffset())
	checkScans(t, dst, f.metas)
}

// Open checks sealed segments only where their indexes end: damage to a
// batch header earlier in one is caught by ScanBatches through the header
// CRC, although the scan does not read the batch.
func TestScanBatchesDetectsDamagedHeader(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, smallConfig)
	f := &pfiller{t: t, l: l}
	f.batches(120)
	end := l.EndOffset()
	segs := l.Segments()
	l.Close()

	victim := filepath.Join(dir, segs[2].File)
	frames := framePositions(t, victim)
	var bad framePos
	for _, fp := range frames[:len(frames)/2] {
		if !isV1(fp.raft) {
			bad = fp
			break
		}
	}
	data, err := os.ReadFile(victim)
	if err != nil {
		t.Fatal(err)
	}
	data[bad.pos+frameHeaderSize+batchBaseSeqAt+3] ^= 1
	if err := os.WriteFile(victim, data, 0o644); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, smallConfig)
	if l.EndOffset() != end {
		t.Fatalf("Open cut the log at %d: the test needs the damage unnoticed", l.EndOffset())
	}
	var seen []BatchMeta
	err = l.ScanBatches(0, func(m BatchMeta) bool { seen = append(seen, m); return true })
	if !errors.Is(err, ErrCorruptBatch) {
		t.Fatalf("ScanBatches over a damaged header = %v", err)
	}
	if len(seen) == 0 || seen[len(seen)-1].LastOffset()+1 != bad.base {
		t.Fatalf("the scan stopped after offset %d, want just before %d", seen[len(seen)-1].LastOffset(), bad.base)
	}
	if got := scanAll(t, l, segs[3].BaseOffset); !reflect.DeepEqual(got, wantFrom(f.metas, segs[3].BaseOffset, 0, end)) {
		t.Fatalf("a scan of the segments after the damage: %d batches", len(got))
	}
}

// TestScanBatchesWhileWriting runs scans against a log that is being appended
// to, rolled, trimmed, snapshotted and restored. With -race it checks the
// locking; every scan must report batches that follow each other, each as it
// was written, from its from up to at least the end when it began.
func TestScanBatchesWhileWriting(t *testing.T) {
	l := openLog(t, t.TempDir(), Config{SegmentBytes: 2048, IndexIntervalBytes: 256})
	f := &pfiller{t: t, l: l}
	f.batches(20)

	var (
		stop     atomic.Bool
		restores atomic.Int64 // odd while a Restore (which may lower the end) runs
		wg       sync.WaitGroup
		scans    atomic.Int64
		batches  atomic.Int64
		gaps     atomic.Int64 // batches skipped because retention deleted them
	)
	errs := make(chan error, 4)
	fail := func(format string, args ...any) { errs <- fmt.Errorf(format, args...) }
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 2))
			for !stop.Load() {
				gen := restores.Load()
				// Two reads: a restore or a retention delete between them can
				// put start past end.
				start, end := l.StartOffset(), l.EndOffset()
				if end-start+10 <= 0 {
					continue
				}
				from := start - 5 + rng.Int64N(end-start+10)
				limit := 1 + rng.IntN(200)
				var (
					n    int
					next int64 = -1
					raft uint64
					bad  error
				)
				err := l.ScanBatches(from, func(m BatchMeta) bool {
					switch {
					case m != metaOf(m.RaftIndex, m.BaseOffset):
						bad = fmt.Errorf("scanned %+v, written %+v", m, metaOf(m.RaftIndex, m.BaseOffset))
					case next < 0 && m.LastOffset() < from:
						bad = fmt.Errorf("scan from %d begins with %+v", from, m)
					case next >= 0 && m.RaftIndex <= raft:
						bad = fmt.Errorf("after Raft index %d, scanned %+v", raft, m)
					case next >= 0 && m.BaseOffset != next && (m.BaseOffset < next || m.BaseOffset > l.StartOffset()):
						// Only retention during the scan may skip batches:
						// those it deleted.
						bad = fmt.Errorf("after offset %d, scanned %+v; log start %d", next, m, l.StartOffset())
					}
					if next >= 0 && m.BaseOffset != next {
						gaps.Add(1)
					}
					next, raft = m.BaseOffset+int64(m.Count), m.RaftIndex
					n++
					return bad == nil && n < limit
				})
				switch {
				case err != nil:
					fail("ScanBatches(%d): %v", from, err)
				case bad != nil:
					fail("ScanBatches(%d): %v", from, bad)
				case n < limit && from < end && next < end && l.StartOffset() < end && gen%2 == 0 && restores.Load() == gen:
					// (Retention may have deleted the rest, and a Restore
					// may have lowered the end.)
					fail("ScanBatches(%d) stopped at %d, before the end %d when it began", from, next, end)
				default:
					scans.Add(1)
					batches.Add(int64(n))
					continue
				}
				return
			}
		}(uint64(r))
	}
	var snap *Snapshot
	for i := 0; i < 400 && len(errs) == 0; i++ {
		f.batches(1)
		if i%40 == 39 {
			f.raft++
			if _, err := l.DeleteBefore(l.EndOffset()-30, f.raft); err != nil {
				t.Fatal(err)
			}
		}
		var err error
		switch i {
		case 150:
			snap, err = l.Snapshot()
		case 250:
			// Back to the state at i == 150: the same batches up to its end.
			var stream bytes.Buffer
			if _, err = snap.WriteTo(&stream); err == nil {
				restores.Add(1)
				err = l.Restore(&stream)
				restores.Add(1)
			}
			snap.Release()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if scans.Load() < 10 {
		t.Fatalf("only %d scans completed", scans.Load())
	}
	t.Logf("%d scans, %d batches, %d gaps left by retention", scans.Load(), batches.Load(), gaps.Load())
}
