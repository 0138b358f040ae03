package systest

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/check"
	"github.com/tapes-dev/tapes/internal/eventually"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
)

// producerd --transactional-id (issue 13 point 3): a first incarnation is
// SIGKILLed mid-run, a second with the same id fences it and runs to its
// end; read_committed holds whole transactions of the first (none of its
// open one) and all of the second, and chaos check --txn-history finds
// nothing with --expect exactly-once.
func TestProducerdTransactionalKilledThenFenced(t *testing.T) {
	e := start(t, 3)
	const topic, parts, per = "txorders", 3, 50
	e.CreateTopic(topic, parts, 3, nil)
	dir := t.TempDir()
	h1, h2 := filepath.Join(dir, "p1.jsonl"), filepath.Join(dir, "p2.jsonl")

	p1 := startProducerd(t, e, "--topic", topic, "--transactional-id", "tx-orders", "--txn-records", fmt.Sprint(per),
		"--rate", "400/s", "--history", h1, "--name", "p1")
	eventually.Nil(t, 60*time.Second, "p1 commits 3 transactions", func() error {
		st, err := p1.control().Status(context.Background(), &tapesv1.StatusRequest{})
		if err != nil {
			return err
		}
		if st.TransactionalId != "tx-orders" || st.TransactionsCommitted < 3 {
			return fmt.Errorf("status %v", st)
		}
		return nil
	})
	if err := p1.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p1.exited

	code, out, errOut := runProducerd(t, e, "--topic", topic, "--transactional-id", "tx-orders", "--txn-records", fmt.Sprint(per),
		"--rate", "0", "--count", "120", "--history", h2, "--name", "p2")
	if code != 0 {
		t.Fatalf("second producerd exited %d\n%s\n%s", code, out, tail(errOut, 4000))
	}
	if !strings.Contains(out, "committed           120 records in 3 transactions") {
		t.Fatalf("second producerd's summary:\n%s", out)
	}

	// What each incarnation's history says of its transactions.
	sends := map[string][]string{} // txn -> event ids
	okCommit, reqCommit := map[string]bool{}, map[string]bool{}
	for _, h := range []string{h1, h2} {
		lines, err := check.ReadTxnHistory(h)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			switch {
			case l.Type == check.TxnSend:
				sends[l.Txn] = append(sends[l.Txn], l.EventID)
			case l.Type == check.TxnEnd && l.Outcome == check.OutcomeCommit && l.Status == check.EndOK:
				okCommit[l.Txn] = true
			case l.Type == check.TxnEnd && l.Outcome == check.OutcomeCommit && l.Status == check.EndRequested:
				reqCommit[l.Txn] = true
			}
		}
	}
	idOf := func(v string) string { return strings.TrimRight(v, ".") }
	committed, uncommitted := map[string]bool{}, map[string]bool{}
	for v := range grpcRead(t, e, topic, parts, 1) {
		committed[idOf(v)] = true
	}
	for v := range grpcRead(t, e, topic, parts, 0) {
		uncommitted[idOf(v)] = true
	}
	var p1n, p2n int
	for id := range committed {
		switch {
		case strings.HasPrefix(id, "p1-"):
			p1n++
		case strings.HasPrefix(id, "p2-"):
			p2n++
		}
		if !uncommitted[id] {
			t.Errorf("%s read_committed but not read_uncommitted", id)
		}
	}
	if p1n == 0 || p1n%per != 0 || p2n != 120 {
		t.Errorf("read_committed: %d records of p1 (want a positive multiple of %d), %d of p2 (want 120)", p1n, per, p2n)
	}
	for txn, ids := range sends {
		for _, id := range ids {
			switch {
			case okCommit[txn] && !committed[id]:
				t.Errorf("%s of committed transaction %s not read_committed", id, txn)
			case !reqCommit[txn] && committed[id]:
				t.Errorf("%s of transaction %s, never asked to commit, is read_committed", id, txn)
			}
		}
	}
	if len(uncommitted) < len(committed) {
		t.Errorf("read_uncommitted %d < read_committed %d", len(uncommitted), len(committed))
	}
	t.Logf("p1: %d records committed (%d transactions in its history); read_uncommitted holds %d records, read_committed %d",
		p1n, len(okCommit)-3, len(uncommitted), len(committed))

	// Only the histories: --dir would ask for a read of the topic.
	if out, err := exec.Command(filepath.Join(binDir, "chaos"), "check", "--txn-history", h1+","+h2, "--expect", "exactly-once").CombinedOutput(); err != nil {
		t.Fatalf("chaos check --txn-history: %v:\n%s", err, out)
	} else {
		t.Logf("chaos check --txn-history:\n%s", out)
	}
}
