package dashboard

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeSource is a state the test sets by hand.
type fakeSource struct {
	mu    sync.Mutex
	snap  Snapshot
	procs []procState
	emit  func(...Entry)
	ready chan struct{}
}

func newFakeSource() *fakeSource {
	return &fakeSource{snap: Snapshot{Dir: "/fake", Brokers: []Broker{{ID: 1, Name: "broker-1", State: "running"}}}, ready: make(chan struct{})}
}

func (f *fakeSource) run(ctx context.Context, emit func(...Entry)) {
	f.mu.Lock()
	f.emit = emit
	f.mu.Unlock()
	close(f.ready)
	<-ctx.Done()
}

func (f *fakeSource) snapshot(time.Time) (*Snapshot, []procState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.snap
	return &s, append([]procState(nil), f.procs...)
}

func (f *fakeSource) set(change func(s *Snapshot)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(&f.snap)
}

func (f *fakeSource) add(es ...Entry) {
	<-f.ready
	f.mu.Lock()
	emit := f.emit
	f.mu.Unlock()
	emit(es...)
}

// serveFake runs a Server on src and returns its address.
func serveFake(t *testing.T, src source, cfg Config) (*Server, string) {
	t.Helper()
	s := newServer(cfg, src)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Serve did not return after its context ended")
		}
	})
	return s, "http://" + lis.Addr().String()
}

// sseEvent is one event of a stream (or a comment).
type sseEvent struct {
	name, data string
	comment    bool
	at         time.Time
}

// openEvents reads GET /api/events into a channel.
func openEvents(t *testing.T, base string) <-chan sseEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		cancel()
		t.Fatalf("GET /api/events: %s, Content-Type %q", resp.Status, ct)
	}
	ch := make(chan sseEvent, 1024)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(ch)
		r := bufio.NewReader(resp.Body)
		var ev sseEvent
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimSuffix(line, "\n")
			switch {
			case line == "":
				if ev.name != "" || ev.data != "" {
					ev.at = time.Now()
					ch <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, ":"):
				ch <- sseEvent{comment: true, data: line, at: time.Now()}
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data += strings.TrimPrefix(line, "data: ")
			}
		}
	})
	t.Cleanup(func() {
		cancel()
		resp.Body.Close()
		wg.Wait()
	})
	return ch
}

// next returns the next event that is not a comment (unless comments).
func next(t *testing.T, ch <-chan sseEvent, d time.Duration, comments bool) sseEvent {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("the event stream ended")
			}
			if ev.comment && !comments {
				continue
			}
			return ev
		case <-timer.C:
			t.Fatalf("no event within %v", d)
		}
	}
}

func entryText(t *testing.T, ev sseEvent) string {
	t.Helper()
	if ev.name != "timeline" {
		t.Fatalf("got event %q (%s), want a timeline entry", ev.name, ev.data)
	}
	var e Entry
	if err := json.Unmarshal([]byte(ev.data), &e); err != nil {
		t.Fatal(err)
	}
	return e.Text
}

// TestEventStream: a new stream gets the state at once and the last 200
// entries in order; a change reaches it within 250 ms; new entries arrive
// in order; an idle stream gets keep-alives; an unchanged state is not
// sent again.
func TestEventStream(t *testing.T) {
	src := newFakeSource()
	_, base := serveFake(t, src, Config{KeepAlive: 300 * time.Millisecond})
	for i := range 250 {
		src.add(Entry{At: time.Now(), Kind: KindFault, Text: fmt.Sprintf("old %d", i)})
	}
	ch := openEvents(t, base)

	ev := next(t, ch, time.Second, false)
	if ev.name != "state" || !strings.Contains(ev.data, `"dir":"/fake"`) {
		t.Fatalf("first event = %q %s, want the state", ev.name, ev.data)
	}
	for i := 50; i < 250; i++ {
		if got, want := entryText(t, next(t, ch, time.Second, false)), fmt.Sprintf("old %d", i); got != want {
			t.Fatalf("replayed entry %q, want %q", got, want)
		}
	}

	for round := range 3 {
		changed := time.Now()
		dir := fmt.Sprintf("/changed-%d", round)
		src.set(func(s *Snapshot) { s.Dir = dir })
		for {
			ev := next(t, ch, time.Second, false)
			if ev.name == "state" && strings.Contains(ev.data, `"dir":"`+dir+`"`) {
				if d := ev.at.Sub(changed); d > 750*time.Millisecond {
					t.Fatalf("the change took %v to arrive, want a few poll intervals (100 ms) at most", d)
				}
				break
			}
		}
	}

	for i := range 5 {
		src.add(Entry{At: time.Now(), Kind: KindLeader, Text: fmt.Sprintf("new %d", i)})
	}
	for i := range 5 {
		if got, want := entryText(t, next(t, ch, time.Second, false)), fmt.Sprintf("new %d", i); got != want {
			t.Fatalf("entry %q, want %q", got, want)
		}
	}

	// Nothing changes: keep-alives only (and no state: it did not change).
	deadline := time.After(800 * time.Millisecond)
	comments := 0
	for done := false; !done; {
		select {
		case ev := <-ch:
			if !ev.comment {
				t.Fatalf("unexpected event %q %s while nothing changed", ev.name, ev.data)
			}
			comments++
		case <-deadline:
			done = true
		}
	}
	if comments < 2 {
		t.Fatalf("%d keep-alives in 800ms with KeepAlive 300ms", comments)
	}
}

// TestStateThrottled: however fast the state changes, one stream gets it
// at most every PollInterval.
func TestStateThrottled(t *testing.T) {
	src := newFakeSource()
	s, base := serveFake(t, src, Config{PollInterval: 100 * time.Millisecond})
	ch := openEvents(t, base)
	next(t, ch, time.Second, false)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			// Published straight into the hub, faster than any poll.
			s.hub.setState(&Snapshot{Dir: fmt.Sprint(i)})
			time.Sleep(5 * time.Millisecond)
		}
	})
	var times []time.Time
	deadline := time.After(time.Second)
	for done := false; !done; {
		select {
		case ev := <-ch:
			if ev.name == "state" {
				times = append(times, ev.at)
			}
		case <-deadline:
			done = true
		}
	}
	close(stop)
	wg.Wait()
	if len(times) < 5 || len(times) > 12 {
		t.Fatalf("%d states in a second, want about 10", len(times))
	}
}

func TestStateAndStaticFiles(t *testing.T) {
	src := newFakeSource()
	srv, base := serveFake(t, src, Config{})
	srv.hub.add(Entry{At: time.Now(), Kind: KindFault, Text: "broker-1 paused (SIGSTOP)"})
	resp, err := http.Get(base + "/api/state")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Snapshot
		Timeline []Entry `json:"timeline"`
	}
	err = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if err != nil || got.Dir != "/fake" || len(got.Brokers) != 1 || len(got.Timeline) != 1 || got.At.IsZero() {
		t.Fatalf("GET /api/state = %+v, %v", got, err)
	}
	for _, path := range []string{"/", "/index.html", "/static/index.html"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(strings.ToLower(string(b)), "<html") {
			t.Fatalf("GET %s: %s %.80q", path, resp.Status, b)
		}
	}
}

// TestActionValidation: malformed and invalid actions are refused with
// 400 and the reason, and nothing is done.
func TestActionValidation(t *testing.T) {
	s := newServer(Config{}, newFakeSource())
	var done []string
	s.exec = func(_ context.Context, a *action) (string, error) {
		done = append(done, a.Action)
		return a.Action + " done", nil
	}
	h := s.handler(make(chan struct{}))
	post := func(body string) (int, map[string]any) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/api/action", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(rec, req)
		var out map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("%s: answer %q is not JSON: %v", body, rec.Body.String(), err)
		}
		return rec.Code, out
	}
	for _, c := range []struct{ body, reason string }{
		{`not json`, "not an action"},
		{`{}`, `missing "action"`},
		{`{"action":"explode","name":"broker-1"}`, `unknown action "explode"`},
		{`{"action":"kill"}`, `kill: missing "name"`},
		{`{"action":"consumer-crash","name":" "}`, `consumer-crash: missing "name"`},
		{`{"action":"kill","name":5}`, "not an action"},
		{`{"action":"producer-start","acks":"2"}`, `producer-start: "acks" "2": want "0", "1" or "all"`},
		{`{"action":"producer-start","acks":"1","idempotent":true}`, `"idempotent" needs "acks" "all"`},
		{`{"action":"producer-start","hotKeyShare":1.5}`, `"hotKeyShare" 1.5`},
		{`{"action":"producer-start","hotKeyShare":0.5,"keys":false}`, `needs "keys" on`},
		{`{"action":"producer-start","rate":-1}`, `"rate" -1`},
		{`{"action":"producer-start","name":"../x"}`, `"name" "../x"`},
		{`{"action":"producer-rate","name":"producer-1"}`, `missing "rate"`},
		{`{"action":"consumer-start","commit":"sometimes"}`, `"commit" "sometimes"`},
		{`{"action":"consumer-start","assignor":"roundrobin"}`, `"assignor" "roundrobin"`},
		{`{"action":"consumer-start","recordsPerPoll":-3}`, `"recordsPerPoll" -3`},
		{`{"action":"cut","from":"broker-1","to":"broker-1"}`, `"from" and "to" are both broker-1`},
		{`{"action":"cut","from":"broker-1"}`, `need "from" and "to"`},
		{`{"action":"delay","name":"broker-1","ms":0}`, `need "ms" > 0`},
		{`{"action":"reset-offsets","group":"demo","topic":"orders","offset":3}`, `need "partition"`},
		{`{"action":"reset-offsets","group":"demo","topic":"orders","partition":0,"offset":-1}`, `need "offset"`},
		{`{"action":"experiment-run","name":"nope"}`, `no experiment "nope"`},
	} {
		code, out := post(c.body)
		if code != http.StatusBadRequest || out["ok"] != false || !strings.Contains(fmt.Sprint(out["error"]), c.reason) {
			t.Errorf("%s: %d %v, want 400 with %q", c.body, code, out, c.reason)
		}
	}
	if len(done) > 0 {
		t.Fatalf("refused actions were carried out: %v", done)
	}

	// What another site's page could make a browser send.
	for _, c := range []struct{ ctype, origin string }{{"text/plain", ""}, {"application/x-www-form-urlencoded", ""}, {"application/json", "http://evil.example"}} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/api/action", strings.NewReader(`{"action":"kill","name":"broker-1"}`))
		req.Header.Set("Content-Type", c.ctype)
		if c.origin != "" {
			req.Header.Set("Origin", c.origin)
		}
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusUnsupportedMediaType && rec.Code != http.StatusForbidden {
			t.Errorf("%s from %q: %d %s", c.ctype, c.origin, rec.Code, rec.Body.String())
		}
	}
	if len(done) > 0 {
		t.Fatalf("cross-site actions were carried out: %v", done)
	}

	code, out := post(`{"action":"producer-start","rate":50}`)
	if code != http.StatusOK || out["ok"] != true || out["message"] != "producer-start done" || len(done) != 1 {
		t.Fatalf("valid action: %d %v (done %v)", code, out, done)
	}
	// Errors of the execution keep their status and Kafka name.
	s.exec = func(context.Context, *action) (string, error) {
		return "", httpErrorf(http.StatusConflict, "reset-offsets: group demo has 2 active members (state Stable): stop them first")
	}
	code, out = post(`{"action":"reset-offsets","group":"demo","topic":"orders","partition":0,"offset":3}`)
	if code != http.StatusConflict || !strings.Contains(fmt.Sprint(out["error"]), "active members") {
		t.Fatalf("refused reset: %d %v", code, out)
	}
}

// TestActionDefaults: what a start action fills in.
func TestActionDefaults(t *testing.T) {
	a, err := parseAction([]byte(`{"action":"producer-start"}`))
	if err != nil || a.Topic != "orders" || *a.Rate != defaultRate || !*a.Keys || a.Acks != "all" {
		t.Fatalf("producer-start defaults: %+v, %v", a, err)
	}
	a, err = parseAction([]byte(`{"action":"consumer-start","recordsPerPoll":10}`))
	if err != nil || a.Group != "demo" || a.Topic != "orders" || a.RecordsPerPoll != 10 || a.Commit != "after" || a.Assignor != "cooperative-sticky" {
		t.Fatalf("consumer-start defaults: %+v, %v", a, err)
	}
}
