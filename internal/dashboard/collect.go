package dashboard

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/tapes-dev/tapes/internal/client"
	"github.com/tapes-dev/tapes/internal/clitext"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/launch"
	"github.com/tapes-dev/tapes/internal/sink"
)

// What the page shows of the logs.
const (
	// RecordsPerTape is how many records below the high watermark each
	// partition's tape carries.
	RecordsPerTape = 60
	// ValueChars is how much of a record's value the tape carries.
	ValueChars = 48
	// EffectsShown is how many of the sink's last effects the state
	// carries.
	EffectsShown = 80
	// verifyChunk bounds the offsets the lost detector reads back per
	// partition and poll.
	verifyChunk = 5000
)

// Per-call timeouts of the reads: a paused broker must delay one part of
// one poll, never the whole page.
const (
	brokerTimeout = 800 * time.Millisecond
	fetchTimeout  = time.Second
	groupsTimeout = 1500 * time.Millisecond
	statusTimeout = 400 * time.Millisecond
	sinkInterval  = 200 * time.Millisecond
	runsInterval  = time.Second
)

// collector is the real source: background loops read the cluster, the
// client processes, the sink and the histories, each at its own pace, and
// snapshot assembles the latest of each part.
type collector struct {
	c        *launch.Cluster
	cl       *client.Client
	log      *slog.Logger
	interval time.Duration
	// watched says whether a page is open (set by the Server before run).
	watched func() bool
	started time.Time

	lost   *lostDetector
	follow *sink.Follower
	runs   *runner
	procs  *processes

	mu sync.Mutex
	// views is what each broker last answered; md merges them (asOf: the
	// oldest of the reads it merged started then).
	views     map[int32]*brokerView
	md        *tapesv1.MetadataResponse
	mdAsOf    time.Time
	ends      map[partKey]map[int32]int64 // replica -> broker -> log end
	tapes     map[partKey]*tape
	groups    []Group
	groupText string
	// lastGroups keeps each group's last description, for a poll where
	// its coordinator does not answer.
	lastGroups map[string]groupRead
	stamps     map[stampKey]int64 // record timestamps by offset (records below the HW never change)
	effects    []Effect
	stats      *sink.Stats

	// Owned by the sink loop.
	hists     map[string]*history
	firstHist bool // the first pass over the histories is done
}

// brokerView is one broker's answers: its metadata (without offsets: its
// own view of leaders, ISR, topics) and its replicas' state.
type brokerView struct {
	at       time.Time // when the reads started
	md       *tapesv1.MetadataResponse
	replicas []*tapesv1.ReplicaStatus
}

// groupRead is one group as last read.
type groupRead struct {
	group Group
	text  string
	at    time.Time
}

// tape is what was read of one partition's log.
type tape struct {
	hw, logStart int64
	records      []Record
	ok           bool
	// lso is the last stable offset the read saw; lsoSince when it was
	// first seen at that value below the high watermark (zero otherwise).
	lso      int64
	lsoSince time.Time
	readers  []TapeReader
}

type stampKey struct {
	tp  partKey
	off int64
}

func newCollector(cfg Config, log *slog.Logger) *collector {
	c := &collector{
		c: cfg.Cluster, cl: cfg.Client, log: log, interval: cfg.PollInterval, started: time.Now(),
		lost:       newLostDetector(),
		follow:     sink.NewFollower(filepath.Join(cfg.Cluster.Dir(), "sink.db")),
		views:      map[int32]*brokerView{},
		ends:       map[partKey]map[int32]int64{},
		tapes:      map[partKey]*tape{},
		lastGroups: map[string]groupRead{},
		stamps:     map[stampKey]int64{},
		hists:      map[string]*history{},
	}
	c.procs = newProcesses(cfg.Cluster, log)
	c.runs = newRunner(filepath.Join(cfg.Cluster.Dir(), "runs"), cfg.Chaos, log)
	return c
}

// idleInterval is how often the cluster is read while no page is open:
// the timeline keeps recording (a page opened later gets the last
// entries), at a tenth of the cost.
const idleInterval = time.Second

// every runs f now and then every d until ctx ends (a slow f delays its
// own next run, nothing else).
func every(ctx context.Context, d time.Duration, f func(context.Context)) {
	everyOf(ctx, func() time.Duration { return d }, f)
}

// everyOf is every with a period that may change between runs.
func everyOf(ctx context.Context, d func() time.Duration, f func(context.Context)) {
	t := time.NewTimer(d())
	defer t.Stop()
	for {
		f(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			t.Reset(d())
		}
	}
}

// period is how often the cluster is read: the poll interval while a page
// watches (c.watched), idleInterval otherwise.
func (c *collector) period() time.Duration {
	if c.watched == nil || c.watched() {
		return c.interval
	}
	return max(c.interval, idleInterval)
}

func (c *collector) run(ctx context.Context, emit func(...Entry)) {
	var wg sync.WaitGroup
	// One reader per broker, for those of the start and, from the next
	// round on, those `cluster brokers add` starts later.
	reading := map[int32]bool{}
	readers := func(context.Context) {
		for _, id := range c.brokerIDs() {
			if !reading[id] {
				reading[id] = true
				wg.Go(func() { everyOf(ctx, c.period, func(ctx context.Context) { c.readBroker(ctx, id) }) })
			}
		}
	}
	readers(ctx)
	wg.Go(func() { everyOf(ctx, c.period, readers) })
	wg.Go(func() { everyOf(ctx, c.period, func(context.Context) { c.merge() }) })
	wg.Go(func() { everyOf(ctx, c.period, func(ctx context.Context) { c.readTapes(ctx, emit) }) })
	wg.Go(func() { everyOf(ctx, c.period, c.readGroups) })
	wg.Go(func() { everyOf(ctx, c.period, c.procs.poll) })
	wg.Go(func() { every(ctx, sinkInterval, func(ctx context.Context) { c.readSink(ctx, emit) }) })
	wg.Go(func() { every(ctx, runsInterval, func(context.Context) { c.runs.scan() }) })
	c.runs.run(ctx, emit)
	wg.Wait()
	c.procs.close()
	c.follow.Close()
}

func (c *collector) metadata() *tapesv1.MetadataResponse {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.md
}

// brokerIDs are the launcher's brokers.
func (c *collector) brokerIDs() []int32 {
	var ids []int32
	for _, name := range c.c.Names() {
		if p, ok := c.c.Process(name); ok && p.Kind == "broker" {
			ids = append(ids, p.ID)
		}
	}
	return ids
}

// readBroker asks one broker for its metadata (its own view, without
// offsets: no fan-out to its peers, which a cut link would hold) and its
// replicas' state. Each broker is read by its own loop, directly (the
// observer is never faulted), so that a paused or isolated broker delays
// nobody's view but its own. A broker that refuses (dead) shows nothing; one
// that does not answer in time (paused) keeps its last answer: its log
// does not move either.
func (c *collector) readBroker(ctx context.Context, id int32) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, brokerTimeout)
	defer cancel()
	var (
		md   *tapesv1.MetadataResponse
		reps *tapesv1.DescribeReplicasResponse
		err  error
	)
	bc, err := c.cl.Broker(ctx, id)
	if err == nil {
		md, err = bc.Metadata(ctx, &tapesv1.MetadataRequest{})
	}
	if err == nil {
		reps, err = c.cl.DescribeReplicas(ctx, id)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err == nil:
		c.views[id] = &brokerView{at: start, md: md, replicas: reps.GetReplicas()}
	case ctx.Err() != nil:
		// Paused, or just slow: keep what it said last.
	default:
		delete(c.views, id)
	}
}

// merge combines the brokers' views into one metadata answer, as a broker
// answering Metadata with offsets does (internal/broker fillOffsets): per
// partition the view with the highest leader epoch, then the high
// watermark, log start and ISR of its ready leader (a replica that leads
// with an ISR), the highest term winning. An isolated old leader that
// still believes it leads loses to the one the others elected. The
// controller is the one most brokers name.
func (c *collector) merge() {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := make([]int32, 0, len(c.views))
	for id := range c.views {
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return
	}
	slices.Sort(ids)
	out := &tapesv1.MetadataResponse{ControllerId: -1}
	asOf := time.Time{}
	votes := map[int32]int{}
	topics := map[string]*tapesv1.TopicMetadata{}
	parts := map[partKey]*tapesv1.PartitionMetadata{}
	ends := map[partKey]map[int32]int64{}
	now := time.Now()
	for _, id := range ids {
		v := c.views[id]
		// A paused broker's last answer stays, but does not hold back
		// how recent the merged view is.
		if now.Sub(v.at) < time.Second && (asOf.IsZero() || v.at.Before(asOf)) {
			asOf = v.at
		}
		if v.md.GetControllerId() >= 0 {
			votes[v.md.GetControllerId()]++
		}
		if len(out.Brokers) == 0 {
			out.Brokers = v.md.GetBrokers()
		}
		for _, t := range v.md.GetTopics() {
			tm := topics[t.GetName()]
			if tm == nil || tm.GetError() != nil && t.GetError() == nil {
				tm = &tapesv1.TopicMetadata{Name: t.GetName(), TopicId: t.GetTopicId(), Configs: t.GetConfigs(), Error: t.GetError()}
				topics[t.GetName()] = tm
			}
			for _, p := range t.GetPartitions() {
				k := partKey{t.GetName(), p.GetPartition()}
				if old := parts[k]; old == nil || p.GetLeaderEpoch() > old.GetLeaderEpoch() {
					pm := &tapesv1.PartitionMetadata{Partition: p.GetPartition(), LeaderId: p.GetLeaderId(), LeaderEpoch: p.GetLeaderEpoch(),
						Replicas: p.GetReplicas(), Isr: p.GetIsr(), HighWatermark: -1, LogStartOffset: -1, LogEndOffset: -1, Error: p.GetError()}
					parts[k] = pm
				}
			}
		}
		for _, r := range v.replicas {
			k := partKey{r.GetTopic(), r.GetPartition()}
			if ends[k] == nil {
				ends[k] = map[int32]int64{}
			}
			ends[k][r.GetBrokerId()] = r.GetLogEndOffset()
		}
	}
	for _, id := range ids {
		for _, r := range c.views[id].replicas {
			pm := parts[partKey{r.GetTopic(), r.GetPartition()}]
			if pm == nil || len(r.GetIsr()) == 0 || r.GetTerm() < pm.GetLeaderEpoch() || r.GetTerm() == pm.GetLeaderEpoch() && pm.GetHighWatermark() >= 0 {
				continue // not a ready leader, or an older one
			}
			pm.LeaderId, pm.LeaderEpoch, pm.Isr = r.GetBrokerId(), r.GetTerm(), r.GetIsr()
			pm.HighWatermark, pm.LogStartOffset, pm.LogEndOffset = r.GetHighWatermark(), r.GetLogStartOffset(), r.GetLogEndOffset()
			pm.Error = nil
		}
	}
	for k, pm := range parts {
		tm := topics[k.topic]
		tm.Partitions = append(tm.Partitions, pm)
	}
	for _, tm := range topics {
		sort.Slice(tm.Partitions, func(i, j int) bool { return tm.Partitions[i].GetPartition() < tm.Partitions[j].GetPartition() })
		out.Topics = append(out.Topics, tm)
	}
	sort.Slice(out.Topics, func(i, j int) bool { return out.Topics[i].GetName() < out.Topics[j].GetName() })
	best := 0
	for id, n := range votes {
		if n > best || n == best && id < out.ControllerId {
			out.ControllerId, best = id, n
		}
	}
	c.md, c.mdAsOf, c.ends = out, asOf, ends
}

// metadataAfter waits (up to maxWait) for merged metadata whose reads
// (of the brokers that answer) all started after t, and returns the latest
// either way.
func (c *collector) metadataAfter(ctx context.Context, t time.Time, maxWait time.Duration) *tapesv1.MetadataResponse {
	deadline := time.Now().Add(maxWait)
	for {
		c.mu.Lock()
		md, asOf := c.md, c.mdAsOf
		c.mu.Unlock()
		if asOf.After(t) || time.Now().After(deadline) || ctx.Err() != nil {
			return md
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// internalTopic: __consumer_offsets and the like, left off the tapes.
func internalTopic(name string) bool { return strings.HasPrefix(name, "__") }

// readTapes reads the last records of every partition whose high
// watermark or log start moved, and checks acknowledged acks=1 records
// against what is now committed.
func (c *collector) readTapes(ctx context.Context, emit func(...Entry)) {
	md := c.metadata()
	if md == nil {
		return
	}
	var wg sync.WaitGroup
	for _, t := range md.GetTopics() {
		if internalTopic(t.GetName()) || t.GetError() != nil && len(t.GetPartitions()) == 0 {
			continue
		}
		for _, p := range t.GetPartitions() {
			tp := partKey{t.GetName(), p.GetPartition()}
			hw, start := p.GetHighWatermark(), p.GetLogStartOffset()
			if hw < 0 || start < 0 {
				continue // the leader did not report its offsets
			}
			wg.Go(func() {
				c.readTape(ctx, tp, hw, start)
				c.verify(ctx, tp, hw, start, emit)
			})
		}
	}
	wg.Wait()
}

func (c *collector) readTape(ctx context.Context, tp partKey, hw, start int64) {
	c.mu.Lock()
	old := c.tapes[tp]
	c.mu.Unlock()
	if old != nil && old.ok && old.hw == hw && old.logStart == start {
		return
	}
	from := max(start, hw-RecordsPerTape)
	t := &tape{hw: hw, logStart: start, ok: true, records: []Record{}, lso: hw, readers: []TapeReader{}}
	if from < hw {
		fctx, cancel := context.WithTimeout(ctx, fetchTimeout)
		ru, err := c.readRange(fctx, tp, from, hw, readUncommitted)
		rc := ru // without transactions in the window the isolation levels read the same
		if err == nil && (ru.lso < hw || len(ru.markers) > 0 || len(ru.aborted) > 0 || slices.ContainsFunc(ru.recs, (*tapesv1.Record).GetTransactional)) {
			rc, err = c.readRange(fctx, tp, from, hw, readCommitted)
		}
		cancel()
		if err != nil {
			c.log.Debug("dashboard: read tape", "partition", tp.String(), "err", err)
			if old != nil {
				old.ok = false // try again next poll
			}
			return
		}
		t.records, t.readers = tapeRecords(ru, rc)
		t.lso = min(ru.lso, hw)
	}
	if t.lso < hw {
		t.lsoSince = time.Now()
		if old != nil && old.lso == t.lso && !old.lsoSince.IsZero() {
			t.lsoSince = old.lsoSince
		}
	}
	c.mu.Lock()
	c.tapes[tp] = t
	c.mu.Unlock()
}

// Fetch isolation levels (tapesv1.FetchRequest.isolation_level).
const (
	readUncommitted int32 = 0
	readCommitted   int32 = 1
)

// rangeRead is what readRange read: the records, the transaction markers
// and the aborted transactions the fetches listed, the offset after the
// last record read (reached) and the last stable offset the last fetch
// answered (-1 when none answered).
type rangeRead struct {
	recs    []*tapesv1.Record
	markers []*tapesv1.FetchTransactionMarker
	aborted []*tapesv1.FetchAbortedTransaction
	reached int64
	lso     int64
}

// readRange reads the records of [from, to) (to at most the high
// watermark) at an isolation level, as far as a few fetches get.
func (c *collector) readRange(ctx context.Context, tp partKey, from, to int64, isolation int32) (rangeRead, error) {
	rr := rangeRead{reached: from, lso: -1}
	seen := map[[2]int64]bool{}
	for i := 0; i < 16 && rr.reached < to; i++ {
		resp, err := c.cl.Fetch(ctx, &tapesv1.FetchRequest{Topic: tp.topic, Partition: tp.p, Offset: rr.reached, MaxBytes: 1 << 20, IsolationLevel: isolation})
		if err != nil {
			return rr, err
		}
		rr.lso = resp.GetLastStableOffset()
		next := min(client.NextOffset(resp, rr.reached), max(to, rr.reached))
		for _, r := range resp.GetRecords() {
			if r.GetOffset() >= rr.reached && r.GetOffset() < to {
				rr.recs = append(rr.recs, r)
			}
		}
		for _, m := range resp.GetMarkers() {
			if m.GetOffset() >= rr.reached && m.GetOffset() < to {
				rr.markers = append(rr.markers, m)
			}
		}
		for _, a := range resp.GetAbortedTransactions() {
			if k := [2]int64{a.GetProducerId(), a.GetFirstOffset()}; !seen[k] {
				seen[k] = true
				rr.aborted = append(rr.aborted, a)
			}
		}
		if next == rr.reached {
			break // nothing more to read
		}
		rr.reached = next
	}
	return rr, nil
}

// tapeRecords are a tape's cells from its read_uncommitted read (ru):
// the records, each transactional one marked with its transaction's
// outcome, and the markers as cells of their own, in offset order; and
// the two readers, ru and the read_committed read rc of the same window.
func tapeRecords(ru, rc rangeRead) ([]Record, []TapeReader) {
	out := make([]Record, 0, len(ru.recs)+len(ru.markers))
	uncommitted := TapeReader{Isolation: "read_uncommitted", Position: ru.reached, Records: int64(len(ru.recs))}
	ms := ru.markers
	for _, r := range ru.recs {
		for len(ms) > 0 && ms[0].GetOffset() < r.GetOffset() {
			out = append(out, markerRecord(ms[0]))
			ms = ms[1:]
		}
		rec := toRecord(r)
		if r.GetTransactional() {
			rec.ProducerID = r.GetProducerId()
			rec.Txn = txnOutcome(r, ru.aborted, ms)
			if rec.Txn == "aborted" {
				uncommitted.Aborted++
			}
		}
		out = append(out, rec)
	}
	for _, m := range ms {
		out = append(out, markerRecord(m))
	}
	committed := TapeReader{Isolation: "read_committed", Position: rc.reached, Records: int64(len(rc.recs))}
	if rc.lso >= 0 {
		committed.Position = min(rc.reached, rc.lso) // a window that starts above the LSO: the reader waits at the LSO
	}
	return out, []TapeReader{uncommitted, committed}
}

// txnOutcome is a transactional record's transaction: "aborted" when the
// fetch listed it among the aborted transactions (Kafka's rule: its
// producer's, at or after the first offset and before the abort marker),
// else as the next marker of its producer says (later: the markers after
// r, in offset order), "open" while there is none.
func txnOutcome(r *tapesv1.Record, aborted []*tapesv1.FetchAbortedTransaction, later []*tapesv1.FetchTransactionMarker) string {
	for _, a := range aborted {
		if a.GetProducerId() == r.GetProducerId() && a.GetFirstOffset() <= r.GetOffset() && r.GetOffset() < a.GetLastOffset() {
			return "aborted"
		}
	}
	for _, m := range later {
		if m.GetProducerId() == r.GetProducerId() {
			if m.GetCommit() {
				return "committed"
			}
			return "aborted"
		}
	}
	return "open"
}

func markerRecord(m *tapesv1.FetchTransactionMarker) Record {
	out := Record{Offset: m.GetOffset(), Control: "abort", ProducerID: m.GetProducerId()}
	if m.GetCommit() {
		out.Control = "commit"
	}
	return out
}

func toRecord(r *tapesv1.Record) Record {
	out := Record{Offset: r.GetOffset(), Timestamp: r.GetTimestampMs(), EventID: header(r, "event_id")}
	if r.Key != nil {
		k := strings.ToValidUTF8(string(r.GetKey()), "\uFFFD")
		out.Key = &k
	}
	out.Value = cut(strings.ToValidUTF8(string(r.GetValue()), "\uFFFD"), ValueChars)
	return out
}

func header(r *tapesv1.Record, key string) string {
	for _, h := range r.GetHeaders() {
		if h.GetKey() == key {
			return string(h.GetValue())
		}
	}
	return ""
}

// cut shortens s to n characters, marking the cut with "…".
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// verify checks the acks=1 records acknowledged on tp that are now below
// the high watermark: an offset holding another event_id, or nothing, is
// a lost write.
func (c *collector) verify(ctx context.Context, tp partKey, hw, start int64, emit func(...Entry)) {
	from, ok := c.lost.due(tp, start, hw)
	if !ok {
		return
	}
	to := min(hw, from+verifyChunk)
	fctx, cancel := context.WithTimeout(ctx, 2*fetchTimeout)
	rr, err := c.readRange(fctx, tp, from, to, readUncommitted)
	cancel()
	recs, reached := rr.recs, rr.reached
	if err != nil && reached == from {
		return
	}
	log := make(map[int64]string, len(recs))
	for _, r := range recs {
		log[r.GetOffset()] = header(r, "event_id")
	}
	if err == nil && reached < to && len(recs) == 0 {
		reached = to // the fetches found nothing at all in [from, to)
	}
	if lost := c.lost.check(tp, log, from, reached); len(lost) > 0 {
		emit(Entry{At: time.Now().UTC(), Kind: KindLost, Text: lostText(tp, lost)})
	}
}

// timestamp returns the timestamp of the record at off, from the tapes,
// the cache, or one small fetch.
func (c *collector) timestamp(ctx context.Context, tp partKey, off int64) (int64, bool) {
	c.mu.Lock()
	if ts, ok := c.stamps[stampKey{tp, off}]; ok {
		c.mu.Unlock()
		return ts, true
	}
	if t := c.tapes[tp]; t != nil {
		for _, r := range t.records {
			if r.Offset == off && r.Control == "" {
				c.mu.Unlock()
				return r.Timestamp, true
			}
		}
	}
	c.mu.Unlock()
	fctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	resp, err := c.cl.Fetch(fctx, &tapesv1.FetchRequest{Topic: tp.topic, Partition: tp.p, Offset: off, MaxBytes: 1})
	if err != nil {
		return 0, false
	}
	for _, r := range resp.GetRecords() {
		if r.GetOffset() >= off {
			c.mu.Lock()
			if len(c.stamps) > 10000 {
				clear(c.stamps)
			}
			c.stamps[stampKey{tp, off}] = r.GetTimestampMs()
			c.mu.Unlock()
			return r.GetTimestampMs(), true
		}
	}
	return 0, false
}

// groupKeep is how long a group whose coordinator stopped answering is
// still shown as last read.
const groupKeep = 10 * time.Second

// readGroups describes every group: the snapshot's groups and the text of
// `cluster groups describe` for each. As the CLI does, the log ends come
// from metadata read after the committed offsets, so that no committed
// offset is past its log end.
func (c *collector) readGroups(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, groupsTimeout)
	defer cancel()
	listed, err := c.cl.ListGroups(ctx)
	if err != nil && len(listed) == 0 {
		c.log.Debug("dashboard: list groups", "err", err)
	}
	now := time.Now()
	c.mu.Lock()
	names := []string{}
	for name, g := range c.lastGroups {
		if now.Sub(g.at) < groupKeep && err != nil {
			names = append(names, name) // its coordinator may be the broker that did not answer
		}
	}
	c.mu.Unlock()
	for _, g := range listed {
		if g.GetState() != clitext.GroupDead && !slices.Contains(names, g.GetGroupId()) {
			names = append(names, g.GetGroupId())
		}
	}
	sort.Strings(names)

	type described struct {
		d         *tapesv1.GroupDescription
		committed []*tapesv1.CommittedOffset
	}
	read := map[string]described{}
	for _, name := range names {
		d, err := c.cl.DescribeGroup(ctx, name)
		if err != nil || d.GetState() == clitext.GroupDead {
			continue
		}
		committed, err := c.cl.OffsetFetch(ctx, name, nil)
		if err != nil {
			continue
		}
		read[name] = described{d, committed}
	}
	md := c.metadataAfter(ctx, time.Now(), 500*time.Millisecond)

	var groups []Group
	var text strings.Builder
	for _, name := range names {
		var gr groupRead
		if r, ok := read[name]; ok {
			g := clitext.NewGroupOffsets(r.d, r.committed)
			if md != nil {
				g.AddMetadata(md.GetTopics())
			}
			rows := g.Rows()
			at := time.Now()
			for _, row := range rows {
				if cell, ok := row.LagTimeCell(); ok {
					row.LagTime = cell
				} else if ts, ok := c.timestamp(ctx, partKey{row.Topic, row.Partition}, row.OldestUnconsumed()); ok {
					row.LagTime = clitext.LagTime(at.Sub(time.UnixMilli(ts)))
				} else {
					row.LagTime = "?"
				}
			}
			var b bytes.Buffer
			clitext.WriteGroupOffsets(&b, name, rows)
			b.WriteString(clitext.GroupOffsetsNote(r.d))
			gr = groupRead{group: toGroup(r.d, r.committed, rows), text: b.String(), at: now}
		} else {
			c.mu.Lock()
			last, ok := c.lastGroups[name]
			c.mu.Unlock()
			if !ok || now.Sub(last.at) >= groupKeep {
				continue
			}
			gr = last
		}
		if text.Len() > 0 {
			text.WriteString("\n")
		}
		text.WriteString(gr.text)
		groups = append(groups, gr.group)
		c.mu.Lock()
		c.lastGroups[name] = gr
		c.mu.Unlock()
	}
	c.mu.Lock()
	c.groups, c.groupText = groups, text.String()
	c.mu.Unlock()
}

func toGroup(d *tapesv1.GroupDescription, committed []*tapesv1.CommittedOffset, rows []*clitext.GroupOffsetRow) Group {
	g := Group{Group: d.GetGroupId(), State: d.GetState(), Generation: d.GetGenerationId(), Assignor: d.GetProtocol(),
		Coordinator: d.GetCoordinatorId(), Members: []GroupMember{}, Committed: map[string]map[int32]int64{}}
	for _, m := range d.GetMembers() {
		gm := GroupMember{MemberID: m.GetMemberId(), ClientID: m.GetClientId(), Host: m.GetHost(),
			Partitions: []int32{}, Assignment: clitext.AssignmentCell(d, m)}
		owned, _ := clitext.MemberPartitions(d, m) // an undecodable assignment: no partitions, and the cell says so
		for _, tp := range owned {
			gm.Partitions = append(gm.Partitions, tp.GetPartitions()...)
		}
		slices.Sort(gm.Partitions)
		g.Members = append(g.Members, gm)
	}
	sort.Slice(g.Members, func(i, j int) bool { return g.Members[i].MemberID < g.Members[j].MemberID })
	for _, co := range committed {
		if co.GetOffset() < 0 {
			continue
		}
		if g.Committed[co.GetTopic()] == nil {
			g.Committed[co.GetTopic()] = map[int32]int64{}
		}
		g.Committed[co.GetTopic()][co.GetPartition()] = co.GetOffset()
	}
	// As `cluster sink stats --group`: from the committed offset, or the
	// log start where nothing is committed.
	for _, r := range rows {
		if r.LogEnd < 0 || r.LogStart < 0 {
			continue
		}
		from := r.LogStart
		if r.Current >= 0 {
			from = r.Current
		}
		g.TotalLag += max(0, r.LogEnd-from)
	}
	return g
}

// snapshot assembles the latest of every part.
func (c *collector) snapshot(now time.Time) (*Snapshot, []procState) {
	s := &Snapshot{Dir: c.c.Dir(), Brokers: []Broker{}, Topics: []Topic{}, Groups: []Group{}, Links: []Link{},
		Effects: []Effect{}, Experiments: experiments()}
	var procs []procState
	c.mu.Lock()
	md := c.md
	controller := int32(-1)
	if md != nil {
		controller = md.GetControllerId()
	}
	for _, name := range c.c.Names() {
		st, err := c.c.ProcessStatus(name)
		if err != nil {
			continue
		}
		procs = append(procs, procState{Name: name, Kind: st.Proc.Kind, State: st.State, PID: st.Proc.PID, LastExit: st.LastExit})
		if st.Proc.Kind == "broker" {
			s.Brokers = append(s.Brokers, Broker{ID: st.Proc.ID, Name: name, Address: st.Proc.Address, State: st.State,
				PID: st.Proc.PID, Controller: st.Proc.ID == controller, LastExit: st.LastExit})
		}
	}
	if md != nil {
		var text bytes.Buffer
		clitext.WriteTopics(&text, md.GetTopics())
		s.DescribeTopics = text.String()
		topics := slices.Clone(md.GetTopics())
		sort.Slice(topics, func(i, j int) bool { return topics[i].GetName() < topics[j].GetName() })
		for _, t := range topics {
			if internalTopic(t.GetName()) || t.GetError() != nil && len(t.GetPartitions()) == 0 {
				continue
			}
			s.Topics = append(s.Topics, c.topicLocked(t))
		}
	}
	s.Groups = append(s.Groups, c.groups...)
	s.DescribeGroups = c.groupText
	s.Effects = append(s.Effects, c.effects...)
	stats := c.stats
	c.mu.Unlock()

	links := c.c.Links()
	for _, l := range links {
		s.Links = append(s.Links, Link{From: l.From, To: l.To, Mode: l.Mode.String(),
			DelayMs: l.Delay.Milliseconds(), JitterMs: l.Jitter.Milliseconds()})
	}
	s.Producers, s.Consumers = c.procs.list(procs, now)
	s.KafkaClients = kafkaClients(c.c, procs, links)
	s.Sink = sinkCounters(stats, s.Groups, s.Consumers)
	s.Runs = c.runs.list()
	return s, procs
}

func (c *collector) topicLocked(t *tapesv1.TopicMetadata) Topic {
	out := Topic{Name: t.GetName(), Partitions: []Partition{}}
	parts := slices.Clone(t.GetPartitions())
	sort.Slice(parts, func(i, j int) bool { return parts[i].GetPartition() < parts[j].GetPartition() })
	for _, p := range parts {
		tp := partKey{t.GetName(), p.GetPartition()}
		pp := Partition{Partition: p.GetPartition(), Leader: p.GetLeaderId(), Epoch: p.GetLeaderEpoch(),
			Replicas: orEmpty(p.GetReplicas()), ISR: orEmpty(p.GetIsr()), LogStart: p.GetLogStartOffset(),
			HighWatermark: p.GetHighWatermark(), ReplicaEnds: map[int32]int64{}, Records: []Record{},
			Error: p.GetError().GetCode()}
		for id, end := range c.ends[tp] {
			pp.ReplicaEnds[id] = end
		}
		pp.LastStable, pp.Readers = -1, []TapeReader{}
		if tp, ok := c.tapes[tp]; ok {
			pp.Records, pp.LastStable, pp.LastStableLag, pp.Readers = tp.records, tp.lso, tp.hw-tp.lso, tp.readers
			if !tp.lsoSince.IsZero() {
				pp.LastStableSince = tp.lsoSince.UnixMilli()
			}
		}
		out.Partitions = append(out.Partitions, pp)
	}
	return out
}

func orEmpty(ids []int32) []int32 {
	if ids == nil {
		return []int32{}
	}
	return ids
}

// sinkCounters are the sink's counters plus, for the groups the
// launcher's consumers belong to, their lag, members and generation.
func sinkCounters(st *sink.Stats, groups []Group, consumers []Consumer) SinkCounters {
	var out SinkCounters
	if st != nil {
		out.Delivered, out.Duplicates, out.OutOfKeyOrder = ptr(st.Delivered), ptr(st.Duplicates), ptr(st.OutOfKeyOrder)
		if st.NeverProcessed != sink.Unknown {
			out.NeverProcessed = ptr(st.NeverProcessed)
		}
	}
	mine := map[string]bool{}
	for _, c := range consumers {
		if c.Group != "" {
			mine[c.Group] = true
		}
	}
	var lag, members, gen int64
	found := false
	for _, g := range groups {
		if !mine[g.Group] {
			continue
		}
		found = true
		lag += g.TotalLag
		members += int64(len(g.Members))
		gen = max(gen, int64(g.Generation))
	}
	if found {
		out.TotalLag, out.ActiveConsumers, out.Generation = ptr(lag), ptr(members), ptr(gen)
	}
	return out
}

func ptr[T any](v T) *T { return &v }
