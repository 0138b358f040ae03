package producer

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// HistoryLine is one line of a history file: the final outcome of one
// record. The file holds exactly one line per record handed to the
// producer (on SIGKILL, the lines of records still in flight are missing).
type HistoryLine struct {
	// EventID is the record's event_id header: unique, and the same in
	// every attempt.
	EventID string `json:"event_id"`
	// Key is null for a keyless record.
	Key   *string `json:"key"`
	Value string  `json:"value"`
	// Partition is the partition the record was sent to.
	Partition int32 `json:"partition"`
	// Offset is the record's offset, -1 when unknown (failed, or acks=0).
	Offset int64 `json:"offset"`
	// Acks is "0", "1" or "all".
	Acks string `json:"acks"`
	// Status is "ok" (acknowledged) or "error".
	Status string `json:"status"`
	// Error is the Kafka error name of a failed record, null when ok.
	Error *string `json:"error"`
	// Attempts is the number of Produce requests that carried the record.
	Attempts int `json:"attempts"`
	// SentAt is when the record was handed to the producer (RFC 3339, UTC,
	// microseconds).
	SentAt time.Time `json:"sent_at"`
	// AckedAt is when the acknowledgement arrived; null when failed.
	AckedAt *time.Time `json:"acked_at"`
	// Salt and KeySeq are the record's salt and key_seq headers (producerd
	// --salt-hot-key), absent from the line when the record has none.
	Salt   *int64 `json:"salt,omitempty"`
	KeySeq *int64 `json:"key_seq,omitempty"`
}

// History status values.
const (
	StatusOK    = "ok"
	StatusError = "error"
)

// historyTime is the layout of sent_at and acked_at.
const historyTime = "2006-01-02T15:04:05.000000Z07:00"

// History writes a history file: one JSON line per record outcome, through
// a buffered writer that a goroutine flushes whenever it has written
// everything handed to it (and at least every FlushInterval), so that a
// process killed with SIGKILL loses only the lines of its last instants.
// Write is safe for concurrent use.
type History struct {
	f    *os.File
	w    *bufio.Writer
	acks string
	ch   chan []byte
	done chan struct{}

	// sendMu: Write holds it shared while handing lines over; Close takes
	// it to close ch.
	sendMu sync.RWMutex
	closed bool

	mu  sync.Mutex
	err error // first write error
}

// FlushInterval bounds the time a written line waits in the buffer.
const FlushInterval = 100 * time.Millisecond

// CreateHistory creates (or truncates) path. acks is written on every line.
func CreateHistory(path string, acks int32) (*History, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	h := &History{f: f, w: bufio.NewWriterSize(f, 256<<10), acks: AcksName(acks), ch: make(chan []byte, 4096), done: make(chan struct{})}
	go h.run()
	return h, nil
}

func (h *History) run() {
	defer close(h.done)
	tick := time.NewTicker(FlushInterval)
	defer tick.Stop()
	dirty := false
	for {
		select {
		case buf, ok := <-h.ch:
			if !ok {
				h.flush()
				return
			}
			if _, err := h.w.Write(buf); err != nil {
				h.setErr(err)
			}
			dirty = true
			if len(h.ch) == 0 {
				h.flush()
				dirty = false
			}
		case <-tick.C:
			if dirty {
				h.flush()
				dirty = false
			}
		}
	}
}

func (h *History) flush() {
	if err := h.w.Flush(); err != nil {
		h.setErr(err)
	}
}

func (h *History) setErr(err error) {
	h.mu.Lock()
	if h.err == nil {
		h.err = fmt.Errorf("history: %w", err)
	}
	h.mu.Unlock()
}

// Write appends the lines of every record of res.
func (h *History) Write(res *Result) {
	buf := make([]byte, 0, len(res.Records)*256)
	for i, r := range res.Records {
		buf = h.appendLine(buf, res, i, r)
	}
	h.sendMu.RLock()
	defer h.sendMu.RUnlock()
	if h.closed {
		h.setErr(fmt.Errorf("%d lines written after Close", len(res.Records)))
		return
	}
	h.ch <- buf
}

func (h *History) appendLine(buf []byte, res *Result, i int, r *Record) []byte {
	buf = append(buf, `{"event_id":`...)
	buf = appendJSONString(buf, eventID(r))
	buf = append(buf, `,"key":`...)
	if r.Key == nil {
		buf = append(buf, "null"...)
	} else {
		buf = appendJSONString(buf, r.Key)
	}
	buf = append(buf, `,"value":`...)
	buf = appendJSONString(buf, r.Value)
	buf = append(buf, `,"partition":`...)
	buf = strconv.AppendInt(buf, int64(res.Partition), 10)
	buf = append(buf, `,"offset":`...)
	buf = strconv.AppendInt(buf, res.Offset(i), 10)
	buf = append(buf, `,"acks":`...)
	buf = appendJSONString(buf, []byte(h.acks))
	if res.Err == nil {
		buf = append(buf, `,"status":"ok","error":null`...)
	} else {
		buf = append(buf, `,"status":"error","error":`...)
		buf = appendJSONString(buf, []byte(res.ErrName))
	}
	buf = append(buf, `,"attempts":`...)
	buf = strconv.AppendInt(buf, int64(res.Attempts), 10)
	buf = append(buf, `,"sent_at":"`...)
	buf = r.SentAt.UTC().AppendFormat(buf, historyTime)
	buf = append(buf, `","acked_at":`...)
	if res.Err == nil {
		buf = append(buf, '"')
		buf = res.Done.UTC().AppendFormat(buf, historyTime)
		buf = append(buf, '"')
	} else {
		buf = append(buf, "null"...)
	}
	for _, h := range r.Headers {
		if h.Key != SaltHeader && h.Key != KeySeqHeader {
			continue
		}
		// Written as numbers when they are (producerd's always are).
		if n, err := strconv.ParseInt(string(h.Value), 10, 64); err == nil {
			buf = append(buf, ',', '"')
			buf = append(buf, h.Key...)
			buf = append(buf, '"', ':')
			buf = strconv.AppendInt(buf, n, 10)
		}
	}
	return append(buf, "}\n"...)
}

// Close writes what is left, syncs and closes the file. Every Write must
// have returned.
func (h *History) Close() error {
	h.sendMu.Lock()
	if h.closed {
		h.sendMu.Unlock()
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.err
	}
	h.closed = true
	close(h.ch)
	h.sendMu.Unlock()
	<-h.done
	if err := h.f.Sync(); err != nil {
		h.setErr(err)
	}
	if err := h.f.Close(); err != nil {
		h.setErr(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// EventIDHeader, SchemaVersionHeader and EntityHeader are the headers
// producerd puts on every record. The entity header holds the record's
// logical key (key-K): its Kafka key with --keys on, and still present with
// --keys off, when the record has no key.
const (
	EventIDHeader       = "event_id"
	SchemaVersionHeader = "schema_version"
	EntityHeader        = "entity"
	// SaltHeader and KeySeqHeader are on the records of a salted hot key
	// only (producerd --salt-hot-key): the suffix its key got, and the
	// record's place, from 0, among the producer run's records of that
	// entity, by which a consumer can restore their order.
	SaltHeader   = "salt"
	KeySeqHeader = "key_seq"
)

func eventID(r *Record) []byte {
	for _, h := range r.Headers {
		if h.Key == EventIDHeader {
			return h.Value
		}
	}
	return []byte{}
}

// appendJSONString appends s as a JSON string. Invalid UTF-8 becomes
// U+FFFD, as encoding/json does.
func appendJSONString(buf []byte, s []byte) []byte {
	const hex = "0123456789abcdef"
	buf = append(buf, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				buf = append(buf, '\\', c)
			case c == '\n':
				buf = append(buf, '\\', 'n')
			case c == '\r':
				buf = append(buf, '\\', 'r')
			case c == '\t':
				buf = append(buf, '\\', 't')
			case c < 0x20 || c == 0x7f:
				buf = append(buf, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				buf = append(buf, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && size == 1 {
			buf = append(buf, `\ufffd`...)
		} else {
			buf = append(buf, s[i:i+size]...)
		}
		i += size
	}
	return append(buf, '"')
}

// SplitEventID splits an event id as producerd makes them, PRODUCER-HEX-N,
// into the producer's prefix (PRODUCER-HEX, unique per run) and N, the
// record's place in that producer's send order.
func SplitEventID(id string) (prefix string, n int64, ok bool) {
	i := strings.LastIndexByte(id, '-')
	if i <= 0 {
		return "", 0, false
	}
	n, err := strconv.ParseInt(id[i+1:], 10, 64)
	if err != nil {
		return "", 0, false
	}
	return id[:i], n, true
}

// ReadHistoryFile reads the history file at path (see ReadHistory).
func ReadHistoryFile(path string) ([]HistoryLine, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	defer f.Close()
	lines, err := ReadHistory(f)
	if err != nil {
		return nil, fmt.Errorf("history %s: %w", path, err)
	}
	return lines, nil
}

// ReadHistory parses a history file. A torn last line (a process killed in
// the middle of a write) is ignored; any other bad line is an error.
func ReadHistory(r io.Reader) ([]HistoryLine, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	var out []HistoryLine
	var pending error
	n := 0
	for sc.Scan() {
		n++
		if pending != nil {
			return nil, pending
		}
		var l HistoryLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			pending = fmt.Errorf("history line %d: %w", n, err)
			continue
		}
		out = append(out, l)
	}
	return out, sc.Err()
}
