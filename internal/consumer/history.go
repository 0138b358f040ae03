package consumer

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"sync"
	"time"
)

// History line types.
const (
	HistoryRecord   = "record"
	HistoryCommit   = "commit"
	HistoryAssigned = "assigned"
	HistoryRevoked  = "revoked"
	HistoryLost     = "lost"
	HistoryGap      = "gap"
)

// HistoryLine is one line of a consumer history file (JSON lines): what a
// consumer processed, committed, was given and gave up, in the order it
// happened. Type says which fields are set:
//
//   - "record": a record processed (its effect applied): partition,
//     offset, event_id, key (null for a keyless record), value; with
//     dead_letter (a topic) and reason, the record could not be decoded
//     and was written to that dead-letter topic instead of its effect;
//   - "commit": a commit attempt: offsets (partition -> next offset),
//     status "ok" or "error" with error (Kafka's name);
//   - "assigned", "revoked", "lost": an assignment change: partitions;
//   - "gap": offsets [from, to) of partition lost to retention (or
//     delete-records) before this consumer read them, and resume_at,
//     where it went on.
//
// Every line has consumer, generation, topic and at (RFC 3339, UTC,
// microseconds).
type HistoryLine struct {
	Type       string    `json:"type"`
	Consumer   string    `json:"consumer"`
	Generation int32     `json:"generation"`
	Topic      string    `json:"topic"`
	Partition  *int32    `json:"partition,omitempty"`
	Offset     *int64    `json:"offset,omitempty"`
	EventID    *string   `json:"event_id,omitempty"`
	Key        *string   `json:"key"` // null: keyless (and on non-record lines)
	Value      *string   `json:"value,omitempty"`
	Offsets    Offsets   `json:"offsets,omitempty"`
	Status     string    `json:"status,omitempty"`
	Error      string    `json:"error,omitempty"`
	Partitions []int32   `json:"partitions,omitempty"`
	From       *int64    `json:"from,omitempty"`
	To         *int64    `json:"to,omitempty"`
	ResumeAt   *int64    `json:"resume_at,omitempty"`
	DeadLetter string    `json:"dead_letter,omitempty"`
	Reason     string    `json:"reason,omitempty"`
	At         time.Time `json:"at"`
}

// Offsets maps partition to offset; JSON object keys are the partition
// numbers.
type Offsets map[int32]int64

// HistoryWriter appends HistoryLines to a file, one write per line (so a
// SIGKILL loses nothing already written). Safe for concurrent use.
type HistoryWriter struct {
	mu sync.Mutex
	f  *os.File
}

// CreateHistory opens path for appending, creating it if missing: a
// consumer restarted on the same history file (a crash, then a restart)
// continues it.
func CreateHistory(path string) (*HistoryWriter, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	return &HistoryWriter{f: f}, nil
}

// Write appends one line; a nil writer writes nothing.
func (h *HistoryWriter) Write(l HistoryLine) error {
	if h == nil {
		return nil
	}
	if l.At.IsZero() {
		l.At = time.Now()
	}
	l.At = l.At.UTC().Truncate(time.Microsecond)
	b, err := json.Marshal(l)
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, err := h.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("history: %w", err)
	}
	return nil
}

// Close closes the file.
func (h *HistoryWriter) Close() error {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.f.Close()
}

// ReadHistory reads a consumer history file.
func ReadHistory(path string) ([]HistoryLine, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	var out []HistoryLine
	start := 0
	for i, c := range b {
		if c != '\n' {
			continue
		}
		var l HistoryLine
		if err := json.Unmarshal(b[start:i], &l); err != nil {
			return nil, fmt.Errorf("history %s: line %d: %w", path, len(out)+1, err)
		}
		out = append(out, l)
		start = i + 1
	}
	return out, nil
}

// Unowned walks merged histories of a group's consumers in time order from
// since: a partition revoked (or lost) is unowned until a consumer is
// assigned it. It returns how many partitions were assigned after since,
// the partition-seconds without owner, the worst partition's, and when
// the last assignment happened (since when there was none).
func Unowned(lines []HistoryLine, since time.Time) (assigned int, total, worst time.Duration, last time.Time) {
	lines = slices.Clone(lines)
	sort.SliceStable(lines, func(i, j int) bool { return lines[i].At.Before(lines[j].At) })
	free := map[int32]time.Time{}
	last = since
	for _, l := range lines {
		if l.At.Before(since) {
			continue
		}
		switch l.Type {
		case HistoryRevoked, HistoryLost:
			for _, p := range l.Partitions {
				free[p] = l.At
			}
		case HistoryAssigned:
			for _, p := range l.Partitions {
				last = l.At
				if s, ok := free[p]; ok {
					d := l.At.Sub(s)
					total += d
					worst = max(worst, d)
					delete(free, p)
				}
				assigned++
			}
		}
	}
	return assigned, total, worst, last
}
