package storage

// A segment file is a sequence of frames, one per appended batch
// (fixed-width integers are big-endian):
//
//	baseOffset  int64   offset of the batch's first record
//	length      int32   bytes after this field: 12 + len(batch)
//	raftIndex   uint64  index of the Raft entry that carried the batch
//	frameCRC    uint32  CRC32C of the 20 bytes before it
//	batch       Batch   (which carries its own CRC32C)
//
// The frame CRC means that a damaged base offset or Raft index is caught as
// surely as a damaged record.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
)

const (
	frameHeaderSize = 24
	// framePreambleSize is a frame header plus its batch's header (of the
	// largest version, a Kafka batch's): enough to learn a frame's offsets,
	// timestamps and producer without reading its records.
	framePreambleSize = frameHeaderSize + batchHeaderSizeKafka
	// minFrameSize is the smallest frame: a version 1 batch of one record.
	minFrameSize = frameHeaderSize + batchHeaderSizeV1 + minRecordSize
	// maxBatchSize is the largest batch a frame's int32 length can describe.
	maxBatchSize = math.MaxInt32 - (frameHeaderSize - 12)
)

// errTorn reports a frame cut short by the end of the file.
var errTorn = errors.New("torn frame")

type frameHeader struct {
	baseOffset int64
	length     int32
	raftIndex  uint64
}

// size is the frame's length in the file, header included.
func (h frameHeader) size() int64 { return 12 + int64(h.length) }

// batchLen is the length of the frame's batch.
func (h frameHeader) batchLen() int { return int(h.length) - (frameHeaderSize - 12) }

func putFrameHeader(dst []byte, h frameHeader) {
	binary.BigEndian.PutUint64(dst[0:], uint64(h.baseOffset))
	binary.BigEndian.PutUint32(dst[8:], uint32(h.length))
	binary.BigEndian.PutUint64(dst[12:], h.raftIndex)
	binary.BigEndian.PutUint32(dst[20:], crc32.Checksum(dst[:20], castagnoli))
}

// parseFrameHeader decodes and checks the first frameHeaderSize bytes of b.
func parseFrameHeader(b []byte) (frameHeader, error) {
	if got, want := crc32.Checksum(b[:20], castagnoli), binary.BigEndian.Uint32(b[20:]); got != want {
		return frameHeader{}, fmt.Errorf("%w: frame header crc %08x, stored %08x", ErrCorruptBatch, got, want)
	}
	h := frameHeader{
		baseOffset: int64(binary.BigEndian.Uint64(b[0:])),
		length:     int32(binary.BigEndian.Uint32(b[8:])),
		raftIndex:  binary.BigEndian.Uint64(b[12:]),
	}
	if h.batchLen() < batchHeaderSizeV1+minRecordSize {
		return frameHeader{}, fmt.Errorf("%w: frame length %d too small", ErrCorruptBatch, h.length)
	}
	return h, nil
}

// frameScanner reads frames one after another from a segment file. It checks
// each frame header but not the batch (callers Validate it).
type frameScanner struct {
	r   *bufio.Reader
	pos int64 // file position of the next frame
	end int64 // file size
	hdr [frameHeaderSize]byte
	buf []byte
}

// newFrameScanner scans the frames of f from pos to end.
func newFrameScanner(f io.ReaderAt, pos, end int64) *frameScanner {
	return newStreamScanner(io.NewSectionReader(f, pos, end-pos), pos, end)
}

// newStreamScanner scans the frames that r yields, which are the bytes of a
// segment from pos to end.
func newStreamScanner(r io.Reader, pos, end int64) *frameScanner {
	return &frameScanner{r: bufio.NewReaderSize(r, 64<<10), pos: pos, end: end}
}

// next returns the next frame and its batch (valid until the following call).
// It returns io.EOF at the end of the file, errTorn (wrapped) for a frame the
// file ends inside, and ErrCorruptBatch (wrapped) for a damaged header.
func (s *frameScanner) next() (frameHeader, Batch, error) {
	if s.pos == s.end {
		return frameHeader{}, nil, io.EOF
	}
	if s.end-s.pos < frameHeaderSize {
		return frameHeader{}, nil, fmt.Errorf("%w: %d bytes left for a %d-byte header", errTorn, s.end-s.pos, frameHeaderSize)
	}
	if _, err := io.ReadFull(s.r, s.hdr[:]); err != nil {
		return frameHeader{}, nil, fmt.Errorf("read frame header at %d: %w", s.pos, err)
	}
	h, err := parseFrameHeader(s.hdr[:])
	if err != nil {
		return frameHeader{}, nil, err
	}
	if s.pos+h.size() > s.end {
		return frameHeader{}, nil, fmt.Errorf("%w: frame of %d bytes at %d, file ends at %d", errTorn, h.size(), s.pos, s.end)
	}
	if cap(s.buf) < h.batchLen() {
		s.buf = make([]byte, h.batchLen())
	}
	s.buf = s.buf[:h.batchLen()]
	if _, err := io.ReadFull(s.r, s.buf); err != nil {
		return frameHeader{}, nil, fmt.Errorf("read frame at %d: %w", s.pos, err)
	}
	s.pos += h.size()
	return h, s.buf, nil
}

// preamble is what a frame's header and its batch's header tell.
type preamble struct {
	frameHeader
	batch Batch // the batch header only (25, 45 or 66 bytes, by its version)
}

func (p preamble) count() int64 { return int64(p.batch.Count()) }

// nextOffset is the offset after the frame's last record.
func (p preamble) nextOffset() int64 { return p.baseOffset + p.count() }

// readPreamble reads the headers of the frame at pos of a file whose valid
// bytes end at end, with one pread of at most framePreambleSize bytes. It
// checks the frame header's CRC, the batch header's CRC (version 2), and
// that the batch's version, header and record count fit the frame; not the
// records nor the CRC of the whole batch.
func readPreamble(f io.ReaderAt, pos, end int64, buf *[framePreambleSize]byte) (preamble, error) {
	// A version 1 frame can be shorter than framePreambleSize.
	n := min(end-pos, framePreambleSize)
	if n < minFrameSize {
		return preamble{}, fmt.Errorf("%w: %d bytes left at %d", errTorn, end-pos, pos)
	}
	if _, err := f.ReadAt(buf[:n], pos); err != nil {
		return preamble{}, fmt.Errorf("read frame at %d: %w", pos, err)
	}
	h, err := parseFrameHeader(buf[:])
	if err != nil {
		return preamble{}, fmt.Errorf("frame at %d: %w", pos, err)
	}
	if pos+h.size() > end {
		return preamble{}, fmt.Errorf("%w: frame of %d bytes at %d, end at %d", errTorn, h.size(), pos, end)
	}
	b := Batch(buf[frameHeaderSize:min(n, frameHeaderSize+int64(h.batchLen()))])
	if err := b.checkHeaderSize(); err != nil {
		return preamble{}, fmt.Errorf("frame at %d: %w", pos, err)
	}
	b = b[:b.headerSize()]
	if err := b.checkCount(h.batchLen()); err != nil {
		return preamble{}, fmt.Errorf("frame at %d: %w", pos, err)
	}
	if err := b.checkHeaderCRC(); err != nil {
		return preamble{}, fmt.Errorf("frame at %d: %w", pos, err)
	}
	return preamble{frameHeader: h, batch: b}, nil
}

// readBatch reads and checks the whole batch of the frame p at pos.
func readBatch(f io.ReaderAt, pos int64, p preamble) (Batch, error) {
	b := make(Batch, p.batchLen())
	if _, err := f.ReadAt(b, pos+frameHeaderSize); err != nil {
		return nil, fmt.Errorf("read batch at %d: %w", pos, err)
	}
	if err := b.checkHeader(); err != nil {
		return nil, fmt.Errorf("batch at %d: %w", pos, err)
	}
	if err := b.checkCRC(); err != nil {
		return nil, fmt.Errorf("batch at %d: %w", pos, err)
	}
	return b, nil
}
