package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tapes-dev/tapes/internal/consumer"
	"github.com/tapes-dev/tapes/internal/producer"
)

// history is the tail of one client process's history file,
// DIR/histories/NAME.jsonl.
type history struct {
	kind string // "producer" or "consumer"
	t    *tailer
}

// historyPath is where the page tells a process it starts to write its
// history.
func historyPath(dir, name string) string {
	return filepath.Join(dir, "histories", name+".jsonl")
}

// producerLine is what the page reads of a producer history line.
type producerLine struct {
	EventID   string     `json:"event_id"`
	Partition int32      `json:"partition"`
	Offset    int64      `json:"offset"`
	Acks      string     `json:"acks"`
	Status    string     `json:"status"`
	AckedAt   *time.Time `json:"acked_at"`
}

// readSink follows the sink file and the histories: the sink's counters
// and last effects; acknowledged records (for Never processed and the lost
// detector); rejected commits.
func (c *collector) readSink(ctx context.Context, emit func(...Entry)) {
	c.readHistories(emit)
	applied, err := c.follow.Poll(ctx, EffectsShown)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			c.log.Debug("dashboard: sink", "err", err)
		}
		return
	}
	st := c.follow.Stats()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stats = &st
	if len(applied) == 0 {
		return
	}
	for _, a := range applied {
		c.effects = append(c.effects, Effect{EventID: a.EventID, Key: a.Key, Partition: a.Partition, Offset: a.Offset,
			Consumer: a.Consumer, Duplicate: a.Duplicate, OutOfOrder: a.OutOfKeyOrder})
	}
	if n := len(c.effects) - EffectsShown; n > 0 {
		c.effects = append([]Effect(nil), c.effects[n:]...)
	}
}

// readHistories reads what the client processes appended to their
// histories. On the first pass, consumer histories an earlier run left are
// skipped (their rejected commits are old news); producer histories are
// read whole (their acknowledged records count for Never processed).
func (c *collector) readHistories(emit func(...Entry)) {
	dir := c.c.Dir()
	first := !c.firstHist
	c.firstHist = true
	var acked []string
	producers := false
	for _, name := range c.c.Names() {
		p, ok := c.c.Process(name)
		if !ok || p.Kind != "producer" && p.Kind != "consumer" {
			continue
		}
		h := c.hists[name]
		if h == nil {
			h = &history{kind: p.Kind, t: newTailer(historyPath(dir, name), first && p.Kind == "consumer")}
			c.hists[name] = h
		}
		lines, _, err := h.t.lines()
		if err != nil {
			c.log.Debug("dashboard: history", "name", name, "err", err)
			continue
		}
		if h.kind == "producer" {
			producers = true
			acked = append(acked, c.producerLines(name, lines)...)
			continue
		}
		for _, l := range lines {
			if e, ok := commitRejected(l); ok {
				emit(e)
			}
		}
	}
	if producers {
		c.follow.Acked(acked...)
	}
}

// producerLines takes the acknowledged event ids of a producer's new
// history lines, and hands its acks=1 ones to the lost detector.
func (c *collector) producerLines(name string, lines [][]byte) []string {
	var ids []string
	topic := c.procs.producerTopic(name)
	for _, raw := range lines {
		var l producerLine
		if json.Unmarshal(raw, &l) != nil || l.Status != producer.StatusOK {
			continue
		}
		ids = append(ids, l.EventID)
		// Only what was acknowledged while the page watched: an earlier
		// run's losses are not news.
		if l.Acks == "1" && l.Offset >= 0 && topic != "" && l.AckedAt != nil && l.AckedAt.After(c.started.Add(-time.Second)) {
			c.lost.add(partKey{topic, l.Partition}, ackedRecord{Producer: name, EventID: l.EventID, Offset: l.Offset})
		}
	}
	return ids
}

// commitRejected turns a consumer history's failed commit into a timeline
// entry.
func commitRejected(raw []byte) (Entry, bool) {
	var l consumer.HistoryLine
	if json.Unmarshal(raw, &l) != nil || l.Type != consumer.HistoryCommit || l.Status != "error" {
		return Entry{}, false
	}
	parts := make([]int32, 0, len(l.Offsets))
	for p := range l.Offsets {
		parts = append(parts, p)
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
	offs := make([]string, len(parts))
	for i, p := range parts {
		offs[i] = strconv.Itoa(int(p)) + "→" + strconv.FormatInt(l.Offsets[p], 10)
	}
	why := l.Error
	if why == "" {
		why = "an error"
	}
	text := fmt.Sprintf("%s: commit rejected with %s (generation %d", l.Consumer, why, l.Generation)
	if len(offs) > 0 {
		text += "; " + l.Topic + " " + strings.Join(offs, ", ")
	}
	text += ")"
	at := l.At
	if at.IsZero() {
		at = time.Now()
	}
	return Entry{At: at.UTC(), Kind: KindCommitRejected, Text: text}, true
}
