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
	"testing/synctest"
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

// sseEvent is one event of a stream (or a comment), with the time it was
// read (in a synctest bubble: the bubble's time).
type sseEvent struct {
	name, data string
	comment    bool
	at         time.Time
}

// sseParser turns the lines of an event stream into events.
type sseParser struct{ ev sseEvent }

// line takes one line (without its newline) and returns the event it
// completes, if any.
func (p *sseParser) line(line string) (sseEvent, bool) {
	switch {
	case line == "":
		ev := p.ev
		p.ev = sseEvent{}
		if ev.name != "" || ev.data != "" {
			ev.at = time.Now()
			return ev, true
		}
	case strings.HasPrefix(line, ":"):
		return sseEvent{comment: true, data: line, at: time.Now()}, true
	case strings.HasPrefix(line, "event: "):
		p.ev.name = strings.TrimPrefix(line, "event: ")
	case strings.HasPrefix(line, "data: "):
		p.ev.data += strings.TrimPrefix(line, "data: ")
	}
	return sseEvent{}, false
}

// openEvents reads GET /api/events over the network into a channel.
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
		var p sseParser
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if ev, ok := p.line(strings.TrimSuffix(line, "\n")); ok {
				ch <- ev
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

// streamRecorder is the http.ResponseWriter of an event stream served in
// a synctest bubble: it keeps the events written, each with the bubble's
// time of its write. Safe for concurrent use.
type streamRecorder struct {
	mu      sync.Mutex
	header  http.Header
	code    int
	p       sseParser
	pending string
	events  []sseEvent
}

func (r *streamRecorder) Header() http.Header {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.header
}

func (r *streamRecorder) WriteHeader(code int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.code = code
}

func (r *streamRecorder) Write(b []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending += string(b)
	for {
		i := strings.IndexByte(r.pending, '\n')
		if i < 0 {
			return len(b), nil
		}
		if ev, ok := r.p.line(r.pending[:i]); ok {
			r.events = append(r.events, ev)
		}
		r.pending = r.pending[i+1:]
	}
}

func (r *streamRecorder) Flush() {}

// take returns the events written since the last take.
func (r *streamRecorder) take() []sseEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	evs := r.events
	r.events = nil
	return evs
}

// testAddr is the listener address the handler tests pretend to serve on,
// and testHost a Host header that names it.
var (
	testAddr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}
	testHost = "127.0.0.1:8080"
)

// streamIn serves GET /api/events with h in the current synctest bubble
// until ctx ends (wg waits for it) and returns what it writes.
func streamIn(ctx context.Context, wg *sync.WaitGroup, serve func(http.ResponseWriter, *http.Request)) *streamRecorder {
	rec := &streamRecorder{header: http.Header{}}
	req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/api/events", nil)
	req.Host = testHost
	wg.Go(func() { serve(rec, req) })
	return rec
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

// withoutComments drops the keep-alives of evs.
func withoutComments(evs []sseEvent) []sseEvent {
	var out []sseEvent
	for _, ev := range evs {
		if !ev.comment {
			out = append(out, ev)
		}
	}
	return out
}

// TestEventStream, on the bubble's clock: a new stream gets the state at
// once and then the last 200 entries in order; a change of the cluster
// goes out at the first poll after it, not before; new entries go out at
// once, in order; an idle stream gets a keep-alive every KeepAlive and
// no state (it did not change).
func TestEventStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const poll, keepAlive = 100 * time.Millisecond, 300 * time.Millisecond
		src := newFakeSource()
		s := newServer(Config{PollInterval: poll, KeepAlive: keepAlive}, src)
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		defer func() {
			cancel()
			wg.Wait()
		}()
		s.publish(time.Now())
		wg.Go(func() { s.run(ctx) })
		for i := range 250 {
			src.add(Entry{At: time.Now(), Kind: KindFault, Text: fmt.Sprintf("old %d", i)})
		}
		rec := streamIn(ctx, &wg, s.handler(testAddr, ctx.Done()).ServeHTTP)
		opened := time.Now()
		synctest.Wait()

		evs := rec.take()
		if len(evs) != 201 || evs[0].name != "state" || !strings.Contains(evs[0].data, `"dir":"/fake"`) {
			t.Fatalf("a new stream got %d events, first %+v; want the state and 200 entries", len(evs), evs[0])
		}
		for i, ev := range evs[1:] {
			if got, want := entryText(t, ev), fmt.Sprintf("old %d", i+50); got != want || !ev.at.Equal(opened) {
				t.Fatalf("replayed entry %q at %v, want %q at once", got, ev.at.Sub(opened), want)
			}
		}

		for round := range 3 {
			dir := fmt.Sprintf("/changed-%d", round)
			src.set(func(s *Snapshot) { s.Dir = dir })
			changed := time.Now()
			synctest.Wait()
			if evs := withoutComments(rec.take()); len(evs) > 0 {
				t.Fatalf("round %d: %+v sent before a poll saw the change", round, evs)
			}
			time.Sleep(poll)
			synctest.Wait()
			evs := withoutComments(rec.take())
			if len(evs) != 1 || evs[0].name != "state" || !strings.Contains(evs[0].data, `"dir":"`+dir+`"`) {
				t.Fatalf("round %d: one poll interval after the change: %+v, want its state", round, evs)
			}
			if d := evs[0].at.Sub(changed); d <= 0 || d > poll {
				t.Fatalf("round %d: the change went out %v after it, want at the first poll after it (within %v)", round, d, poll)
			}
		}

		for i := range 5 {
			src.add(Entry{At: time.Now(), Kind: KindLeader, Text: fmt.Sprintf("new %d", i)})
		}
		added := time.Now()
		synctest.Wait()
		evs = withoutComments(rec.take())
		if len(evs) != 5 {
			t.Fatalf("5 new entries: got %+v", evs)
		}
		for i, ev := range evs {
			if got, want := entryText(t, ev), fmt.Sprintf("new %d", i); got != want || !ev.at.Equal(added) {
				t.Fatalf("entry %q %v after it was added, want %q at once", got, ev.at.Sub(added), want)
			}
		}

		// Nothing changes for three keep-alive intervals (and many polls).
		time.Sleep(3 * keepAlive)
		synctest.Wait()
		comments := 0
		for _, ev := range rec.take() {
			if !ev.comment {
				t.Fatalf("unexpected event %q %s while nothing changed", ev.name, ev.data)
			}
			comments++
		}
		if comments != 3 {
			t.Fatalf("%d keep-alives in %v with KeepAlive %v, want 3", comments, 3*keepAlive, keepAlive)
		}
	})
}

// TestStateThrottled, on the bubble's clock: however fast the state
// changes, one stream gets it at most every minStateGap, and the last
// change is not lost: it goes out when the gap has passed.
func TestStateThrottled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const gap = 100 * time.Millisecond
		h := newHub(gap)
		h.setState(&Snapshot{Dir: "first"})
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		defer func() {
			cancel()
			wg.Wait()
		}()
		rec := streamIn(ctx, &wg, func(w http.ResponseWriter, r *http.Request) { h.stream(w, r, time.Hour, ctx.Done()) })
		synctest.Wait()
		if evs := rec.take(); len(evs) != 1 || !strings.Contains(evs[0].data, `"dir":"first"`) {
			t.Fatalf("a new stream got %+v, want the state", evs)
		}
		start := time.Now()
		last := ""
		for time.Since(start) < time.Second { // a change every 5 ms
			last = fmt.Sprint(time.Since(start))
			h.setState(&Snapshot{Dir: last})
			time.Sleep(5 * time.Millisecond)
		}
		synctest.Wait()
		evs := rec.take()
		if len(evs) != 10 {
			t.Fatalf("%d states in a second of changes every 5 ms, want 10 (one per %v)", len(evs), gap)
		}
		prev := start
		for _, ev := range evs {
			if d := ev.at.Sub(prev); ev.name != "state" || d < gap {
				t.Fatalf("%q %v after the previous state, want a state at least %v after it", ev.name, d, gap)
			}
			prev = ev.at
		}
		if strings.Contains(evs[len(evs)-1].data, `"dir":"`+last+`"`) {
			return // the last change went out with the last state
		}
		time.Sleep(gap)
		synctest.Wait()
		if evs := rec.take(); len(evs) != 1 || !strings.Contains(evs[0].data, `"dir":"`+last+`"`) {
			t.Fatalf("after the changes stopped: %+v, want the last state (%s)", evs, last)
		}
	})
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
	// The event stream over the network (TestEventStream checks its
	// content and timing on a fake clock).
	select {
	case ev := <-openEvents(t, base):
		if ev.name != "state" || !strings.Contains(ev.data, `"dir":"/fake"`) {
			t.Fatalf("first event %+v, want the state", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("GET /api/events: no event in 10s")
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
	h := s.handler(testAddr, make(chan struct{}))
	post := func(body string) (int, map[string]any) {
		rec := httptest.NewRecorder()
		req := actionRequest(s, body)
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
		req := actionRequest(s, `{"action":"kill","name":"broker-1"}`)
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

// actionRequest is a POST /api/action as the page sends it: to testHost,
// JSON, with s's token.
func actionRequest(s *Server, body string) *http.Request {
	req := httptest.NewRequest(http.MethodPost, "/api/action", strings.NewReader(body))
	req.Host = testHost
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(TokenHeader, s.Token())
	return req
}

// guarded is a Server on a listener at addr whose actions are recorded,
// not done, and its handler.
func guarded(cfg Config, addr net.Addr) (s *Server, h http.Handler, done *[]string) {
	s = newServer(cfg, newFakeSource())
	s.hub.setState(&Snapshot{Dir: "/fake"})
	done = new([]string)
	s.exec = func(_ context.Context, a *action) (string, error) {
		*done = append(*done, a.Action+" "+a.Name)
		return a.Action + " done", nil
	}
	return s, s.handler(addr, make(chan struct{})), done
}

// TestHostGuard: a request whose Host does not name the page's address is
// refused with the reason (403), whatever its path, also with a matching
// Origin and the right token (DNS rebinding: a foreign site's name that
// resolves to the page); the page's own names are served.
func TestHostGuard(t *testing.T) {
	s, h, done := guarded(Config{Host: "tapes.lan"}, testAddr)
	do := func(method, path, host string, body string) *httptest.ResponseRecorder {
		t.Helper()
		var req *http.Request
		if method == http.MethodPost {
			req = actionRequest(s, body)
			req.Header.Set("Origin", "http://"+host)
		} else {
			req = httptest.NewRequest(method, path, nil)
		}
		req.Host = host
		rec := httptest.NewRecorder()
		if path == "/api/events" { // a refused stream answers at once; an accepted one is ended
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			req = req.WithContext(ctx)
		}
		h.ServeHTTP(rec, req)
		return rec
	}
	paths := []string{"/", "/index.html", "/static/app.js", "/api/state", "/api/events", "/runs/x/report.html"}
	for _, host := range []string{"attacker.example:8080", "attacker.example", "127.0.0.1.attacker.example:8080",
		"127.0.0.1:9090", "localhost:80", "127.0.0.1", "", "tapes.lan:9090", "[::2]:8080", "10.0.0.1:8080"} {
		for _, path := range paths {
			if rec := do(http.MethodGet, path, host, ""); rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "DNS rebinding") {
				t.Errorf("GET %s with Host %q: %d %q, want 403 with the reason", path, host, rec.Code, rec.Body.String())
			}
		}
		if rec := do(http.MethodPost, "/api/action", host, `{"action":"kill","name":"broker-3"}`); rec.Code != http.StatusForbidden {
			t.Errorf("POST /api/action with Host and Origin %q and the token: %d %s, want 403", host, rec.Code, rec.Body.String())
		}
	}
	if len(*done) > 0 {
		t.Fatalf("actions with a foreign Host were carried out: %v", *done)
	}
	for _, host := range []string{"127.0.0.1:8080", "localhost:8080", "LocalHost.:8080", "[::1]:8080", "[0:0:0:0:0:0:0:1]:8080", "tapes.lan:8080", "TAPES.LAN:8080"} {
		if rec := do(http.MethodGet, "/api/state", host, ""); rec.Code != http.StatusOK {
			t.Errorf("GET /api/state with Host %q: %d %s", host, rec.Code, rec.Body.String())
		}
		if rec := do(http.MethodPost, "/api/action", host, `{"action":"kill","name":"broker-3"}`); rec.Code != http.StatusOK {
			t.Errorf("POST /api/action with Host and Origin %q: %d %s", host, rec.Code, rec.Body.String())
		}
	}

	// Listening on every address: any IP literal of the port, still no
	// other name.
	g := newHostGuard(&net.TCPAddr{IP: net.IPv4zero, Port: 8080}, "")
	for host, want := range map[string]bool{"10.0.0.1:8080": true, "[fe80::1]:8080": true, "localhost:8080": true,
		"attacker.example:8080": false, "10.0.0.1:8081": false} {
		if got := g.allows(host); got != want {
			t.Errorf("listening on 0.0.0.0:8080: Host %q allowed %v, want %v", host, got, want)
		}
	}
	// Port 80: a Host without its port is the same.
	if g := newHostGuard(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80}, ""); !g.allows("localhost") || !g.allows("127.0.0.1:80") || g.allows("attacker.example") {
		t.Errorf("listening on port 80: %+v", g)
	}
}

// TestActionToken: an action needs the launch's token, in the header or in
// the cookie that the token URL sets; a missing or wrong one is refused
// with the reason (403) and nothing is done; a foreign Origin is refused
// even with the token.
func TestActionToken(t *testing.T) {
	s, h, done := guarded(Config{}, testAddr)
	if other := newServer(Config{}, newFakeSource()); len(s.Token()) < 20 || other.Token() == s.Token() {
		t.Fatalf("tokens %q and %q: want a long random one per launch", s.Token(), other.Token())
	}
	act := func(change func(r *http.Request)) (int, string) {
		req := actionRequest(s, `{"action":"kill","name":"broker-3"}`)
		change(req)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	for _, c := range []struct {
		what, reason string
		change       func(r *http.Request)
	}{
		{"no token", "no token", func(r *http.Request) { r.Header.Del(TokenHeader) }},
		{"a wrong token", "wrong token", func(r *http.Request) { r.Header.Set(TokenHeader, s.Token()+"x") }},
		{"a wrong cookie", "wrong token", func(r *http.Request) {
			r.Header.Del(TokenHeader)
			r.AddCookie(&http.Cookie{Name: tokenCookie("8080"), Value: "guess"})
		}},
		{"the cookie of a page on another port", "no token", func(r *http.Request) {
			r.Header.Del(TokenHeader)
			r.AddCookie(&http.Cookie{Name: tokenCookie("9090"), Value: s.Token()})
		}},
		{"a foreign Origin", "Origin", func(r *http.Request) { r.Header.Set("Origin", "http://attacker.example:8080") }},
		{"the Origin of another port", "Origin", func(r *http.Request) { r.Header.Set("Origin", "http://127.0.0.1:9090") }},
	} {
		if code, body := act(c.change); code != http.StatusForbidden || !strings.Contains(body, c.reason) {
			t.Errorf("%s: %d %s, want 403 with %q", c.what, code, body, c.reason)
		}
	}
	if len(*done) > 0 {
		t.Fatalf("actions without the token were carried out: %v", *done)
	}

	// The page URL: the token becomes an HttpOnly, SameSite=Strict cookie
	// and the browser goes on to the page without it in the address.
	req := httptest.NewRequest(http.MethodGet, "/?"+TokenParam+"="+s.Token(), nil)
	req.Host = testHost
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	cookies := rec.Result().Cookies()
	if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/" || len(cookies) != 1 {
		t.Fatalf("GET the token URL: %d, Location %q, cookies %v", rec.Code, rec.Header().Get("Location"), cookies)
	}
	if c := cookies[0]; c.Name != tokenCookie("8080") || c.Value != s.Token() || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" {
		t.Fatalf("the token cookie: %+v", c)
	}
	code, body := act(func(r *http.Request) {
		r.Header.Del(TokenHeader)
		r.AddCookie(cookies[0])
		r.Header.Set("Origin", "http://"+testHost)
	})
	if code != http.StatusOK || len(*done) != 1 {
		t.Fatalf("the action with the page's cookie: %d %s (done %v)", code, body, *done)
	}
	if code, body := act(func(*http.Request) {}); code != http.StatusOK || len(*done) != 2 {
		t.Fatalf("the action with the token header: %d %s (done %v)", code, body, *done)
	}

	req = httptest.NewRequest(http.MethodGet, "/?"+TokenParam+"=guess", nil)
	req.Host = testHost
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden || len(rec.Result().Cookies()) > 0 || !strings.Contains(rec.Body.String(), "wrong token") {
		t.Fatalf("GET with a wrong token: %d %v %s", rec.Code, rec.Result().Cookies(), rec.Body.String())
	}
}

func TestPageURL(t *testing.T) {
	for addr, want := range map[net.Addr]string{
		testAddr: "http://127.0.0.1:8080/?token=T%2B",
		&net.TCPAddr{IP: net.IPv4zero, Port: 8080}:      "http://127.0.0.1:8080/?token=T%2B",
		&net.TCPAddr{IP: net.IPv6unspecified, Port: 81}: "http://127.0.0.1:81/?token=T%2B",
		&net.TCPAddr{IP: net.IPv6loopback, Port: 8080}:  "http://[::1]:8080/?token=T%2B",
	} {
		if got := PageURL(addr, "T+"); got != want {
			t.Errorf("PageURL(%v) = %s, want %s", addr, got, want)
		}
	}
}
