package recordbatch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// Codec is the compression of a record batch: attributes bits 0-2.
type Codec int8

// The codecs of Kafka's record batch v2.
const (
	CodecNone   Codec = 0
	CodecGzip   Codec = 1
	CodecSnappy Codec = 2
	CodecLz4    Codec = 3
	CodecZstd   Codec = 4
)

func (c Codec) String() string {
	switch c {
	case CodecNone:
		return "none"
	case CodecGzip:
		return "gzip"
	case CodecSnappy:
		return "snappy"
	case CodecLz4:
		return "lz4"
	case CodecZstd:
		return "zstd"
	}
	return fmt.Sprintf("codec %d", int8(c))
}

// MaxDecompressedBatchBytes bounds what one batch's records may decompress
// to when Validate or Records reads them. Kafka sets no bound; a broker that
// decompresses what any client sends needs one (a few KiB of zeros compress
// a thousandfold).
const MaxDecompressedBatchBytes = 256 << 20

// errTooLarge: the records decompress to more than MaxDecompressedBatchBytes.
var errTooLarge = fmt.Errorf("records decompress to more than %d bytes", MaxDecompressedBatchBytes)

// zstdDecoder decodes whole buffers (DecodeAll is safe for concurrent use),
// refusing output above the bound.
var zstdDecoder, _ = zstd.NewReader(nil,
	zstd.WithDecoderConcurrency(1),
	zstd.WithDecoderLowmem(true),
	zstd.WithDecoderMaxMemory(MaxDecompressedBatchBytes))

// decompress returns the records of a batch compressed with c. The same
// libraries as franz-go's kgo: klauspost/compress (gzip, snappy through s2,
// zstd) and pierrec/lz4 (Kafka's lz4 is the lz4 frame format).
func decompress(c Codec, src []byte) ([]byte, error) {
	switch c {
	case CodecNone:
		return src, nil
	case CodecGzip:
		zr, err := gzip.NewReader(bytes.NewReader(src))
		if err != nil {
			return nil, err
		}
		return readBounded(zr)
	case CodecSnappy:
		return decodeSnappy(src)
	case CodecLz4:
		return readBounded(lz4.NewReader(bytes.NewReader(src)))
	case CodecZstd:
		return zstdDecoder.DecodeAll(src, nil)
	}
	return nil, fmt.Errorf("unknown compression %v", c)
}

// readBounded reads r to its end, refusing more than the bound.
func readBounded(r io.Reader) ([]byte, error) {
	var out bytes.Buffer
	n, err := out.ReadFrom(io.LimitReader(r, MaxDecompressedBatchBytes+1))
	if err != nil {
		return nil, err
	}
	if n > MaxDecompressedBatchBytes {
		return nil, errTooLarge
	}
	return out.Bytes(), nil
}

// xerialMagic starts snappy data in the xerial framing that the Java client
// writes: the magic, a version and a compatible version (int32 each), then
// blocks of an int32 length and one snappy block. franz-go and librdkafka
// write one plain snappy block.
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

const xerialHeaderSize = 16

func decodeSnappy(src []byte) ([]byte, error) {
	if !bytes.HasPrefix(src, xerialMagic) {
		return decodeSnappyBlock(nil, src)
	}
	if len(src) < xerialHeaderSize {
		return nil, errors.New("xerial snappy header cut short")
	}
	var out []byte
	for rest := src[xerialHeaderSize:]; len(rest) > 0; {
		if len(rest) < 4 {
			return nil, errors.New("xerial snappy block length cut short")
		}
		n := binary.BigEndian.Uint32(rest)
		rest = rest[4:]
		if uint64(n) > uint64(len(rest)) {
			return nil, fmt.Errorf("xerial snappy block of %d bytes, %d left", n, len(rest))
		}
		var err error
		if out, err = decodeSnappyBlock(out, rest[:n]); err != nil {
			return nil, err
		}
		rest = rest[n:]
	}
	return out, nil
}

// decodeSnappyBlock appends the decoding of one snappy block to dst.
func decodeSnappyBlock(dst, block []byte) ([]byte, error) {
	n, err := s2.DecodedLen(block)
	if err != nil {
		return nil, err
	}
	if len(dst)+n > MaxDecompressedBatchBytes {
		return nil, errTooLarge
	}
	out, err := s2.Decode(nil, block)
	if err != nil {
		return nil, err
	}
	return append(dst, out...), nil
}
