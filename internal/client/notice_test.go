package client

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestWarnUnreachableAtOnceThenPeriodically(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out bytes.Buffer
		log := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}))
		warn := WarnUnreachable(log, 30*time.Second, "is the cluster running?")
		down := Retry{Op: "metadata", Unreachable: []string{"127.0.0.1:1"}}
		warn(Retry{Op: "produce orders-0"}) // an answering cluster: not a warning
		for range 10 {                      // 10 retries over 18 s: one line
			warn(down)
			time.Sleep(2 * time.Second)
		}
		time.Sleep(12 * time.Second) // 30 s after the first
		warn(down)
		got := strings.Count(out.String(), "no broker answers at 127.0.0.1:1; retrying")
		if got != 2 || !strings.Contains(out.String(), `hint="is the cluster running?"`) {
			t.Fatalf("log:\n%s\nwant 2 warnings with the hint", out.String())
		}
	})
}
