package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// Event types.
const (
	// EventFaultStart begins a fault; ID pairs it with its EventFaultEnd
	// and What says what the fault is ("kill broker-1", "isolate broker-2
	// from broker-1, broker-3"). A fault whose What starts with "kill" is
	// measured by Unavailability.
	EventFaultStart = "fault-start"
	// EventFaultEnd ends the fault of the same ID.
	EventFaultEnd = "fault-end"
	// EventLeader reports that Topic-Partition has Leader as its leader
	// at Epoch (a negative Leader: no leader).
	EventLeader = "leader"
	// EventNote is anything else worth seeing on the timeline (What).
	EventNote = "note"
)

// Event is one line of events.jsonl, the experiment's own timeline.
type Event struct {
	At   time.Time `json:"at"`
	Type string    `json:"type"` // EventFaultStart, EventFaultEnd, EventLeader or EventNote
	// ID pairs a fault-start with its fault-end.
	ID int `json:"id,omitempty"`
	// What describes a fault or a note: "kill broker-1", "isolate
	// broker-2 from broker-1, broker-3".
	What string `json:"what,omitempty"`
	// Topic, Partition, Leader and Epoch are set on "leader" events.
	Topic     string `json:"topic,omitempty"`
	Partition int32  `json:"partition,omitempty"`
	Leader    int32  `json:"leader,omitempty"`
	Epoch     int64  `json:"epoch,omitempty"`
}

// EventLog appends Events to a file, one JSON object per line, each line in
// one write(2) so that a SIGKILL loses nothing already written. It is safe
// for concurrent use.
type EventLog struct {
	mu   sync.Mutex
	f    *os.File
	path string
}

// NewEventLog creates (or truncates) path.
func NewEventLog(path string) (*EventLog, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("event log: %w", err)
	}
	return &EventLog{f: f, path: path}, nil
}

// errClosed is returned by Write after Close.
var errClosed = errors.New("closed")

// Write appends e. A zero At is set to the current time; At is written in
// UTC with microseconds, like the histories' timestamps.
func (l *EventLog) Write(e Event) error {
	if e.At.IsZero() {
		e.At = time.Now()
	}
	e.At = e.At.UTC().Truncate(time.Microsecond)
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("event log %s: %w", l.path, err)
	}
	b = append(b, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return fmt.Errorf("event log %s: write %s event: %w", l.path, e.Type, errClosed)
	}
	if _, err := l.f.Write(b); err != nil {
		return fmt.Errorf("event log %s: %w", l.path, err)
	}
	return nil
}

// Close syncs and closes the file. Closing twice returns nil.
func (l *EventLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	f := l.f
	l.f = nil
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(serr, cerr); err != nil {
		return fmt.Errorf("event log %s: %w", l.path, err)
	}
	return nil
}

// ReadEvents reads an events.jsonl file. A torn last line (no newline, not
// valid JSON: the writer was killed in the middle of it) is ignored; any
// other bad line is an error. Blank lines are skipped.
func ReadEvents(path string) ([]Event, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	var out []Event
	for n := 1; len(b) > 0; n++ {
		line, rest, found := bytes.Cut(b, []byte{'\n'})
		b = rest
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var e Event
		if err := json.Unmarshal(line, &e); err != nil {
			if !found {
				break // torn last line
			}
			return nil, fmt.Errorf("read events %s: line %d: %w", path, n, err)
		}
		out = append(out, e)
	}
	return out, nil
}
