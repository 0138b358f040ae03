package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/dashboard"
)

var livePageLine = regexp.MustCompile(`(?m)^live page: (http://127\.0\.0\.1:\d+/)\?token=([A-Za-z0-9]{20,})$`)

// runUp runs `cluster up` with fake brokers until the summary is printed
// and returns its stdout and a func that interrupts it and waits.
func runUp(t *testing.T, args ...string) (*lockedBuffer, func()) {
	t.Helper()
	brokerd := fakeBrokerd(t)
	var stdout, stderr lockedBuffer
	ctx, interrupt := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- (&upCommand{stdout: &stdout, stderr: &stderr}).Run(ctx,
			append([]string{"--brokers", "2", "--dir", t.TempDir(), "--brokerd", brokerd, "--timeout", "20s"}, args...))
	}()
	show := func() string { return "stdout:\n" + stdout.String() + "\nstderr:\n" + stderr.String() }
	eventually(t, "the cluster to be ready", func() bool {
		select {
		case err := <-done:
			t.Fatalf("up returned early: %v\n%s", err, show())
		default:
		}
		return strings.Contains(stdout.String(), "Supervising")
	}, show)
	stop := func() {
		interrupt()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("up after interrupt: %v\n%s", err, show())
			}
		case <-time.After(20 * time.Second):
			t.Errorf("up did not return after interrupt\n%s", show())
		}
	}
	return &stdout, stop
}

// TestUpServesTheLivePage: the summary names the live page with the
// launch's token, which serves the page and the state of the launcher's
// brokers until Ctrl-C; an action needs the token (the printed URL gives
// the browser its cookie).
func TestUpServesTheLivePage(t *testing.T) {
	stdout, stop := runUp(t)
	m := livePageLine.FindStringSubmatch(stdout.String())
	if m == nil {
		stop()
		t.Fatalf("no live page with a token in the summary:\n%s", stdout.String())
	}
	url, token := m[1], m[2]
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET %s: %s %s", url, resp.Status, resp.Header.Get("Content-Type"))
	}
	var state struct {
		Brokers []struct {
			Name, State string
		} `json:"brokers"`
	}
	eventually(t, "two running brokers in /api/state", func() bool {
		resp, err := http.Get(url + "api/state")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return json.NewDecoder(resp.Body).Decode(&state) == nil && len(state.Brokers) == 2 &&
			state.Brokers[0].Name == "broker-1" && state.Brokers[0].State == "running"
	}, func() string { return stdout.String() })

	// An unknown action gets past the guards only with the token: 400
	// "unknown action", not 403.
	act := func(cl *http.Client, header string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, url+"api/action", strings.NewReader(`{"action":"explode"}`))
		req.Header.Set("Content-Type", "application/json")
		if header != "" {
			req.Header.Set(dashboard.TokenHeader, header)
		}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := act(http.DefaultClient, ""); code != http.StatusForbidden || !strings.Contains(body, "no token") {
		t.Errorf("an action without the token: %d %s", code, body)
	}
	if code, body := act(http.DefaultClient, token); code != http.StatusBadRequest || !strings.Contains(body, "unknown action") {
		t.Errorf("an action with the printed token: %d %s", code, body)
	}
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar}
	resp, err = browser.Get(m[0][len("live page: "):])
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.String() != url {
		t.Errorf("GET the printed URL: %s, ends at %s", resp.Status, resp.Request.URL)
	}
	if code, body := act(browser, ""); code != http.StatusBadRequest || !strings.Contains(body, "unknown action") {
		t.Errorf("an action with the cookie of the printed URL: %d %s", code, body)
	}
	stop()
	if _, err := http.Get(url); err == nil {
		t.Fatalf("the live page still answers after up returned")
	}
}

func TestUpWithoutLivePage(t *testing.T) {
	stdout, stop := runUp(t, "--web-listen", "")
	stop()
	if strings.Contains(stdout.String(), "live page") {
		t.Fatalf("--web-listen '' printed a live page:\n%s", stdout.String())
	}
}
