package experiment

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/tapes-dev/tapes/internal/check"
)

// The "SMS gateway" of eos-external-effect: a local HTTP endpoint outside
// the log, which consumerd --eos --sms-url POSTs to once per input record.
// Every request is delivered to two receivers side by side, both recorded
// as effect lines of one transactional history (check.TxnEffect, process
// SMSPlain or SMSIdempotent, input_event_id the input's event_id): the
// plain one sends every SMS it is asked to (a phone that buzzes twice for
// a redelivered input), the idempotent one remembers the event_ids it has
// sent and sends each at most once. The checker counts external-duplicate
// per receiver.
const (
	SMSPlain      = "sms-plain"
	SMSIdempotent = "sms-idempotent"
)

// SMSRequest is the body consumerd POSTs (JSON).
type SMSRequest struct {
	EventID string `json:"event_id"`
	To      string `json:"to"`
	Text    string `json:"text"`
}

// smsGateway is the endpoint; it stops with Close.
type smsGateway struct {
	srv  *http.Server
	lis  net.Listener
	hist *check.TxnHistoryWriter

	mu       sync.Mutex
	requests int64
	sent     map[string]int // by receiver
	seen     map[string]bool
	errs     []error
}

// startSMSGateway listens on a free loopback port; its effect lines go to
// the transactional history file path.
func startSMSGateway(path string) (*smsGateway, error) {
	hist, err := check.CreateTxnHistory(path)
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		hist.Close()
		return nil, err
	}
	g := &smsGateway{lis: lis, hist: hist, sent: map[string]int{}, seen: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /sms", g.serve)
	g.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go g.srv.Serve(lis)
	return g, nil
}

// URL is what consumerd --sms-url gets.
func (g *smsGateway) URL() string { return "http://" + g.lis.Addr().String() + "/sms" }

func (g *smsGateway) serve(w http.ResponseWriter, r *http.Request) {
	var req SMSRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req); err != nil || req.EventID == "" {
		http.Error(w, "want a JSON body with event_id", http.StatusBadRequest)
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.requests++
	receivers := []string{SMSPlain}
	if !g.seen[req.EventID] {
		g.seen[req.EventID] = true
		receivers = append(receivers, SMSIdempotent)
	}
	for _, rc := range receivers {
		g.sent[rc]++
		if err := g.hist.Write(check.TxnLine{Type: check.TxnEffect, Process: rc, InputEventID: req.EventID}); err != nil {
			g.errs = append(g.errs, err)
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// counts returns the requests received and the SMS each receiver sent.
func (g *smsGateway) counts() (requests int64, plain, idempotent int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.requests, g.sent[SMSPlain], g.sent[SMSIdempotent]
}

// Close stops the endpoint and closes its history.
func (g *smsGateway) Close() error {
	err := g.srv.Close()
	g.mu.Lock()
	defer g.mu.Unlock()
	return errors.Join(err, g.hist.Close(), errors.Join(g.errs...))
}
