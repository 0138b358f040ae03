package dashboard

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// ackedRecord is a record a producer history shows acknowledged with
// acks=1, at the offset the leader gave it.
type ackedRecord struct {
	Producer string
	EventID  string
	Offset   int64
}

// lostRecord is an acknowledged record the log does not hold at its
// offset.
type lostRecord struct {
	ackedRecord
	// Found is the event_id the log holds there ("" when the offset holds
	// no record).
	Found string
}

// checkAcked compares acknowledged records with the log. pending holds,
// per offset, every record acknowledged at it: an isolated leader and the
// one elected without it both acknowledge records at the same offsets. log
// maps every offset of [from, to) the log holds to its record's event_id
// (to is at most the high watermark: only committed records are judged).
// Each pending record in [from, to) is checked: lost when the log holds
// another event_id there, or nothing. Those below from are not judged
// (the caller drops what retention deleted). It returns the lost records
// (by offset, then event_id) and the offsets it judged, sorted.
func checkAcked(pending map[int64][]ackedRecord, log map[int64]string, from, to int64) (lost []lostRecord, judged []int64) {
	for off, rs := range pending {
		if off < from || off >= to {
			continue
		}
		judged = append(judged, off)
		id, ok := log[off]
		for _, r := range rs {
			if !ok || id != r.EventID {
				lost = append(lost, lostRecord{ackedRecord: r, Found: id})
			}
		}
	}
	slices.Sort(judged)
	sort.Slice(lost, func(i, j int) bool {
		if lost[i].Offset != lost[j].Offset {
			return lost[i].Offset < lost[j].Offset
		}
		return lost[i].EventID < lost[j].EventID
	})
	return lost, judged
}

// lostText is the timeline text of records lost on one partition.
func lostText(tp partKey, lost []lostRecord) string {
	var offs []int64
	producers := map[string]bool{}
	for _, l := range lost {
		if len(offs) == 0 || offs[len(offs)-1] != l.Offset {
			offs = append(offs, l.Offset)
		}
		producers[l.Producer] = true
	}
	names := make([]string, 0, len(producers))
	for p := range producers {
		names = append(names, p)
	}
	sort.Strings(names)
	s, so := "s", "s"
	if len(lost) == 1 {
		s = ""
	}
	if len(offs) == 1 {
		so = ""
	}
	return fmt.Sprintf("acks=1: %d acknowledged record%s lost on %s (offset%s %s; %s)",
		len(lost), s, tp, so, offsetRanges(offs, 8), strings.Join(names, ", "))
}

// offsetRanges prints sorted offsets as ranges, "120-135, 140", at most
// max ranges and then "…".
func offsetRanges(offs []int64, max int) string {
	var parts []string
	for i := 0; i < len(offs); {
		j := i
		for j+1 < len(offs) && offs[j+1] == offs[j]+1 {
			j++
		}
		if len(parts) == max {
			parts = append(parts, "…")
			break
		}
		if j == i {
			parts = append(parts, strconv.FormatInt(offs[i], 10))
		} else {
			parts = append(parts, strconv.FormatInt(offs[i], 10)+"-"+strconv.FormatInt(offs[j], 10))
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}

// maxPendingPerPartition bounds the offsets waiting to be checked on one
// partition; beyond it the lowest are dropped unchecked.
const maxPendingPerPartition = 200_000

// lostDetector holds the acks=1 records acknowledged but not yet checked
// against the committed log, per partition. Safe for concurrent use.
type lostDetector struct {
	mu      sync.Mutex
	pending map[partKey]map[int64][]ackedRecord
	dropped int64
}

func newLostDetector() *lostDetector {
	return &lostDetector{pending: map[partKey]map[int64][]ackedRecord{}}
}

// add records an acknowledged record to check.
func (d *lostDetector) add(tp partKey, r ackedRecord) {
	d.mu.Lock()
	defer d.mu.Unlock()
	m := d.pending[tp]
	if m == nil {
		m = map[int64][]ackedRecord{}
		d.pending[tp] = m
	}
	if _, ok := m[r.Offset]; !ok && len(m) >= maxPendingPerPartition {
		lowest := int64(-1)
		for off := range m {
			if lowest < 0 || off < lowest {
				lowest = off
			}
		}
		d.dropped += int64(len(m[lowest]))
		delete(m, lowest)
	}
	m[r.Offset] = append(m[r.Offset], r)
}

// due returns the lowest offset waiting on tp below hw, after dropping
// those below logStart (deleted by retention before they were checked).
func (d *lostDetector) due(tp partKey, logStart, hw int64) (int64, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	lowest, ok := int64(0), false
	for off := range d.pending[tp] {
		if off < logStart {
			delete(d.pending[tp], off)
			continue
		}
		if off < hw && (!ok || off < lowest) {
			lowest, ok = off, true
		}
	}
	return lowest, ok
}

// check judges the records waiting on tp against log, which holds every
// record of [from, to), and forgets the judged ones.
func (d *lostDetector) check(tp partKey, log map[int64]string, from, to int64) []lostRecord {
	d.mu.Lock()
	defer d.mu.Unlock()
	lost, judged := checkAcked(d.pending[tp], log, from, to)
	for _, off := range judged {
		delete(d.pending[tp], off)
	}
	return lost
}
