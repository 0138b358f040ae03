package systest

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/check"
	"github.com/tapes-dev/tapes/internal/netns"
	"github.com/tapes-dev/tapes/internal/report"
)

// TestIPPartitionBehavesAsLinkCut runs acks1-leader-isolation and
// acksall-leader-isolation with the brokers on hosts of their own (three
// network namespaces joined by a bridge; the producer and the observer in
// this test's namespace reach them over it), the leader's isolation made by
// dropping its packets to and from the other hosts (nftables) instead of
// cutting links. As with the link cut: a broker other than the isolated one
// leads orders-0 before the heal (the majority elected it); with acks=1 the
// checker names acknowledged records that are lost (the minority-side
// leader acknowledged them, then lost its leadership and truncated them);
// with acks=all nothing is lost. Root only; nothing is left behind.
func TestIPPartitionBehavesAsLinkCut(t *testing.T) {
	if err := netns.Available(); err != nil {
		t.Skipf("skipped: %v", err)
	}
	t.Cleanup(func() {
		if left := netns.Leftovers(context.Background(), netns.DefaultPrefix); len(left) > 0 {
			t.Errorf("left behind (now removed): %v", left)
		}
	})
	for _, c := range []struct {
		name  string
		check func(t *testing.T, r check.Result)
	}{
		{"acks1-leader-isolation", func(t *testing.T, r check.Result) {
			if r.Counts[check.LostWrite] == 0 || len(r.Anomalies) == 0 || len(r.Anomalies[0].Offsets) == 0 {
				t.Fatalf("acks=1 across a dropped-packet partition: no lost write named (%v)", r.Counts)
			}
		}},
		{"acksall-leader-isolation", func(t *testing.T, r check.Result) {
			if r.Acked == 0 {
				t.Fatal("nothing was acknowledged: the run proves nothing")
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), c.name)
			o := runExperimentIn(t, c.name, 0, out, true)
			c.check(t, o.Result)
			isolated, elected := leadersDuringIsolation(t, filepath.Join(out, "events.jsonl"))
			if len(elected) == 0 {
				t.Fatalf("no broker but %s led orders-0 while it was isolated", isolated)
			}
			t.Logf("isolated %s; leaders elected meanwhile: %v", isolated, elected)
		})
	}
}

// leadersDuringIsolation reads an experiment's timeline: the broker whose
// host was isolated, and the other brokers seen leading orders-0 between
// the fault's start and end.
func leadersDuringIsolation(t *testing.T, path string) (string, []string) {
	t.Helper()
	events, err := report.ReadEvents(path)
	if err != nil {
		t.Fatal(err)
	}
	var isolated string
	var start, end time.Time
	for _, e := range events {
		switch {
		case e.Type == report.EventFaultStart && strings.HasPrefix(e.What, "isolate "):
			isolated, start = strings.Fields(e.What)[1], e.At
		case e.Type == report.EventFaultEnd && isolated != "" && end.IsZero():
			end = e.At
		}
	}
	if isolated == "" || end.IsZero() {
		t.Fatalf("%s: no isolation fault with its end", path)
	}
	var elected []string
	for _, e := range events {
		name := fmt.Sprintf("broker-%d", e.Leader)
		if e.Type == report.EventLeader && e.Topic == "orders" && e.Partition == 0 && e.Leader > 0 &&
			name != isolated && e.At.After(start) && e.At.Before(end) {
			elected = append(elected, name)
		}
	}
	return isolated, elected
}
