package dashboard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Limits of the timeline.
const (
	// timelineKeep is how many entries the server keeps.
	timelineKeep = 1000
	// timelineReplay is how many of them a new event stream gets first.
	timelineReplay = 200
)

// hub holds the latest snapshot (as JSON) and the timeline, and wakes the
// event streams when either changes. Safe for concurrent use.
type hub struct {
	// minStateGap is the least time between two `event: state` of one
	// stream.
	minStateGap time.Duration

	mu sync.Mutex
	// state is the latest snapshot's JSON; stateKey the same without its
	// time, to tell a change from a new poll of the same state.
	state    []byte
	stateKey []byte
	stateVer uint64
	// entries are the last timelineKeep entries; entry i has sequence
	// number first+i.
	entries []Entry
	first   uint64
	// changed is closed (and replaced) whenever state or entries change.
	changed chan struct{}
	// viewers counts the open event streams.
	viewers atomic.Int32
}

// watched reports whether an event stream is open (a page is looking).
func (h *hub) watched() bool { return h.viewers.Load() > 0 }

func newHub(minStateGap time.Duration) *hub {
	return &hub{minStateGap: minStateGap, changed: make(chan struct{})}
}

// wakeLocked wakes every stream. h.mu held.
func (h *hub) wakeLocked() {
	close(h.changed)
	h.changed = make(chan struct{})
}

// setState publishes s if it differs from the last one in anything but
// its time, and reports whether it did.
func (h *hub) setState(s *Snapshot) (bool, error) {
	at := s.At
	s.At = time.Time{}
	key, err := json.Marshal(s)
	s.At = at
	if err != nil {
		return false, err
	}
	h.mu.Lock()
	same := bytes.Equal(key, h.stateKey)
	h.mu.Unlock()
	if same {
		return false, nil
	}
	// "at" is the first field: the same bytes with the time put back.
	stamp, err := json.Marshal(at)
	if err != nil {
		return false, err
	}
	zero := []byte(`{"at":"0001-01-01T00:00:00Z"`)
	if !bytes.HasPrefix(key, zero) {
		return false, fmt.Errorf("dashboard: the snapshot's JSON does not start with its time: %.40s", key)
	}
	full := append(append([]byte(`{"at":`), stamp...), key[len(zero):]...)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.state, h.stateKey = full, key
	h.stateVer++
	h.wakeLocked()
	return true, nil
}

// add appends timeline entries and wakes the streams.
func (h *hub) add(es ...Entry) {
	if len(es) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.entries = append(h.entries, es...)
	if n := len(h.entries) - timelineKeep; n > 0 {
		h.entries = append(h.entries[:0:0], h.entries[n:]...)
		h.first += uint64(n)
	}
	h.wakeLocked()
}

// current returns the latest snapshot's JSON (nil before the first).
func (h *hub) current() []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state
}

// recent returns up to n of the last timeline entries, oldest first.
func (h *hub) recent(n int) []Entry {
	h.mu.Lock()
	defer h.mu.Unlock()
	i := max(0, len(h.entries)-n)
	return append([]Entry(nil), h.entries[i:]...)
}

// view is what a stream has not sent yet.
type view struct {
	state    []byte
	stateVer uint64
	entries  []Entry
	next     uint64 // sequence number after the last of entries
	changed  <-chan struct{}
}

// since returns the state (if its version is not sentVer) and the entries
// from sequence number seq on.
func (h *hub) since(sentVer, seq uint64) view {
	h.mu.Lock()
	defer h.mu.Unlock()
	v := view{stateVer: h.stateVer, changed: h.changed, next: h.first + uint64(len(h.entries))}
	if h.stateVer != sentVer {
		v.state = h.state
	}
	if seq < h.first {
		seq = h.first // fell behind: the oldest kept
	}
	if i := seq - h.first; i < uint64(len(h.entries)) {
		v.entries = append([]Entry(nil), h.entries[i:]...)
	}
	return v
}

// stream serves one event stream until the client leaves or done closes:
// at once the current state and the last timelineReplay entries, then
// every new entry as it comes, the state whenever it changed (at most
// every minStateGap), and a comment every keepAlive.
func (h *hub) stream(w http.ResponseWriter, r *http.Request, keepAlive time.Duration, done <-chan struct{}) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	h.viewers.Add(1)
	defer h.viewers.Add(-1)
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-cache")
	hd.Set("Connection", "keep-alive")
	hd.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	h.mu.Lock()
	seq := h.first + uint64(max(0, len(h.entries)-timelineReplay))
	h.mu.Unlock()
	var (
		sentVer   uint64
		lastState time.Time
		buf       bytes.Buffer
	)
	if _, err := io.WriteString(w, "retry: 1000\n\n"); err != nil {
		return
	}
	ka := time.NewTicker(keepAlive)
	defer ka.Stop()
	var gap *time.Timer // pending when a state waits for minStateGap
	defer func() {
		if gap != nil {
			gap.Stop()
		}
	}()
	for {
		v := h.since(sentVer, seq)
		buf.Reset()
		var gapC <-chan time.Time
		if v.state != nil {
			if wait := h.minStateGap - time.Since(lastState); wait > 0 && !lastState.IsZero() {
				if gap == nil {
					gap = time.NewTimer(wait)
				} else {
					gap.Reset(wait)
				}
				gapC = gap.C
			} else {
				fmt.Fprintf(&buf, "event: state\ndata: %s\n\n", v.state)
				sentVer, lastState = v.stateVer, time.Now()
			}
		}
		for _, e := range v.entries {
			b, err := json.Marshal(e)
			if err != nil {
				continue
			}
			fmt.Fprintf(&buf, "event: timeline\ndata: %s\n\n", b)
		}
		seq = v.next
		if buf.Len() > 0 {
			if _, err := w.Write(buf.Bytes()); err != nil {
				return
			}
			fl.Flush()
		}
		if gapC != nil {
			// A state is due once the gap has passed; entries still go
			// out as they come.
			select {
			case <-r.Context().Done():
				return
			case <-done:
				return
			case <-gapC:
			case <-v.changed:
				gap.Stop() // (Go 1.23 timers: nothing stale to drain)
			}
			continue
		}
		select {
		case <-r.Context().Done():
			return
		case <-done:
			return
		case <-v.changed:
		case <-ka.C:
			if _, err := io.WriteString(w, ": keep-alive\n\n"); err != nil {
				return
			}
			fl.Flush()
		}
	}
}
