package raftlog

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/hashicorp/raft"
)

// A segment file is a sequence of frames:
//
//	length  uint32  bytes of kind+payload
//	crc     uint32  CRC-32C of kind+payload
//	kind    uint8
//	payload
//
// All integers are little-endian. The payloads:
//
//	kindEntries: group, count uint32, count entry bodies (one StoreLogs)
//	kindDelete:  group, lo uint64, hi uint64 (a DeleteRange; lo 0 and hi
//	             max uint64 drop the whole group)
//	kindImage:   group, count uint32, count entry bodies: every live entry
//	             of the group, which replaces whatever it had (written when
//	             the group's old entries are carried forward so that their
//	             segments can be removed)
//
// group is a uint16 length and the name's bytes. An entry body is
//
//	index uint64, term uint64, type uint8, appendedAt int64 (unix ns, 0 if
//	zero), data length uint32, data, extensions length uint32, extensions
//
// A frame is written whole or recovery cuts the segment before it: the CRC
// covers everything after it, so a torn or zeroed tail fails it.
const (
	kindEntries = 1
	kindDelete  = 2
	kindImage   = 3
)

const (
	frameHeader = 8  // length, crc
	bodyFixed   = 33 // index, term, type, appendedAt, data length, extensions length
	// maxFrame bounds a frame's length field: recovery treats anything
	// larger as a torn tail rather than allocating it.
	maxFrame = 1 << 30
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// bodySize is the encoded size of one entry body.
func bodySize(l *raft.Log) int { return bodyFixed + len(l.Data) + len(l.Extensions) }

// appendHeader starts a frame of kind for group in buf and returns buf and
// the frame's start; finishFrame fills its length and CRC once the payload
// is appended.
func appendHeader(buf []byte, kind byte, group string) ([]byte, int) {
	start := len(buf)
	buf = append(buf, make([]byte, frameHeader)...)
	buf = append(buf, kind)
	buf = binary.LittleEndian.AppendUint16(buf, uint16(len(group)))
	buf = append(buf, group...)
	return buf, start
}

func finishFrame(buf []byte, start int) []byte {
	payload := buf[start+frameHeader:]
	binary.LittleEndian.PutUint32(buf[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(buf[start+4:], crc32.Checksum(payload, castagnoli))
	return buf
}

// appendBody appends one entry body.
func appendBody(buf []byte, l *raft.Log) []byte {
	buf = binary.LittleEndian.AppendUint64(buf, l.Index)
	buf = binary.LittleEndian.AppendUint64(buf, l.Term)
	buf = append(buf, byte(l.Type))
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	buf = binary.LittleEndian.AppendUint64(buf, uint64(at))
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(l.Data)))
	buf = append(buf, l.Data...)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(l.Extensions)))
	buf = append(buf, l.Extensions...)
	return buf
}

// decodeBody decodes the entry body at the start of b into l (copying
// nothing: l's slices alias b) and returns its size.
func decodeBody(b []byte, l *raft.Log) (int, error) {
	if len(b) < bodyFixed {
		return 0, fmt.Errorf("%w: entry body of %d bytes", ErrCorrupt, len(b))
	}
	l.Index = binary.LittleEndian.Uint64(b)
	l.Term = binary.LittleEndian.Uint64(b[8:])
	l.Type = raft.LogType(b[16])
	at := int64(binary.LittleEndian.Uint64(b[17:]))
	l.AppendedAt = time.Time{}
	if at != 0 {
		l.AppendedAt = time.Unix(0, at)
	}
	n := int(binary.LittleEndian.Uint32(b[25:]))
	p := 29
	if len(b) < p+n+4 {
		return 0, fmt.Errorf("%w: entry %d data of %d bytes overruns its frame", ErrCorrupt, l.Index, n)
	}
	l.Data = b[p : p+n : p+n]
	p += n
	e := int(binary.LittleEndian.Uint32(b[p:]))
	p += 4
	if len(b) < p+e {
		return 0, fmt.Errorf("%w: entry %d extensions of %d bytes overrun its frame", ErrCorrupt, l.Index, e)
	}
	l.Extensions = nil
	if e > 0 {
		l.Extensions = b[p : p+e : p+e]
	}
	if n == 0 {
		l.Data = nil
	}
	return p + e, nil
}

// parsedFrame is a decoded frame header and payload (recovery).
type parsedFrame struct {
	kind  byte
	group string
	rest  []byte // the payload after the group name
	// restOff is where rest starts, from the frame's start.
	restOff int
}

func parseFrame(payload []byte) (parsedFrame, error) {
	if len(payload) < 3 {
		return parsedFrame{}, fmt.Errorf("%w: frame of %d bytes", ErrCorrupt, len(payload))
	}
	n := int(binary.LittleEndian.Uint16(payload[1:]))
	if len(payload) < 3+n {
		return parsedFrame{}, fmt.Errorf("%w: group name overruns its frame", ErrCorrupt)
	}
	return parsedFrame{kind: payload[0], group: string(payload[3 : 3+n]), rest: payload[3+n:], restOff: frameHeader + 3 + n}, nil
}
