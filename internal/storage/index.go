package storage

// A segment's two sparse indexes. Both files are arrays of fixed-width
// big-endian entries, appended to as the segment grows, and both are kept in
// memory as well. They are never fsynced: Open checks them against the
// segment and rebuilds them by scanning when they do not match.
//
// The offset index (.index) has one entry per IndexIntervalBytes of frames:
//
//	relOffset uint32  offset - segment base of a frame's first record
//	position  uint32  where that frame starts in the .log file
//
// The time index (.timeindex) has an entry at an offset index point whenever
// the segment's largest timestamp so far has grown, and a last entry, written
// when the segment is sealed (rolled), for the whole segment:
//
//	timestamp int64   every record of the segment below relOffset has a timestamp <= this
//	relOffset uint32
//
// Offset entries increase strictly in both fields; time entries increase
// strictly in relOffset and never decrease in timestamp.

import (
	"encoding/binary"
	"fmt"
	"os"
	"sort"
)

const (
	offsetEntrySize = 8
	timeEntrySize   = 12
)

type offsetEntry struct {
	rel uint32
	pos uint32
}

type timeEntry struct {
	ts  int64
	rel uint32
}

func (e offsetEntry) encode() []byte {
	var b [offsetEntrySize]byte
	binary.BigEndian.PutUint32(b[0:], e.rel)
	binary.BigEndian.PutUint32(b[4:], e.pos)
	return b[:]
}

func (e timeEntry) encode() []byte {
	var b [timeEntrySize]byte
	binary.BigEndian.PutUint64(b[0:], uint64(e.ts))
	binary.BigEndian.PutUint32(b[8:], e.rel)
	return b[:]
}

// floorPosition is the position of the last indexed frame whose first offset
// is at or below rel: where a scan for rel starts. It is 0 (the segment's
// first frame) when no entry is at or below rel.
func floorPosition(entries []offsetEntry, rel uint32) int64 {
	i := sort.Search(len(entries), func(i int) bool { return entries[i].rel > rel })
	if i == 0 {
		return 0
	}
	return int64(entries[i-1].pos)
}

// timeFloor is the relative offset below which every record's timestamp is
// under ts: where a search for the first record at or after ts starts.
func timeFloor(entries []timeEntry, ts int64) uint32 {
	i := sort.Search(len(entries), func(i int) bool { return entries[i].ts >= ts })
	if i == 0 {
		return 0
	}
	return entries[i-1].rel
}

func readOffsetIndex(path string, segmentSize int64) ([]offsetEntry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b)%offsetEntrySize != 0 {
		return nil, fmt.Errorf("%s: %d bytes is not a whole number of entries", path, len(b))
	}
	entries := make([]offsetEntry, len(b)/offsetEntrySize)
	for i := range entries {
		e := offsetEntry{rel: binary.BigEndian.Uint32(b[i*8:]), pos: binary.BigEndian.Uint32(b[i*8+4:])}
		if i > 0 && (e.rel <= entries[i-1].rel || e.pos <= entries[i-1].pos) {
			return nil, fmt.Errorf("%s: entry %d (%d@%d) does not follow %d@%d", path, i, e.rel, e.pos, entries[i-1].rel, entries[i-1].pos)
		}
		if int64(e.pos) >= segmentSize || e.rel == 0 {
			return nil, fmt.Errorf("%s: entry %d (%d@%d) outside the %d-byte segment", path, i, e.rel, e.pos, segmentSize)
		}
		entries[i] = e
	}
	return entries, nil
}

func readTimeIndex(path string) ([]timeEntry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b)%timeEntrySize != 0 {
		return nil, fmt.Errorf("%s: %d bytes is not a whole number of entries", path, len(b))
	}
	entries := make([]timeEntry, len(b)/timeEntrySize)
	for i := range entries {
		e := timeEntry{ts: int64(binary.BigEndian.Uint64(b[i*12:])), rel: binary.BigEndian.Uint32(b[i*12+8:])}
		if i > 0 && (e.rel <= entries[i-1].rel || e.ts < entries[i-1].ts) {
			return nil, fmt.Errorf("%s: entry %d (%d@%d) does not follow %d@%d", path, i, e.ts, e.rel, entries[i-1].ts, entries[i-1].rel)
		}
		entries[i] = e
	}
	return entries, nil
}

// writeIndexFiles replaces both index files with the given entries and returns
// them open for appending.
func writeIndexFiles(offsetPath, timePath string, offsets []offsetEntry, times []timeEntry) (offsetFile, timeFile *os.File, err error) {
	ob := make([]byte, 0, len(offsets)*offsetEntrySize)
	for _, e := range offsets {
		ob = append(ob, e.encode()...)
	}
	tb := make([]byte, 0, len(times)*timeEntrySize)
	for _, e := range times {
		tb = append(tb, e.encode()...)
	}
	if offsetFile, err = rewrite(offsetPath, ob); err != nil {
		return nil, nil, err
	}
	if timeFile, err = rewrite(timePath, tb); err != nil {
		offsetFile.Close()
		return nil, nil, err
	}
	return offsetFile, timeFile, nil
}

func rewrite(path string, data []byte) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return f, nil
}
