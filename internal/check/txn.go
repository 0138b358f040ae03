package check

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// DefaultHungLSOAfter is Input.HungLSOAfter when zero.
const DefaultHungLSOAfter = 10 * time.Second

// TxnStats is what the transactional histories showed (Result.Txn).
type TxnStats struct {
	// Transactions is the number of transactions named; Committed,
	// Aborted and Unknown split them by outcome (see txnOutcome).
	Transactions int `json:"transactions"`
	Committed    int `json:"committed"`
	Aborted      int `json:"aborted"`
	Unknown      int `json:"unknown"`
	// Steps is the number of read-process-write steps.
	Steps int `json:"steps"`
	// ReadCommitted and ReadUncommitted count the read lines of each
	// isolation level.
	ReadCommitted   int64 `json:"read_committed"`
	ReadUncommitted int64 `json:"read_uncommitted"`
	// AbortedSeenUncommitted counts the reads by read_uncommitted readers
	// of writes of aborted transactions: allowed, shown (struck through on
	// the live page).
	AbortedSeenUncommitted int64 `json:"aborted_seen_uncommitted"`
	// Effects counts the external effects applied; ExternalDuplicates those
	// beyond the first of their input event.
	Effects            int64 `json:"effects"`
	ExternalDuplicates int64 `json:"external_duplicates"`
	// HungLSOAfter is the hung-lso threshold, in seconds; LongestLSOHang
	// the longest stretch found, whatever its length (nil without lso lines
	// at a stretch).
	HungLSOAfter   float64  `json:"hung_lso_after_seconds"`
	LongestLSOHang *LSOHang `json:"longest_lso_hang,omitempty"`
}

// LSOHang is one stretch of a read_committed reader at one LSO while later
// offsets existed.
type LSOHang struct {
	Reader    string    `json:"reader"`
	Topic     string    `json:"topic"`
	Partition int32     `json:"partition"`
	LSO       int64     `json:"lso"`
	MaxHW     int64     `json:"max_hw"`
	From      time.Time `json:"from"`
	To        time.Time `json:"to"`
	Seconds   float64   `json:"seconds"`
	// Moved is false when the last observation still showed the LSO there
	// with later offsets; Caught is true when the stretch ended with
	// nothing above the LSO rather than with the LSO moving.
	Moved  bool `json:"moved"`
	Caught bool `json:"caught_up,omitempty"`
}

// tloc is a position in one of the topics of a transactional history.
type tloc struct {
	topic string
	p     int32
	off   int64
}

// String names the position; without a topic (a single-topic history),
// as the other kinds do.
func (l tloc) String() string {
	if l.topic == "" {
		return fmt.Sprintf("partition %d offset %d", l.p, l.off)
	}
	return fmt.Sprintf("topic %s partition %d offset %d", l.topic, l.p, l.off)
}

// txnOutcome is what the histories say a transaction became.
type txnOutcome int

const (
	// aborted: no end line of outcome commit at all, so never asked to
	// commit (whether an abort was answered or the process died first).
	aborted txnOutcome = iota
	// unknown: asked to commit, no ok answer, and none of its writes read
	// by a read_committed reader.
	unknown
	// committed: commit answered ok, or asked to commit and a write read
	// by a read_committed reader.
	committed
)

// txnState is one transaction of the histories.
type txnState struct {
	id      string
	process string
	tid     string
	begin   *TxnLine // its begin line, nil without one
	// asked is the first end line of outcome commit, nil without one.
	asked     *TxnLine
	sends     []TxnLine
	ends      []TxnLine
	steps     []TxnLine
	outcome   txnOutcome
	why       string // how the outcome is known, for details
	commitOK  bool
	askCommit bool
}

func (t *txnState) label() string {
	switch t.outcome {
	case committed:
		return t.id + " (committed: " + t.why + ")"
	case unknown:
		return t.id + " (outcome unknown: " + t.why + ")"
	default:
		return t.id + " (aborted: " + t.why + ")"
	}
}

// txnRead is one read line with the level it was read at.
type txnRead struct {
	line      TxnLine
	at        tloc
	committed bool // read_committed
	writer    *txnState
}

// txnAnalysis is the transactional part of one Check.
type txnAnalysis struct {
	a       *analysis
	txns    map[string]*txnState
	order   []*txnState // in the order first named
	reads   []txnRead
	lsos    []TxnLine
	effects []TxnLine
	steps   int
	// writerAt: the transaction whose ok send has a known offset there.
	writerAt map[tloc]*txnState
	// writersOf: every transaction that sent an event_id, for reads at a
	// position no ok send names (an unknown offset).
	writersOf map[string][]*txnState
}

// txns loads the transactional histories and finds their anomalies; nil
// stats without any.
func (a *analysis) txns() (*TxnStats, error) {
	if len(a.in.TxnHistories) == 0 {
		return nil, nil
	}
	t := &txnAnalysis{a: a, txns: map[string]*txnState{}, writerAt: map[tloc]*txnState{}, writersOf: map[string][]*txnState{}}
	if err := t.load(); err != nil {
		return nil, err
	}
	st := &TxnStats{Transactions: len(t.order), Steps: t.steps}
	t.resolve(st)
	for _, x := range t.order {
		switch x.outcome {
		case committed:
			st.Committed++
		case unknown:
			st.Unknown++
		default:
			st.Aborted++
		}
	}
	t.abortedReads()
	t.g1a()
	t.lostWrites()
	t.duplicates()
	t.g1c()
	t.zombieCommits()
	t.hungLSO(st)
	t.external(st)
	return st, nil
}

func (t *txnAnalysis) get(id, process string) *txnState {
	x := t.txns[id]
	if x == nil {
		x = &txnState{id: id, process: process}
		t.txns[id] = x
		t.order = append(t.order, x)
	}
	return x
}

// load reads every transactional history.
func (t *txnAnalysis) load() error {
	for _, path := range t.a.in.TxnHistories {
		lines, err := ReadTxnHistory(path)
		if err != nil {
			return fmt.Errorf("check: %w", err)
		}
		isolation := map[string]string{} // process -> level, in this file
		for i, l := range lines {
			switch l.Type {
			case TxnBegin:
				x := t.get(l.Txn, l.Process)
				x.tid = l.TransactionalID
				if x.begin == nil {
					x.begin = &lines[i]
				}
			case TxnSend:
				x := t.get(l.Txn, l.Process)
				x.sends = append(x.sends, l)
				if l.Status == SendOK && *l.Offset >= 0 {
					at := tloc{l.Topic, *l.Partition, *l.Offset}
					if w, ok := t.writerAt[at]; ok && w != x {
						return fmt.Errorf("check: transactional history %s: line %d: transactions %s and %s both acknowledged at %s", path, i+1, w.id, x.id, at)
					}
					t.writerAt[at] = x
				}
				if !slices.Contains(t.writersOf[l.EventID], x) {
					t.writersOf[l.EventID] = append(t.writersOf[l.EventID], x)
				}
			case TxnEnd:
				x := t.get(l.Txn, l.Process)
				x.ends = append(x.ends, l)
				if l.Outcome == OutcomeCommit {
					x.askCommit = true
					if x.asked == nil {
						x.asked = &lines[i]
					}
					x.commitOK = x.commitOK || l.Status == EndOK
				}
			case TxnStep:
				x := t.get(l.Txn, l.Process)
				x.steps = append(x.steps, l)
				t.steps++
			case TxnIsolation:
				isolation[l.Process] = l.Isolation
			case TxnRead:
				level, ok := isolation[l.Process]
				if !ok {
					return fmt.Errorf("check: transactional history %s: line %d: a read line of process %s before its isolation line", path, i+1, l.Process)
				}
				t.reads = append(t.reads, txnRead{line: l, at: tloc{l.Topic, *l.Partition, *l.Offset}, committed: level == ReadCommitted})
			case TxnLSO:
				t.lsos = append(t.lsos, l)
			case TxnEffect:
				t.effects = append(t.effects, l)
			}
		}
	}
	return nil
}

// writer is the transaction that wrote the record at at with eventID: the
// one acknowledged there, or else the only one that sent eventID without a
// known offset elsewhere; nil when none or ambiguous (or not a
// transactional write).
func (t *txnAnalysis) writer(at tloc, eventID string) *txnState {
	if w, ok := t.writerAt[at]; ok {
		return w
	}
	var found *txnState
	for _, x := range t.writersOf[eventID] {
		for _, s := range x.sends {
			if s.EventID != eventID || s.Topic != at.topic || *s.Partition != at.p {
				continue
			}
			if s.Status == SendOK && *s.Offset >= 0 {
				continue // acknowledged elsewhere: not this record
			}
			if found != nil && found != x {
				return nil // ambiguous
			}
			found = x
		}
	}
	return found
}

// resolve decides each transaction's outcome and each read's writer.
func (t *txnAnalysis) resolve(st *TxnStats) {
	for _, x := range t.order {
		switch {
		case x.commitOK:
			x.outcome, x.why = committed, "commit answered ok"
		case x.askCommit:
			x.outcome, x.why = unknown, "commit asked, no ok answer"
		default:
			x.outcome, x.why = aborted, "never asked to commit"
			for _, e := range x.ends {
				if e.Outcome == OutcomeAbort && e.Status == EndOK {
					x.why = "abort answered ok"
				}
			}
		}
	}
	for i := range t.reads {
		r := &t.reads[i]
		r.writer = t.writer(r.at, r.line.EventID)
		if r.committed {
			st.ReadCommitted++
		} else {
			st.ReadUncommitted++
		}
		if r.committed && r.writer != nil && r.writer.outcome == unknown {
			r.writer.outcome = committed
			r.writer.why = "commit asked, and read_committed reader " + r.line.Process + " read its " + r.line.EventID
		}
	}
	for _, r := range t.reads {
		if !r.committed && r.writer != nil && r.writer.outcome == aborted {
			st.AbortedSeenUncommitted++
		}
	}
}

// add records a transactional anomaly.
func (t *txnAnalysis) add(an Anomaly) { t.a.found[an.Kind].add(an) }

// abortedReads: a read_committed reader read a write of an aborted
// transaction.
func (t *txnAnalysis) abortedReads() {
	for _, r := range t.reads {
		if !r.committed || r.writer == nil || r.writer.outcome != aborted {
			continue
		}
		t.add(Anomaly{Kind: AbortedRead, Topic: r.at.topic, Partition: r.at.p, Offsets: []int64{r.at.off},
			EventIDs: []string{r.line.EventID}, Txns: []string{r.writer.id}, Consumer: r.line.Process,
			Detail: fmt.Sprintf("read_committed reader %s read %s at %s, written by transaction %s",
				r.line.Process, r.line.EventID, r.at, r.writer.label())})
	}
}

// eachCommittedInput calls fn with every input consumed by a step of a
// committed transaction, in the order the transactions were first named.
func (t *txnAnalysis) eachCommittedInput(fn func(x *txnState, step TxnLine, in TxnInput, at tloc)) {
	for _, x := range t.order {
		if x.outcome != committed {
			continue
		}
		for _, s := range x.steps {
			for _, in := range s.Inputs {
				fn(x, s, in, tloc{in.Topic, in.Partition, in.Offset})
			}
		}
	}
}

// g1a: a committed transaction consumed (as a read-process-write input) a
// write of an aborted transaction.
func (t *txnAnalysis) g1a() {
	t.eachCommittedInput(func(x *txnState, s TxnLine, in TxnInput, at tloc) {
		w := t.writer(at, in.EventID)
		if w == nil || w.outcome != aborted {
			return
		}
		t.add(Anomaly{Kind: G1a, Topic: at.topic, Partition: at.p, Offsets: []int64{at.off},
			EventIDs: []string{in.EventID}, Txns: []string{w.id, x.id}, Consumer: s.Process,
			Detail: fmt.Sprintf("transaction %s of %s consumed %s at %s, written by transaction %s",
				x.label(), s.Process, in.EventID, at, w.label())})
	})
}

// lostWrites: a committed transaction's acknowledged write no
// read_committed reader read, though one read a later offset of its
// partition.
func (t *txnAnalysis) lostWrites() {
	type tp struct {
		topic string
		p     int32
	}
	readAt := map[tloc]bool{}
	maxRead := map[tp]txnRead{}
	for _, r := range t.reads {
		if !r.committed {
			continue
		}
		readAt[r.at] = true
		k := tp{r.at.topic, r.at.p}
		if m, ok := maxRead[k]; !ok || r.at.off > m.at.off {
			maxRead[k] = r
		}
	}
	for _, x := range t.order {
		if x.outcome != committed {
			continue
		}
		for _, s := range x.sends {
			at := tloc{s.Topic, *s.Partition, *s.Offset}
			if s.Status != SendOK || at.off < 0 || readAt[at] {
				continue
			}
			m, ok := maxRead[tp{at.topic, at.p}]
			if !ok || m.at.off <= at.off {
				continue
			}
			t.add(Anomaly{Kind: LostWrite, Topic: at.topic, Partition: at.p, Offsets: []int64{at.off},
				EventIDs: []string{s.EventID}, Txns: []string{x.id},
				Detail: fmt.Sprintf("transaction %s wrote %s at %s; no read_committed reader read it, though %s read offset %d",
					x.label(), s.EventID, at, m.line.Process, m.at.off)})
		}
	}
}

// duplicates: an input processed into committed output by several
// transactions, and an event_id read by read_committed readers at several
// positions.
func (t *txnAnalysis) duplicates() {
	type use struct {
		x       *txnState
		process string
		eventID string
	}
	uses := map[tloc][]use{}
	t.eachCommittedInput(func(x *txnState, s TxnLine, in TxnInput, at tloc) {
		if !slices.ContainsFunc(uses[at], func(u use) bool { return u.x == x }) {
			uses[at] = append(uses[at], use{x, s.Process, in.EventID})
		}
	})
	for _, at := range slices.SortedFunc(maps.Keys(uses), compareTlocs) {
		us := uses[at]
		if len(us) < 2 {
			continue
		}
		an := Anomaly{Kind: Duplicate, Topic: at.topic, Partition: at.p, Offsets: []int64{at.off}, EventIDs: []string{us[0].eventID}}
		var parts []string
		for _, u := range us {
			an.Txns = append(an.Txns, u.x.id)
			parts = append(parts, fmt.Sprintf("%s by %s", u.x.label(), u.process))
		}
		an.Detail = fmt.Sprintf("input %s at %s was processed into committed output %d times: %s", us[0].eventID, at, len(us), strings.Join(parts, "; "))
		t.add(an)
	}

	positions := map[string][]txnRead{} // event_id -> the first read_committed read at each position
	for _, r := range t.reads {
		if !r.committed || slices.ContainsFunc(positions[r.line.EventID], func(o txnRead) bool { return o.at == r.at }) {
			continue
		}
		positions[r.line.EventID] = append(positions[r.line.EventID], r)
	}
	for _, id := range slices.Sorted(maps.Keys(positions)) {
		rs := positions[id]
		if len(rs) < 2 {
			continue
		}
		slices.SortFunc(rs, func(x, y txnRead) int { return compareTlocs(x.at, y.at) })
		an := Anomaly{Kind: Duplicate, Topic: rs[0].at.topic, Partition: rs[0].at.p, EventIDs: []string{id}}
		var parts []string
		for _, r := range rs {
			if r.at.p != an.Partition || r.at.topic != an.Topic {
				an.Topic, an.Partition = "", -1
			}
			an.Offsets = append(an.Offsets, r.at.off)
			who := "no transaction of the histories"
			if r.writer != nil {
				who = "transaction " + r.writer.label()
				if !slices.Contains(an.Txns, r.writer.id) {
					an.Txns = append(an.Txns, r.writer.id)
				}
			}
			parts = append(parts, fmt.Sprintf("%s (read by %s, written by %s)", r.at, r.line.Process, who))
		}
		an.Detail = fmt.Sprintf("read_committed readers read %s at %d positions: %s", id, len(rs), strings.Join(parts, "; "))
		t.add(an)
	}
}

func compareTlocs(x, y tloc) int {
	return cmp.Or(cmp.Compare(x.topic, y.topic), cmp.Compare(x.p, y.p), cmp.Compare(x.off, y.off))
}

// wrEdge is T2 consuming a write of T1 (T1 -wr-> T2).
type wrEdge struct {
	to      *txnState
	at      tloc
	eventID string
}

// g1c finds cycles of write-read dependencies between committed
// transactions: T1 -wr-> T2 when a step of T2 consumed a record T1 wrote.
// Write-write dependencies (offset order in a partition) are not edges:
// Kafka's transactions allow write cycles (G0) and interleaved writes of
// concurrent transactions, so a cycle through them proves nothing.
// Anti-dependencies (rw) cannot be derived from a log's histories.
func (t *txnAnalysis) g1c() {
	out := map[*txnState][]wrEdge{}
	t.eachCommittedInput(func(x *txnState, _ TxnLine, in TxnInput, at tloc) {
		w := t.writer(at, in.EventID)
		if w == nil || w.outcome != committed || slices.ContainsFunc(out[w], func(e wrEdge) bool { return e.to == x }) {
			return
		}
		out[w] = append(out[w], wrEdge{x, at, in.EventID})
	})
	// Tarjan's strongly connected components, in t.order for determinism.
	index, low := map[*txnState]int{}, map[*txnState]int{}
	onStack := map[*txnState]bool{}
	var stack []*txnState
	var comps [][]*txnState
	var visit func(v *txnState)
	visit = func(v *txnState) {
		index[v], low[v] = len(index), len(index)
		stack = append(stack, v)
		onStack[v] = true
		for _, e := range out[v] {
			if _, seen := index[e.to]; !seen {
				visit(e.to)
				low[v] = min(low[v], low[e.to])
			} else if onStack[e.to] {
				low[v] = min(low[v], index[e.to])
			}
		}
		if low[v] != index[v] {
			return
		}
		var comp []*txnState
		for {
			w := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			onStack[w] = false
			comp = append(comp, w)
			if w == v {
				break
			}
		}
		comps = append(comps, comp)
	}
	for _, x := range t.order {
		if _, seen := index[x]; !seen {
			visit(x)
		}
	}
	for _, comp := range comps {
		if len(comp) == 1 && !slices.ContainsFunc(out[comp[0]], func(e wrEdge) bool { return e.to == comp[0] }) {
			continue
		}
		cycle := findCycle(comp, out)
		an := Anomaly{Kind: G1c, Partition: -1}
		var parts []string
		for i, e := range cycle {
			from := cycle[(i+len(cycle)-1)%len(cycle)].to
			an.Txns = append(an.Txns, from.id)
			an.EventIDs = append(an.EventIDs, e.eventID)
			parts = append(parts, fmt.Sprintf("%s -wr-> %s (consumed %s at %s)", from.id, e.to.id, e.eventID, e.at))
		}
		an.Detail = fmt.Sprintf("a cycle of %d write-read dependencies between committed transactions: %s", len(cycle), strings.Join(parts, "; "))
		t.add(an)
	}
}

// findCycle returns the edges of one cycle inside the strongly connected
// component comp (one with a cycle): a breadth-first search from its
// first-named member back to itself. The result's edges follow each other,
// the last one ending at the first one's source.
func findCycle(comp []*txnState, out map[*txnState][]wrEdge) []wrEdge {
	in := map[*txnState]bool{}
	for _, x := range comp {
		in[x] = true
	}
	start := comp[0]
	for _, x := range comp {
		if x.id < start.id {
			start = x
		}
	}
	via := map[*txnState]wrEdge{}     // how each reached node was reached
	from := map[*txnState]*txnState{} // its predecessor
	queue := []*txnState{start}
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		for _, e := range out[v] {
			if !in[e.to] {
				continue
			}
			if e.to == start {
				cycle := []wrEdge{e}
				for u := v; u != start; u = from[u] {
					cycle = append(cycle, via[u])
				}
				slices.Reverse(cycle)
				return cycle
			}
			if _, seen := via[e.to]; !seen {
				via[e.to], from[e.to] = e, v
				queue = append(queue, e.to)
			}
		}
	}
	return nil // not reached for a component with a cycle
}

// zombieCommits: a committed transaction of transactional id T at epoch
// e whose commit was asked (its first end line of outcome commit) after a
// transaction of T at a higher epoch had begun (its begin line, written
// once InitProducerId answered): the successor's InitProducerId fenced e,
// so that EndTxn must have failed. A commit asked before the successor
// began is not judged, whenever its answer arrived: the coordinator may
// have finished it first. Times are the lines' at, one host's clock.
func (t *txnAnalysis) zombieCommits() {
	for _, x := range t.order {
		if x.outcome != committed || x.asked == nil || x.asked.At.IsZero() || x.begin == nil || x.begin.Epoch == nil || x.tid == "" {
			continue
		}
		for _, y := range t.order {
			b := y.begin
			if y == x || y.tid != x.tid || b == nil || b.Epoch == nil || *b.Epoch <= *x.begin.Epoch || b.At.IsZero() || !b.At.Before(x.asked.At) {
				continue
			}
			t.add(Anomaly{Kind: ZombieCommit, Partition: -1, Txns: []string{x.id, y.id}, Consumer: x.process,
				Detail: fmt.Sprintf("transaction %s of %s (transactional id %s, epoch %d) asked to commit at %s, after %s began %s at epoch %d (%s): a fenced producer committed",
					x.label(), x.process, x.tid, *x.begin.Epoch, fmtAt(x.asked.At), y.process, y.id, *b.Epoch, fmtAt(b.At))})
			break
		}
	}
}

// hungLSO finds, per read_committed reader and partition, the stretches of
// lso observations at one LSO with the high watermark above it.
func (t *txnAnalysis) hungLSO(st *TxnStats) {
	after := t.a.in.HungLSOAfter
	if after <= 0 {
		after = DefaultHungLSOAfter
	}
	st.HungLSOAfter = after.Seconds()
	type key struct {
		reader, topic string
		p             int32
	}
	series := map[key][]TxnLine{}
	var keys []key
	for _, l := range t.lsos {
		k := key{l.Process, l.Topic, *l.Partition}
		if _, ok := series[k]; !ok {
			keys = append(keys, k)
		}
		series[k] = append(series[k], l)
	}
	for _, k := range keys {
		ls := series[k]
		slices.SortStableFunc(ls, func(x, y TxnLine) int { return x.At.Compare(y.At) })
		for i := 0; i < len(ls); {
			if *ls[i].HW <= *ls[i].LSO {
				i++
				continue
			}
			j, maxHW := i, *ls[i].HW
			for j+1 < len(ls) && *ls[j+1].LSO == *ls[i].LSO && *ls[j+1].HW > *ls[i].LSO {
				j++
				maxHW = max(maxHW, *ls[j].HW)
			}
			h := LSOHang{Reader: k.reader, Topic: k.topic, Partition: k.p, LSO: *ls[i].LSO, MaxHW: maxHW, From: ls[i].At, To: ls[j].At}
			if j+1 < len(ls) {
				h.To, h.Moved, h.Caught = ls[j+1].At, true, *ls[j+1].LSO == h.LSO
			}
			h.Seconds = h.To.Sub(h.From).Seconds()
			if st.LongestLSOHang == nil || h.Seconds > st.LongestLSOHang.Seconds {
				st.LongestLSOHang = &h
			}
			if h.To.Sub(h.From) >= after {
				t.addHang(h)
			}
			i = j + 1
		}
	}
}

func (t *txnAnalysis) addHang(h LSOHang) {
	an := Anomaly{Kind: HungLSO, Topic: h.Topic, Partition: h.Partition, Offsets: []int64{h.LSO}, Consumer: h.Reader}
	holder := ""
	if w, ok := t.writerAt[tloc{h.Topic, h.Partition, h.LSO}]; ok {
		an.Txns = []string{w.id}
		holder = fmt.Sprintf("; offset %d was written by transaction %s", h.LSO, w.label())
	}
	end := "until it moved at " + fmtAt(h.To)
	switch {
	case h.Caught:
		end = "until nothing was above it at " + fmtAt(h.To)
	case !h.Moved:
		end = "still there at the last observation, " + fmtAt(h.To)
	}
	an.Detail = fmt.Sprintf("read_committed reader %s stayed at LSO %d of %s for %.1f s (from %s, %s) while the high watermark was up to %d%s",
		h.Reader, h.LSO, strings.TrimSuffix(tloc{h.Topic, h.Partition, 0}.String(), " offset 0"), h.Seconds, fmtAt(h.From), end, h.MaxHW, holder)
	t.add(an)
}

func fmtAt(at time.Time) string { return at.UTC().Format("15:04:05.000") }

// external counts effects applied more than once per sink and input event.
func (t *txnAnalysis) external(st *TxnStats) {
	type key struct{ sink, id string }
	count := map[key]int{}
	var keys []key
	for _, e := range t.effects {
		k := key{e.Process, e.InputEventID}
		if count[k] == 0 {
			keys = append(keys, k)
		}
		count[k]++
		st.Effects++
	}
	for _, k := range keys {
		n := count[k]
		if n < 2 {
			continue
		}
		st.ExternalDuplicates += int64(n - 1)
		an := Anomaly{Kind: ExternalDuplicate, Partition: -1, EventIDs: []string{k.id}, Consumer: k.sink}
		var by []string
		for _, x := range t.order {
			if slices.ContainsFunc(x.steps, func(s TxnLine) bool {
				return slices.ContainsFunc(s.Inputs, func(in TxnInput) bool { return in.EventID == k.id })
			}) {
				an.Txns = append(an.Txns, x.id)
				by = append(by, x.label())
			}
		}
		processed := ""
		if len(by) > 0 {
			processed = "; processed by transactions " + strings.Join(by, ", ")
		}
		an.Detail = fmt.Sprintf("external sink %s applied the effect of input %s %d times%s (not a log anomaly: the transaction does not cover the sink)",
			k.sink, k.id, n, processed)
		t.add(an)
	}
}
