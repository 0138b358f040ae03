package check

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/tapes-dev/tapes/internal/consumer"
	"github.com/tapes-dev/tapes/internal/producer"
	"github.com/tapes-dev/tapes/internal/sink"
)

// maxListed bounds the offsets and event ids one poll-skip anomaly lists.
const maxListed = 20

// Check reads the inputs and returns every anomaly found. It fails only
// when an input cannot be read (or is not what it should be); anomalies are
// in the Result.
func Check(ctx context.Context, in Input) (Result, error) {
	if len(in.ProducerHistories) == 0 && len(in.TxnHistories) == 0 {
		return Result{}, errors.New("check: no producer history")
	}
	if len(in.ConsumerHistories) == 0 && in.Log == nil && len(in.TxnHistories) == 0 {
		return Result{}, errors.New("check: nothing read: give consumer histories or a full read")
	}
	a := &analysis{in: in, found: map[string]*collector{}}
	for _, k := range Kinds {
		a.found[k] = &collector{}
	}
	if err := a.load(); err != nil {
		return Result{}, err
	}
	a.observe()
	a.polls()
	a.unread()
	a.failedReads()
	a.sendOrder()
	txn, err := a.txns()
	if err != nil {
		return Result{}, err
	}

	res := Result{
		Counts: map[string]int{}, Anomalies: []Anomaly{},
		Sent: int64(len(a.sent)), LogRecords: -1, DeletedByRetention: a.deleted,
		Read: int64(len(a.read)), Processed: a.processed, Txn: txn,
	}
	for _, s := range a.sent {
		if s.line.Status == producer.StatusOK {
			res.Acked++
		} else {
			res.Failed++
		}
	}
	if in.Log != nil {
		res.LogRecords = 0
		for _, recs := range in.Log {
			res.LogRecords += int64(len(recs))
		}
	}
	if in.SinkDB != "" {
		st, err := sink.ComputeStats(ctx, in.SinkDB, in.ProducerHistories)
		if err != nil {
			return Result{}, fmt.Errorf("check: %w", err)
		}
		res.Sink = &st
		a.sinkAnomalies(st)
	}
	for _, k := range Kinds {
		if slices.Contains(sinkKinds, k) && !a.sinkChecked[k] || slices.Contains(TxnKinds, k) && txn == nil {
			continue
		}
		c := a.found[k]
		res.Counts[k] = c.n
		res.Anomalies = append(res.Anomalies, c.list...)
	}
	res.Expectation = in.Expect.Name
	res.Valid, res.Why = res.Meets(in.Expect)
	return res, nil
}

// loc is a position in the topic.
type loc struct {
	p   int32
	off int64
}

// send is one producer history line.
type send struct {
	line producer.HistoryLine
	id   string // identity
	// prefix and n split the event_id PRODUCER-HEX-N; parsed is false when
	// it has no such shape.
	prefix string
	n      int64
	parsed bool
}

// consumerFile is one consumer history.
type consumerFile struct {
	path  string
	lines []consumer.HistoryLine
}

// obs is one observation of a record at a position.
type obs struct {
	at    loc
	id    string
	label string // who saw it: "consumer NAME", "full read", "ack (acks=A)"
	read  bool   // a consumer or the full read (not an acknowledgement)
	acks  string // for acknowledgements: the producer's acks
}

// collector counts the anomalies of one kind and keeps the first
// MaxPerKind in compareAnomalies order (ties in the order found).
type collector struct {
	n    int
	list []Anomaly
}

func (c *collector) add(a Anomaly) {
	c.n++
	i := sort.Search(len(c.list), func(i int) bool { return compareAnomalies(c.list[i], a) > 0 })
	if i >= MaxPerKind {
		return
	}
	c.list = slices.Insert(c.list, i, a)
	if len(c.list) > MaxPerKind {
		c.list = c.list[:MaxPerKind]
	}
}

// compareAnomalies orders anomalies by partition, first offset (none
// first), then first event id.
func compareAnomalies(x, y Anomaly) int {
	first := func(a Anomaly) (int64, string) {
		off, id := int64(-1), ""
		if len(a.Offsets) > 0 {
			off = a.Offsets[0]
		}
		if len(a.EventIDs) > 0 {
			id = a.EventIDs[0]
		}
		return off, id
	}
	xo, xid := first(x)
	yo, yid := first(y)
	return cmp.Or(cmp.Compare(x.Partition, y.Partition), cmp.Compare(xo, yo), cmp.Compare(xid, yid))
}

// analysis is the state of one Check.
type analysis struct {
	in          Input
	found       map[string]*collector
	sinkChecked map[string]bool

	sent      []send
	acked     map[string]int // identity -> index in sent of its first ok line
	consumers []consumerFile
	processed int64

	first     map[loc]string       // the first identity seen at each position
	firstLoc  map[string]loc       // the first position of each identity
	read      map[string]bool      // identities read
	readAt    map[string]loc       // the first position each identity was read at
	maxRead   map[int32]int64      // highest offset read per partition
	known     map[int32][]int64    // offsets known to exist, sorted, per partition
	gaps      map[int32][][2]int64 // [from, to) lost to retention, per partition
	conflicts map[loc]bool         // positions holding several identities
	dups      map[string]bool      // identities at several positions
	deleted   int64
}

// identity is what tells records apart: the event_id, or the value for a
// record without one.
func identity(eventID, value string) string {
	if eventID != "" {
		return eventID
	}
	return "value:" + strconv.Quote(value)
}

// load reads every history file.
func (a *analysis) load() error {
	a.acked = map[string]int{}
	for _, path := range a.in.ProducerHistories {
		lines, err := producer.ReadHistoryFile(path)
		if err != nil {
			return fmt.Errorf("check: producer %w", err)
		}
		for _, l := range lines {
			s := send{line: l, id: identity(l.EventID, l.Value)}
			s.prefix, s.n, s.parsed = producer.SplitEventID(l.EventID)
			if _, dup := a.acked[s.id]; !dup && l.Status == producer.StatusOK {
				a.acked[s.id] = len(a.sent)
			}
			a.sent = append(a.sent, s)
		}
	}
	for _, path := range a.in.ConsumerHistories {
		lines, err := consumer.ReadHistory(path)
		if err != nil {
			return fmt.Errorf("check: consumer %w", err)
		}
		for i, l := range lines {
			switch l.Type {
			case consumer.HistoryRecord:
				if l.Partition == nil || l.Offset == nil {
					return fmt.Errorf("check: consumer history %s: line %d: a record line without partition or offset", path, i+1)
				}
				a.processed++
			case consumer.HistoryGap:
				if l.Partition == nil || l.From == nil || l.To == nil || l.ResumeAt == nil {
					return fmt.Errorf("check: consumer history %s: line %d: a gap line without partition, from, to or resume_at", path, i+1)
				}
			}
		}
		a.consumers = append(a.consumers, consumerFile{path: path, lines: lines})
	}
	return nil
}

// eachObs calls fn with every observation of a record at a position:
// acknowledged offsets, consumer record lines, the full read.
func (a *analysis) eachObs(fn func(o obs)) {
	for _, s := range a.sent {
		if s.line.Status == producer.StatusOK && s.line.Offset >= 0 {
			fn(obs{at: loc{s.line.Partition, s.line.Offset}, id: s.id, label: "ack (acks=" + s.line.Acks + ")", acks: s.line.Acks})
		}
	}
	for _, c := range a.consumers {
		for _, l := range c.lines {
			if l.Type != consumer.HistoryRecord {
				continue
			}
			var eventID, value string
			if l.EventID != nil {
				eventID = *l.EventID
			}
			if l.Value != nil {
				value = *l.Value
			}
			fn(obs{at: loc{*l.Partition, *l.Offset}, id: identity(eventID, value), label: "consumer " + l.Consumer, read: true})
		}
	}
	for _, p := range sortedPartitions(a.in.Log) {
		for _, r := range a.in.Log[p] {
			fn(obs{at: loc{p, r.Offset}, id: identity(r.EventID, r.Value), label: "full read", read: true})
		}
	}
}

func sortedPartitions[V any](m map[int32]V) []int32 {
	ps := make([]int32, 0, len(m))
	for p := range m {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}

// observe indexes the observations and finds duplicates and inconsistent
// offsets.
func (a *analysis) observe() {
	a.first, a.firstLoc = map[loc]string{}, map[string]loc{}
	a.read, a.readAt, a.maxRead = map[string]bool{}, map[string]loc{}, map[int32]int64{}
	a.known, a.gaps = map[int32][]int64{}, map[int32][][2]int64{}
	a.conflicts, a.dups = map[loc]bool{}, map[string]bool{}
	a.eachObs(func(o obs) {
		if id, ok := a.first[o.at]; !ok {
			a.first[o.at] = o.id
		} else if id != o.id {
			a.conflicts[o.at] = true
		}
		if at, ok := a.firstLoc[o.id]; !ok {
			a.firstLoc[o.id] = o.at
		} else if at != o.at && !strings.HasPrefix(o.id, "value:") {
			a.dups[o.id] = true
		}
		if o.read {
			if !a.read[o.id] {
				a.read[o.id] = true
				a.readAt[o.id] = o.at
			}
			if m, ok := a.maxRead[o.at.p]; !ok || o.at.off > m {
				a.maxRead[o.at.p] = o.at.off
			}
		}
		if o.read || o.acks == "all" {
			a.known[o.at.p] = append(a.known[o.at.p], o.at.off)
		}
	})
	for p, offs := range a.known {
		slices.Sort(offs)
		a.known[p] = slices.Compact(offs)
	}
	for _, c := range a.consumers {
		for _, l := range c.lines {
			if l.Type == consumer.HistoryGap {
				a.gaps[*l.Partition] = append(a.gaps[*l.Partition], [2]int64{*l.From, *l.To})
			}
		}
	}
	if len(a.conflicts) == 0 && len(a.dups) == 0 {
		return
	}

	// Second pass: who saw what, for the positions and identities involved.
	type seen struct {
		ids    []string
		labels map[string][]string
	}
	atConflict := map[loc]*seen{}
	dupLocs := map[string][]loc{}
	dupLabels := map[string]map[loc][]string{}
	a.eachObs(func(o obs) {
		if a.conflicts[o.at] {
			s := atConflict[o.at]
			if s == nil {
				s = &seen{labels: map[string][]string{}}
				atConflict[o.at] = s
			}
			if _, ok := s.labels[o.id]; !ok {
				s.ids = append(s.ids, o.id)
			}
			if !slices.Contains(s.labels[o.id], o.label) {
				s.labels[o.id] = append(s.labels[o.id], o.label)
			}
		}
		if a.dups[o.id] {
			if dupLabels[o.id] == nil {
				dupLabels[o.id] = map[loc][]string{}
			}
			if _, ok := dupLabels[o.id][o.at]; !ok {
				dupLocs[o.id] = append(dupLocs[o.id], o.at)
			}
			if !slices.Contains(dupLabels[o.id][o.at], o.label) {
				dupLabels[o.id][o.at] = append(dupLabels[o.id][o.at], o.label)
			}
		}
	})
	for at, s := range atConflict {
		var parts []string
		for _, id := range s.ids {
			parts = append(parts, fmt.Sprintf("%s (%s)", id, strings.Join(s.labels[id], ", ")))
		}
		a.found[InconsistentOffsets].add(Anomaly{Kind: InconsistentOffsets, Partition: at.p, Offsets: []int64{at.off}, EventIDs: s.ids,
			Detail: fmt.Sprintf("%d different records at partition %d offset %d: %s", len(s.ids), at.p, at.off, strings.Join(parts, "; "))})
	}
	for id, locs := range dupLocs {
		slices.SortFunc(locs, func(x, y loc) int {
			if c := cmp.Compare(x.p, y.p); c != 0 {
				return c
			}
			return cmp.Compare(x.off, y.off)
		})
		an := Anomaly{Kind: Duplicate, Partition: locs[0].p, EventIDs: []string{id}}
		var parts []string
		for _, l := range locs {
			if l.p != an.Partition {
				an.Partition = -1
			}
			an.Offsets = append(an.Offsets, l.off)
			parts = append(parts, fmt.Sprintf("partition %d offset %d (%s)", l.p, l.off, strings.Join(dupLabels[id][l], ", ")))
		}
		an.Detail = fmt.Sprintf("%s is at %d positions: %s", id, len(locs), strings.Join(parts, "; "))
		a.found[Duplicate].add(an)
	}
}

// ownKey is one consumer's hold on one partition.
type ownKey struct {
	consumer string
	p        int32
}

// ownership is the state of one ownership of a partition.
type ownership struct {
	owned bool
	has   bool   // last is set
	reset bool   // last is a gap's resume_at - 1, not a record processed
	last  int64  // the last offset processed
	id    string // its record
}

// polls walks each consumer history's ownerships for nonmonotonic-poll and
// poll-skip.
func (a *analysis) polls() {
	for _, c := range a.consumers {
		own := map[ownKey]*ownership{}
		get := func(consumer string, p int32) *ownership {
			k := ownKey{consumer, p}
			o := own[k]
			if o == nil || !o.owned {
				o = &ownership{owned: true} // a record outside any assignment starts one
				own[k] = o
			}
			return o
		}
		for _, l := range c.lines {
			switch l.Type {
			case consumer.HistoryAssigned:
				for _, p := range l.Partitions {
					own[ownKey{l.Consumer, p}] = &ownership{owned: true}
				}
			case consumer.HistoryRevoked, consumer.HistoryLost:
				for _, p := range l.Partitions {
					delete(own, ownKey{l.Consumer, p})
				}
			case consumer.HistoryGap:
				o := get(l.Consumer, *l.Partition)
				o.has, o.reset, o.last, o.id = true, true, *l.ResumeAt-1, ""
			case consumer.HistoryRecord:
				p, off := *l.Partition, *l.Offset
				var eventID, value string
				if l.EventID != nil {
					eventID = *l.EventID
				}
				if l.Value != nil {
					value = *l.Value
				}
				id := identity(eventID, value)
				o := get(l.Consumer, p)
				switch {
				case !o.has:
				case off <= o.last && !o.reset:
					a.found[NonmonotonicPoll].add(Anomaly{Kind: NonmonotonicPoll, Partition: p, Offsets: []int64{o.last, off},
						EventIDs: []string{o.id, id}, Consumer: l.Consumer,
						Detail: fmt.Sprintf("%s processed offset %d after offset %d of partition %d in one ownership (generation %d), with no gap or new assignment between (%s)",
							l.Consumer, off, o.last, p, l.Generation, c.path)})
				case off > o.last+1:
					a.skip(c.path, l, o, off, id)
				}
				o.has, o.reset, o.last, o.id = true, false, off, id
			}
		}
	}
}

// skip reports a poll-skip when offsets known to exist lie strictly between
// o.last and off.
func (a *analysis) skip(path string, l consumer.HistoryLine, o *ownership, off int64, id string) {
	p := *l.Partition
	known := a.known[p]
	lo, _ := slices.BinarySearch(known, o.last+1)
	hi, _ := slices.BinarySearch(known, off)
	skipped := known[lo:hi]
	if len(skipped) == 0 {
		return
	}
	an := Anomaly{Kind: PollSkip, Partition: p, Consumer: l.Consumer}
	for _, s := range skipped[:min(len(skipped), maxListed)] {
		an.Offsets = append(an.Offsets, s)
		an.EventIDs = append(an.EventIDs, a.first[loc{p, s}])
	}
	from := fmt.Sprintf("from offset %d", o.last)
	if o.reset {
		from = fmt.Sprintf("from a gap's resume_at %d", o.last+1)
	}
	more := ""
	if len(skipped) > maxListed {
		more = fmt.Sprintf(" (the first %d listed)", maxListed)
	}
	an.Detail = fmt.Sprintf("%s went %s to offset %d (%s) of partition %d in one ownership (generation %d), over %d offsets that exist%s (%s)",
		l.Consumer, from, off, id, p, l.Generation, len(skipped), more, path)
	a.found[PollSkip].add(an)
}

// deletedByRetention reports whether offset off of partition p is below the
// full read's log start or inside a consumer's gap.
func (a *analysis) deletedByRetention(p int32, off int64) bool {
	if off < 0 {
		return false
	}
	if ls, ok := a.in.LogStart[p]; ok && off < ls {
		return true
	}
	for _, g := range a.gaps[p] {
		if off >= g[0] && off < g[1] {
			return true
		}
	}
	return false
}

// prodPart is one producer's sends to one partition.
type prodPart struct {
	prefix string
	p      int32
}

// unread finds the acknowledged records never read: unseen, and lost-write
// when a later record of their partition was read.
func (a *analysis) unread() {
	// The latest send of each producer and partition that was read.
	type later struct {
		n  int64
		id string
	}
	laterRead := map[prodPart]later{}
	for _, s := range a.sent {
		if !s.parsed || !a.read[s.id] {
			continue
		}
		k := prodPart{s.prefix, s.line.Partition}
		if l, ok := laterRead[k]; !ok || s.n > l.n {
			laterRead[k] = later{s.n, s.id}
		}
	}
	for i, s := range a.sent {
		if first, ok := a.acked[s.id]; !ok || first != i || a.read[s.id] {
			continue // not acknowledged, counted at its first ok line, or read
		}
		l, p := s.line, s.line.Partition
		if a.deletedByRetention(p, l.Offset) {
			a.deleted++
			continue
		}
		an := Anomaly{Partition: p, EventIDs: []string{s.id}}
		var what string
		if l.Offset >= 0 {
			an.Offsets = []int64{l.Offset}
			what = fmt.Sprintf("acknowledged (acks=%s) at offset %d, never read", l.Acks, l.Offset)
		} else {
			what = fmt.Sprintf("acknowledged (acks=%s, offset unknown), never read", l.Acks)
		}
		unseen := an
		unseen.Kind = Unseen
		unseen.Detail = what
		if m, ok := a.maxRead[p]; ok {
			unseen.Detail += fmt.Sprintf("; the highest offset read in partition %d is %d", p, m)
		} else {
			unseen.Detail += fmt.Sprintf("; nothing of partition %d was read", p)
		}
		a.found[Unseen].add(unseen)

		lost := an
		lost.Kind = LostWrite
		switch m, ok := a.maxRead[p]; {
		case l.Offset >= 0 && ok && m > l.Offset:
			lost.Detail = what + fmt.Sprintf(", though offset %d of partition %d was read", m, p)
		case l.Offset < 0 && s.parsed && laterRead[prodPart{s.prefix, p}].n > s.n:
			lost.Detail = what + fmt.Sprintf(", though %s, sent later by the same producer to partition %d, was read", laterRead[prodPart{s.prefix, p}].id, p)
		default:
			continue
		}
		a.found[LostWrite].add(lost)
	}
}

// notAppended are the Kafka errors a broker answers when it appended
// nothing (the list of package producer): a record that failed with one of
// them after a single attempt was definitely not written.
var notAppended = map[string]bool{
	"NOT_LEADER_OR_FOLLOWER":       true,
	"LEADER_NOT_AVAILABLE":         true,
	"NOT_ENOUGH_REPLICAS":          true,
	"UNKNOWN_TOPIC_OR_PARTITION":   true,
	"OUT_OF_ORDER_SEQUENCE_NUMBER": true,
	"INVALID_PRODUCER_EPOCH":       true,
	"UNKNOWN_PRODUCER_ID":          true,
	"RECORD_TOO_LARGE":             true,
	"INVALID_REQUIRED_ACKS":        true,
	"INVALID_REQUEST":              true,
	"INVALID_TOPIC_EXCEPTION":      true,
	"CORRUPT_MESSAGE":              true,
}

// definiteFailure reports whether a failed send was certainly not written.
func definiteFailure(l producer.HistoryLine) bool {
	if l.Attempts == 0 {
		return true
	}
	return l.Attempts == 1 && l.Error != nil && notAppended[*l.Error]
}

// failedReads finds the records read although their send failed.
func (a *analysis) failedReads() {
	for _, s := range a.sent {
		l := s.line
		if l.Status == producer.StatusOK || !a.read[s.id] {
			continue
		}
		if _, ok := a.acked[s.id]; ok {
			continue // another line of the same event was acknowledged
		}
		at := a.readAt[s.id]
		errName := "an unnamed error"
		if l.Error != nil {
			errName = *l.Error
		}
		an := Anomaly{Kind: IndeterminateRead, Partition: at.p, Offsets: []int64{at.off}, EventIDs: []string{s.id},
			Detail: fmt.Sprintf("the send failed with %s after %d attempts (outcome unknown), and the record was read at partition %d offset %d",
				errName, l.Attempts, at.p, at.off)}
		if definiteFailure(l) {
			an.Kind = AbortedRead
			an.Detail = fmt.Sprintf("the send failed with %s after %d attempts (nothing appended), yet the record was read at partition %d offset %d",
				errName, l.Attempts, at.p, at.off)
		}
		a.found[an.Kind].add(an)
	}
}

// sendOrder finds acknowledged offsets that go backwards in a producer's send
// order, per partition.
func (a *analysis) sendOrder() {
	type seqOff struct {
		n     int64
		off   int64
		id    string
		keyed bool
	}
	groups := map[prodPart][]seqOff{}
	for _, s := range a.sent {
		if s.line.Status != producer.StatusOK || s.line.Offset < 0 || !s.parsed {
			continue
		}
		k := prodPart{s.prefix, s.line.Partition}
		groups[k] = append(groups[k], seqOff{s.n, s.line.Offset, s.id, s.line.Key != nil})
	}
	for k, ss := range groups {
		slices.SortStableFunc(ss, func(x, y seqOff) int { return cmp.Compare(x.n, y.n) })
		var top seqOff
		for i, s := range ss {
			if i == 0 || s.off > top.off {
				top = s
				continue
			}
			if s.off == top.off {
				continue // one position, two records: inconsistent-offsets
			}
			kind := "keyless"
			if s.keyed {
				kind = "keyed"
			}
			a.found[NonmonotonicSend].add(Anomaly{Kind: NonmonotonicSend, Partition: k.p, Offsets: []int64{top.off, s.off},
				EventIDs: []string{top.id, s.id},
				Detail: fmt.Sprintf("producer %s sent %s (send %d) before %s (send %d, %s), but they were acknowledged at offsets %d and %d of partition %d",
					k.prefix, top.id, top.n, s.id, s.n, kind, top.off, s.off, k.p)})
		}
	}
}

// sinkAnomalies turns the sink's counters into anomalies. The sink lists
// at most sink.ListCap event ids of each kind.
func (a *analysis) sinkAnomalies(st sink.Stats) {
	a.sinkChecked = map[string]bool{DuplicateEffect: true, OutOfKeyOrder: true, NeverProcessed: st.NeverProcessed != sink.Unknown}
	add := func(kind string, total int64, ids []string, detail string) {
		c := a.found[kind]
		for _, id := range ids {
			an := Anomaly{Kind: kind, Partition: -1, EventIDs: []string{id}, Detail: detail}
			if i, ok := a.acked[id]; ok {
				an.Partition = a.sent[i].line.Partition
				if off := a.sent[i].line.Offset; off >= 0 {
					an.Offsets = []int64{off}
				}
			}
			c.add(an)
		}
		c.n = int(total) // the sink's total, of which ids are the first
	}
	add(DuplicateEffect, st.Duplicates, st.DuplicateIDs, "applied more than once in the sink")
	if st.NeverProcessed != sink.Unknown {
		add(NeverProcessed, st.NeverProcessed, st.NeverProcessedIDs, "acknowledged, and no effect in the sink")
	}
	add(OutOfKeyOrder, st.OutOfKeyOrder, st.OutOfKeyOrderIDs, "applied in the sink after a later record of the same producer and key")
}
