package dashboard

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tapes-dev/tapes/internal/assign"
	"github.com/tapes-dev/tapes/internal/experiment"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/launch"
	"github.com/tapes-dev/tapes/internal/offsetreset"
)

// Defaults of the actions that start processes.
const (
	defaultTopic          = "orders"
	defaultGroup          = "demo"
	defaultRate           = 100.0
	defaultRecordsPerPoll = 100
)

// action is one POST /api/action request: its name and every field any
// action takes (each action reads its own).
type action struct {
	Action string `json:"action"`
	Name   string `json:"name"`
	// cut
	From   string `json:"from"`
	To     string `json:"to"`
	OneWay bool   `json:"oneWay"`
	// delay
	Ms     *int64 `json:"ms"`
	Jitter int64  `json:"jitter"`
	// producer-start, producer-rate
	Topic       string   `json:"topic"`
	Rate        *float64 `json:"rate"`
	Keys        *bool    `json:"keys"`
	HotKeyShare float64  `json:"hotKeyShare"`
	Acks        string   `json:"acks"`
	Idempotent  bool     `json:"idempotent"`
	// consumer-start
	Group          string `json:"group"`
	RecordsPerPoll int    `json:"recordsPerPoll"`
	Commit         string `json:"commit"`
	IdempotentSink bool   `json:"idempotentSink"`
	Assignor       string `json:"assignor"`
	ProcessTime    int64  `json:"processTime"` // ms
	// reset-offsets
	Partition *int32 `json:"partition"`
	Offset    *int64 `json:"offset"`
	// predict-consumers, predict-order: the learner's answer, and the
	// number of A1-then-B1 runs
	Answer string `json:"answer"`
	Runs   int    `json:"runs"`
}

// actionNames lists the actions in the order errors name them.
var actionNames = []string{
	"kill", "pause", "resume", "restart", "cut", "delay", "heal",
	"producer-start", "producer-stop", "producer-pause", "producer-resume", "producer-rate",
	"consumer-start", "consumer-pause", "consumer-resume", "consumer-crash", "consumer-stop",
	"reset-offsets", "experiment-run", "predict-consumers", "predict-order",
}

// processName is what a process the page starts may be called (it is also
// a file name: DIR/logs/NAME.log, DIR/histories/NAME.jsonl).
var processName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// httpError is an error with the HTTP status to answer it with.
type httpError struct {
	code int
	err  error
}

func (e *httpError) Error() string { return e.err.Error() }
func (e *httpError) Unwrap() error { return e.err }

func httpErrorf(code int, format string, args ...any) error {
	return &httpError{code, fmt.Errorf(format, args...)}
}

// badRequest is a request the server refuses without doing anything.
func badRequest(format string, args ...any) error {
	return httpErrorf(http.StatusBadRequest, format, args...)
}

// parseAction decodes and validates a request: every mistake is found
// before anything is done (400). Defaults are filled in.
func parseAction(body []byte) (*action, error) {
	var a action
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&a); err != nil {
		return nil, badRequest("the body is not an action: %v (want a JSON object like {\"action\":\"kill\",\"name\":\"broker-1\"})", err)
	}
	if a.Action == "" {
		return nil, badRequest("missing \"action\" (one of %s)", strings.Join(actionNames, ", "))
	}
	if !slices.Contains(actionNames, a.Action) {
		return nil, badRequest("unknown action %q (want one of %s)", a.Action, strings.Join(actionNames, ", "))
	}
	if err := a.validate(); err != nil {
		return nil, badRequest("%s: %v", a.Action, err)
	}
	return &a, nil
}

func (a *action) validate() error {
	needName := func() error {
		if strings.TrimSpace(a.Name) == "" {
			return errors.New(`missing "name" (the process, e.g. broker-1)`)
		}
		return nil
	}
	switch a.Action {
	case "kill", "pause", "resume", "restart",
		"producer-stop", "producer-pause", "producer-resume",
		"consumer-pause", "consumer-resume", "consumer-crash", "consumer-stop":
		return needName()
	case "heal":
		return nil
	case "cut":
		switch {
		case a.From == "" || a.To == "":
			return fmt.Errorf(`need "from" and "to" (got %q, %q)`, a.From, a.To)
		case a.From == a.To:
			return fmt.Errorf(`"from" and "to" are both %s`, a.From)
		}
		return nil
	case "delay":
		if err := needName(); err != nil {
			return err
		}
		if a.Ms == nil || *a.Ms < 0 || a.Jitter < 0 || *a.Ms == 0 && a.Jitter == 0 {
			ms := "missing"
			if a.Ms != nil {
				ms = fmt.Sprint(*a.Ms)
			}
			return fmt.Errorf(`need "ms" > 0 (and "jitter" >= 0), got ms %s, jitter %d (heal removes delays)`, ms, a.Jitter)
		}
		return nil
	case "producer-rate":
		if err := needName(); err != nil {
			return err
		}
		if a.Rate == nil {
			return errors.New(`missing "rate" (records per second; 0: as fast as possible)`)
		}
		return checkRate(*a.Rate)
	case "producer-start":
		return a.validateProducer()
	case "consumer-start":
		return a.validateConsumer()
	case "reset-offsets":
		switch {
		case a.Group == "":
			return errors.New(`missing "group"`)
		case a.Topic == "":
			return errors.New(`missing "topic"`)
		case a.Partition == nil || *a.Partition < 0:
			return errors.New(`need "partition" 0 or more`)
		case a.Offset == nil || *a.Offset < 0:
			return errors.New(`need "offset" 0 or more`)
		}
		return nil
	case "predict-consumers", "predict-order":
		return a.validatePredict()
	case "experiment-run":
		if a.Name == "" {
			return fmt.Errorf(`missing "name" (one of %s)`, strings.Join(experimentNames(), ", "))
		}
		if _, ok := experiment.Lookup(a.Name); !ok {
			return fmt.Errorf("no experiment %q (have %s)", a.Name, strings.Join(experimentNames(), ", "))
		}
		return nil
	}
	return fmt.Errorf("unknown action %q", a.Action)
}

func checkRate(r float64) error {
	if r < 0 || math.IsNaN(r) || math.IsInf(r, 0) {
		return fmt.Errorf(`"rate" %v: want records per second, 0 (as fast as possible) or more`, r)
	}
	return nil
}

func (a *action) checkNewName() error {
	if a.Name != "" && !processName.MatchString(a.Name) {
		return fmt.Errorf(`"name" %q: want letters, digits, '.', '_' or '-' (at most 63)`, a.Name)
	}
	return nil
}

// validateProducer checks producer-start as producerd would, and fills
// the defaults.
func (a *action) validateProducer() error {
	if err := a.checkNewName(); err != nil {
		return err
	}
	if a.Topic == "" {
		a.Topic = defaultTopic
	}
	if a.Rate == nil {
		r := defaultRate
		a.Rate = &r
	}
	if err := checkRate(*a.Rate); err != nil {
		return err
	}
	if a.Keys == nil {
		on := true
		a.Keys = &on
	}
	if a.Acks == "" {
		a.Acks = "all"
	}
	switch {
	case a.Acks != "0" && a.Acks != "1" && a.Acks != "all":
		return fmt.Errorf(`"acks" %q: want "0", "1" or "all"`, a.Acks)
	case a.HotKeyShare < 0 || a.HotKeyShare > 1 || math.IsNaN(a.HotKeyShare):
		return fmt.Errorf(`"hotKeyShare" %v: want a share between 0 and 1`, a.HotKeyShare)
	case a.HotKeyShare > 0 && !*a.Keys:
		return fmt.Errorf(`"hotKeyShare" %v needs "keys" on (a hot key is a key)`, a.HotKeyShare)
	case a.Idempotent && a.Acks != "all":
		return fmt.Errorf(`"idempotent" needs "acks" "all", not %q (as Kafka's enable.idempotence)`, a.Acks)
	}
	return nil
}

// validateConsumer checks consumer-start as consumerd would, and fills the
// defaults.
func (a *action) validateConsumer() error {
	if err := a.checkNewName(); err != nil {
		return err
	}
	if a.Group == "" {
		a.Group = defaultGroup
	}
	if a.Topic == "" {
		a.Topic = defaultTopic
	}
	if a.RecordsPerPoll == 0 {
		a.RecordsPerPoll = defaultRecordsPerPoll
	}
	if a.Commit == "" {
		a.Commit = "after"
	}
	if a.Assignor == "" {
		a.Assignor = assign.CooperativeStickyName
	}
	switch {
	case a.RecordsPerPoll < 0:
		return fmt.Errorf(`"recordsPerPoll" %d: want at least 1`, a.RecordsPerPoll)
	case a.Commit != "after" && a.Commit != "before" && a.Commit != "auto":
		return fmt.Errorf(`"commit" %q: want "after", "before" or "auto"`, a.Commit)
	case a.Assignor != assign.CooperativeStickyName && a.Assignor != assign.RangeName:
		return fmt.Errorf(`"assignor" %q: want %q or %q`, a.Assignor, assign.CooperativeStickyName, assign.RangeName)
	case a.ProcessTime < 0:
		return fmt.Errorf(`"processTime" %d ms: want 0 or more`, a.ProcessTime)
	}
	return nil
}

func experimentNames() []string {
	var names []string
	for _, x := range experiment.All() {
		names = append(names, x.Name)
	}
	return names
}

// errorAnswer is the HTTP status and the error text of a failed action:
// the Kafka error name first when the error carries one.
func errorAnswer(err error) (int, string) {
	text := err.Error()
	if code := kerr.CodeOf(err); code != "" && !strings.Contains(text, string(code)) {
		text = string(code) + ": " + text
	}
	var he *httpError
	var active *offsetreset.ActiveError
	switch {
	case errors.As(err, &he):
		return he.code, text
	case errors.As(err, &active):
		return http.StatusConflict, text
	case errors.Is(err, launch.ErrUnknownProcess):
		return http.StatusNotFound, text
	case errors.Is(err, launch.ErrNotRunning), errors.Is(err, launch.ErrNoLinks):
		return http.StatusConflict, text
	case errors.Is(err, launch.ErrClosed):
		return http.StatusServiceUnavailable, text
	case kerr.CodeOf(err) != "":
		return http.StatusConflict, text
	}
	if st, ok := status.FromError(err); ok {
		switch st.Code() {
		case codes.InvalidArgument:
			return http.StatusBadRequest, text
		case codes.FailedPrecondition, codes.AlreadyExists:
			return http.StatusConflict, text
		case codes.Unavailable, codes.DeadlineExceeded:
			return http.StatusServiceUnavailable, text
		}
	}
	return http.StatusInternalServerError, text
}
