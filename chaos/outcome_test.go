package main

import (
	"strings"
	"testing"

	"github.com/tapes-dev/tapes/internal/check"
	"github.com/tapes-dev/tapes/internal/experiment"
)

// TestPrintOutcome: the summary line gives the plain producer's counts when
// there is a producer history, and the transactions' counts when the run
// has only transactional histories (no "0 sent ... -1 read back").
func TestPrintOutcome(t *testing.T) {
	x := &experiment.Experiment{Name: "x", Expect: check.ExactlyOnce}
	for _, tc := range []struct {
		name      string
		res       check.Result
		want, not []string
	}{
		{"plain", check.Result{Sent: 10, Acked: 9, Failed: 1, Processed: 9, LogRecords: 9},
			[]string{"x: 10 sent, 9 acknowledged, 1 failed; 9 records processed by consumers; 9 read back;"}, []string{"transactions"}},
		{"plain without a read", check.Result{Sent: 10, Acked: 10, LogRecords: -1},
			[]string{"10 sent, 10 acknowledged"}, []string{"read back"}},
		{"transactional only", check.Result{LogRecords: -1, Txn: &check.TxnStats{Transactions: 91, Committed: 81, Aborted: 10, Steps: 91,
			ReadCommitted: 4000, ReadUncommitted: 4276, AbortedSeenUncommitted: 276, Effects: 4207, ExternalDuplicates: 207,
			LongestLSOHang: &check.LSOHang{Topic: "out", Partition: 2, LSO: 17, Seconds: 4.5}}},
			[]string{"x: 91 transactions (81 committed, 10 aborted, 0 unknown), 91 read-process-write steps",
				"4000 read_committed, 4276 read_uncommitted (276 of aborted writes)", "4207 external effects (207 duplicates)",
				"longest LSO hang 4.5 s (out-2 at 17)"}, []string{"sent", "read back"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			printOutcome(&b, x, &experiment.Outcome{Result: tc.res, Valid: true, Report: "r.html"})
			out := b.String()
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(out, n) {
					t.Errorf("output has %q:\n%s", n, out)
				}
			}
		})
	}
}
