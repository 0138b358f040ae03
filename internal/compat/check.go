package compat

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Record is one record as a client program printed it (an ACK or REC
// line) or as a reading of the topic returns it.
type Record struct {
	Partition int32 // -1 when the client program does not know it
	Offset    int64 // -1 when the client program does not know it
	Key       string
	Value     string
}

func (r Record) String() string {
	return fmt.Sprintf("%s/%s at %d:%d", r.Key, r.Value, r.Partition, r.Offset)
}

// ErrBadLine is returned by ParseLines for a tagged line that is not
// "TAG PARTITION OFFSET KEY VALUE".
var ErrBadLine = errors.New("compat: bad client output line")

// ParseLines returns the records of the lines of out that start with
// tag followed by a space: "TAG PARTITION OFFSET KEY VALUE", as every client
// program of testdata/ prints them (keys and values have no spaces). Other
// lines are ignored.
func ParseLines(out []byte, tag string) ([]Record, error) {
	var recs []Record
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, tag+" ") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 5 {
			return nil, fmt.Errorf("%w: %q", ErrBadLine, line)
		}
		p, err1 := strconv.ParseInt(f[1], 10, 32)
		o, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%w: %q", ErrBadLine, line)
		}
		recs = append(recs, Record{Partition: int32(p), Offset: o, Key: f[3], Value: f[4]})
	}
	return recs, sc.Err()
}

// seq is the number after a value's last '-' ("k3-000042": 42), or -1.
func seq(value string) int64 {
	i := strings.LastIndexByte(value, '-')
	if i < 0 {
		return -1
	}
	n, err := strconv.ParseInt(value[i+1:], 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// CheckProduced reports how stored (a whole topic, as read back) breaks
// what a producer's acknowledgements promise: an acknowledged value
// missing (lost), a value stored twice (duplicated), an acknowledged
// partition and offset holding something else, or a key's records out
// of the order they were sent in (values "KEY-SEQ", SEQ increasing).
// Values stored but never acknowledged are allowed (a send whose answer was
// lost may still be written), once.
func CheckProduced(acked, stored []Record) error {
	where := make(map[string][]Record, len(stored))
	at := make(map[[2]int64]Record, len(stored))
	for _, r := range stored {
		where[r.Value] = append(where[r.Value], r)
		at[[2]int64{int64(r.Partition), r.Offset}] = r
	}
	var lost, dup, moved []string
	for v, rs := range where {
		if len(rs) > 1 {
			dup = append(dup, fmt.Sprintf("%s (%d times)", v, len(rs)))
		}
	}
	for _, a := range acked {
		rs := where[a.Value]
		switch {
		case len(rs) == 0:
			lost = append(lost, a.String())
		case a.Partition >= 0 && a.Offset >= 0:
			if got, ok := at[[2]int64{int64(a.Partition), a.Offset}]; !ok || got.Value != a.Value || got.Key != a.Key {
				moved = append(moved, fmt.Sprintf("%s holds %v", a, got))
			}
		}
	}
	return report(
		problem{"acknowledged records lost", lost},
		problem{"records duplicated", dup},
		problem{"acknowledgements name another record's place", moved},
		problem{"records out of their key's order", outOfKeyOrder(stored)})
}

// outOfKeyOrder lists the records that break: within each partition, in
// offset order, each key's sequence numbers increase.
func outOfKeyOrder(stored []Record) []string {
	byPart := map[int32][]Record{}
	for _, r := range stored {
		byPart[r.Partition] = append(byPart[r.Partition], r)
	}
	var bad []string
	for p, rs := range byPart {
		sort.Slice(rs, func(i, j int) bool { return rs[i].Offset < rs[j].Offset })
		last := map[string]Record{}
		for _, r := range rs {
			s := seq(r.Value)
			if s < 0 {
				continue
			}
			if prev, ok := last[r.Key]; ok && seq(prev.Value) >= s {
				bad = append(bad, fmt.Sprintf("partition %d: %s after %s", p, r, prev))
			}
			last[r.Key] = r
		}
	}
	return bad
}

// CheckConsumed reports how the records handled by a group's members (one
// list per member, in the order each handled them) break exactly-once
// processing of stored: a stored record no member handled, one handled
// twice (by one member or two), one that is not stored, or a member going
// backwards within a partition.
func CheckConsumed(stored []Record, members ...[]Record) error {
	want := make(map[[2]int64]Record, len(stored))
	for _, r := range stored {
		want[[2]int64{int64(r.Partition), r.Offset}] = r
	}
	seen := map[[2]int64]int{}
	var dup, foreign, back []string
	for m, handled := range members {
		last := map[int32]int64{}
		for _, r := range handled {
			k := [2]int64{int64(r.Partition), r.Offset}
			seen[k]++
			if seen[k] == 2 {
				dup = append(dup, r.String())
			}
			if s, ok := want[k]; !ok || s.Value != r.Value || s.Key != r.Key {
				foreign = append(foreign, r.String())
			}
			if l, ok := last[r.Partition]; ok && r.Offset <= l {
				back = append(back, fmt.Sprintf("member %d: %s after offset %d", m, r, l))
			}
			last[r.Partition] = r.Offset
		}
	}
	var missing []string
	for k, r := range want {
		if seen[k] == 0 {
			missing = append(missing, r.String())
		}
	}
	return report(
		problem{fmt.Sprintf("of %d stored records never handled", len(stored)), missing},
		problem{"records handled twice", dup},
		problem{"records handled that are not stored so", foreign},
		problem{"records handled out of offset order", back})
}

// problem is one way a client broke its promise, with the records that
// show it.
type problem struct {
	what  string
	items []string
}

// report joins "N WHAT: the first three" for each problem that has items;
// nil when none has.
func report(ps ...problem) error {
	var errs []error
	for _, p := range ps {
		if len(p.items) > 0 {
			errs = append(errs, fmt.Errorf("%d %s: %s", len(p.items), p.what, few(p.items)))
		}
	}
	return errors.Join(errs...)
}

// few returns the first three of s (sorted) and how many more.
func few(s []string) string {
	sort.Strings(s)
	if len(s) <= 3 {
		return strings.Join(s, ", ")
	}
	return strings.Join(s[:3], ", ") + fmt.Sprintf(" and %d more", len(s)-3)
}
