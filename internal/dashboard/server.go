package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"sync"
	"time"

	"github.com/tapes-dev/tapes/internal/client"
	"github.com/tapes-dev/tapes/internal/launch"
)

//go:embed static
var staticFiles embed.FS

// Defaults of Config.
const (
	DefaultPollInterval = 100 * time.Millisecond
	DefaultKeepAlive    = 15 * time.Second
)

// Config configures a Server.
type Config struct {
	// Cluster is the launcher of `cluster up`: process states, faults,
	// links, and the processes the page starts. Required.
	Cluster *launch.Cluster
	// Client reads the cluster (metadata, replicas, records, groups) and
	// resets offsets. It should dial the brokers directly (an empty
	// AddressMap: the observer is never faulted) with a short
	// RequestTimeout (about a second), so that a paused broker delays one
	// poll, not all of them. Required; the Server does not close it.
	Client *client.Client
	// Producerd, Consumerd and Chaos are the programs the page starts
	// (launch.FindBinary finds them); "" makes the actions that need one
	// fail with the reason.
	Producerd, Consumerd, Chaos string
	// Logger receives the server's own problems at debug and warn level;
	// nil discards them.
	Logger *slog.Logger
	// PollInterval is how often the cluster is read and the state sent
	// when it changed (default DefaultPollInterval).
	PollInterval time.Duration
	// KeepAlive is how often an idle event stream gets a comment (default
	// DefaultKeepAlive).
	KeepAlive time.Duration
	// Token is the secret every action must carry (see guard.go); "": New
	// chooses a random one (Server.Token returns it).
	Token string
	// Host is a name the page is also called by, besides the loopback
	// names and the listener's IP (the host `--web-listen` names); "":
	// none.
	Host string
}

// Server serves the live page of one cluster. Create it with New and run
// it with Serve.
type Server struct {
	cfg Config
	log *slog.Logger
	// token is cfg.Token or the one chosen by newServer; fixed.
	token string
	hub   *hub
	src   source
	diff  *differ
	// exec carries out a validated action (the real one, or a test's).
	exec func(ctx context.Context, a *action) (string, error)
	// runsDir is served at /runs/ ("" : nothing).
	runsDir string
	// col is the real source (nil with a test's source).
	col *collector

	serveOnce sync.Once
}

// source is where the snapshots come from: the cluster (collector), or a
// test's fake.
type source interface {
	// run does the source's background work until ctx ends; emit adds
	// timeline entries it finds itself (lost records, rejected commits,
	// experiment progress).
	run(ctx context.Context, emit func(...Entry))
	// snapshot returns the current state and the processes' launcher
	// states (for the fault entries); it must be cheap.
	snapshot(now time.Time) (*Snapshot, []procState)
}

// New returns a Server for cfg.Cluster.
func New(cfg Config) (*Server, error) {
	if cfg.Cluster == nil {
		return nil, errors.New("dashboard: no cluster")
	}
	if cfg.Client == nil {
		return nil, errors.New("dashboard: no client")
	}
	s := newServer(cfg, nil)
	s.col = newCollector(s.cfg, s.log)
	s.col.watched = s.hub.watched
	s.src = s.col
	s.exec = s.execute
	s.runsDir = filepath.Join(cfg.Cluster.Dir(), "runs")
	return s, nil
}

// newServer is New without the cluster: src (nil: set later) provides the
// state.
func newServer(cfg Config, src source) *Server {
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.KeepAlive <= 0 {
		cfg.KeepAlive = DefaultKeepAlive
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	token := cfg.Token
	if token == "" {
		token = newToken()
	}
	s := &Server{cfg: cfg, log: log, token: token, hub: newHub(cfg.PollInterval), src: src, diff: newDiffer()}
	s.exec = func(context.Context, *action) (string, error) {
		return "", httpErrorf(http.StatusServiceUnavailable, "no cluster to act on")
	}
	return s
}

// Token returns the secret of this launch that actions must carry: put in
// the page URL (PageURL), or sent in the X-Tapes-Token header.
func (s *Server) Token() string { return s.token }

// handler returns the page's HTTP handler for a listener on addr; done
// ends the event streams.
func (s *Server) handler(addr net.Addr, done <-chan struct{}) http.Handler {
	g := newHostGuard(addr, s.cfg.Host)
	mux := http.NewServeMux()
	static, err := fs.Sub(staticFiles, "static")
	if err != nil {
		panic(err) // the embedded directory is always there
	}
	files := noCache(http.FileServerFS(static))
	mux.Handle("GET /", files)
	mux.Handle("GET /static/", http.StripPrefix("/static", files))
	mux.HandleFunc("GET /api/state", s.serveState)
	mux.HandleFunc("GET /api/events", func(w http.ResponseWriter, r *http.Request) {
		s.hub.stream(w, r, s.cfg.KeepAlive, done)
	})
	mux.HandleFunc("POST /api/action", func(w http.ResponseWriter, r *http.Request) {
		s.serveAction(w, r, g.port)
	})
	if s.runsDir != "" {
		mux.Handle("GET /runs/", noCache(http.StripPrefix("/runs/", http.FileServer(http.Dir(s.runsDir)))))
	}
	return s.guard(g, mux)
}

func noCache(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		h.ServeHTTP(w, r)
	})
}

// Serve reads the cluster and serves the page on lis until ctx ends (then
// it closes lis and the event streams, stops a running experiment and
// returns nil) or serving fails. It may be called once.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	err := errors.New("dashboard: Serve called twice")
	s.serveOnce.Do(func() { err = s.serve(ctx, lis) })
	return err
}

func (s *Server) serve(ctx context.Context, lis net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	s.publish(time.Now()) // a first state before anyone asks
	wg.Go(func() { s.run(ctx) })

	srv := &http.Server{
		Handler:           s.handler(lis.Addr(), ctx.Done()),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(lis) }()
	var err error
	select {
	case <-ctx.Done():
	case err = <-serveErr:
	}
	cancel()
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	_ = srv.Shutdown(sctx) // the streams end with ctx
	wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// run does the server's background work until ctx ends: the source's
// own, and publishing the state every PollInterval. Serve runs it (after
// a first publish); the stream tests run it in a synctest bubble, without
// the network.
func (s *Server) run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { s.src.run(ctx, s.hub.add) })
	s.pollLoop(ctx)
	wg.Wait()
}

// pollLoop publishes the state every PollInterval.
func (s *Server) pollLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.publish(now)
		}
	}
}

// publish takes a snapshot, adds the timeline entries its changes make,
// and sends it if it changed.
func (s *Server) publish(now time.Time) {
	snap, procs := s.src.snapshot(now)
	snap.At = now.UTC()
	s.hub.add(s.diff.diff(snap, procs, now)...)
	if _, err := s.hub.setState(snap); err != nil {
		s.log.Warn("dashboard: encode state", "err", err)
	}
}

// serveState is GET /api/state: the snapshot and, for a page that
// polls instead of streaming, the last timeline entries.
func (s *Server) serveState(w http.ResponseWriter, _ *http.Request) {
	state := s.hub.current()
	if state == nil {
		state = []byte("{}")
	}
	tl, err := json.Marshal(s.hub.recent(timelineReplay))
	if err != nil {
		tl = []byte("[]")
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	// The snapshot's object with one more field, without decoding it.
	if len(state) >= 2 && state[len(state)-1] == '}' {
		sep := ","
		if len(state) == 2 {
			sep = ""
		}
		fmt.Fprintf(w, "%s%s\"timeline\":%s}", state[:len(state)-1], sep, tl)
		return
	}
	w.Write(state)
}

// maxActionBody bounds a POST /api/action body.
const maxActionBody = 64 << 10

// sameOrigin refuses what another site's page could make a browser send
// (see guard.go for the Host and the token):
// an action must be JSON (a cross-site request with that content type
// needs a CORS preflight, which this server never approves) and, when the
// browser names the page it comes from, come from this server's own page.
func sameOrigin(r *http.Request) error {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return httpErrorf(http.StatusUnsupportedMediaType, "Content-Type %q: an action is application/json", r.Header.Get("Content-Type"))
	}
	if o := r.Header.Get("Origin"); o != "" {
		if u, err := url.Parse(o); err != nil || u.Host != r.Host {
			return httpErrorf(http.StatusForbidden, "Origin %s: actions come from this server's own page (%s)", o, r.Host)
		}
	}
	return nil
}

// serveAction is POST /api/action of the page on port.
func (s *Server) serveAction(w http.ResponseWriter, r *http.Request, port string) {
	var body []byte
	err := sameOrigin(r)
	if err == nil {
		err = s.authorized(r, port)
	}
	if err == nil {
		body, err = io.ReadAll(io.LimitReader(r.Body, maxActionBody+1))
		if err == nil && len(body) > maxActionBody {
			err = fmt.Errorf("body larger than %d bytes", maxActionBody)
		}
		if err != nil {
			err = httpErrorf(http.StatusBadRequest, "read the request: %v", err)
		}
	}
	var msg string
	if err == nil {
		var a *action
		if a, err = parseAction(body); err == nil {
			msg, err = s.exec(r.Context(), a)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		code, text := errorAnswer(err)
		if code >= 500 {
			s.log.Warn("dashboard: action failed", "err", text)
		}
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(struct {
			OK    bool   `json:"ok"`
			Error string `json:"error"`
		}{false, text})
		return
	}
	json.NewEncoder(w).Encode(struct {
		OK      bool   `json:"ok"`
		Message string `json:"message"`
	}{true, msg})
}
