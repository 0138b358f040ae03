package systest

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
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
	// Killed with a transaction open: some of its records sent, not all.
	eventually.Nil(t, 60*time.Second, "p1 commits 3 transactions and has one open", func() error {
		st, err := p1.control().Status(context.Background(), &tapesv1.StatusRequest{})
		if err != nil {
			return err
		}
		if st.TransactionalId != "tx-orders" || st.TransactionsCommitted < 3 || st.Sent%per == 0 {
			return fmt.Errorf("status %v", st)
		}
		if err := p1.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		return nil
	})
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
	okCommit, reqCommit, ended := map[string]bool{}, map[string]bool{}, map[string]bool{}
	var begun []string
	for _, h := range []string{h1, h2} {
		lines, err := check.ReadTxnHistory(h)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			switch {
			case l.Type == check.TxnBegin:
				begun = append(begun, l.Txn)
			case l.Type == check.TxnSend:
				sends[l.Txn] = append(sends[l.Txn], l.EventID)
			case l.Type == check.TxnEnd && l.Status != check.EndRequested:
				ended[l.Txn] = true
				okCommit[l.Txn] = l.Outcome == check.OutcomeCommit && l.Status == check.EndOK
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
	open := 0
	for _, txn := range begun {
		if !ended[txn] {
			open++
		}
	}
	for txn, ids := range sends {
		for _, id := range ids {
			switch {
			case okCommit[txn] && !committed[id]:
				t.Errorf("%s of committed transaction %s not read_committed", id, txn)
			case !reqCommit[txn] && committed[id]:
				t.Errorf("%s of transaction %s, never asked to commit, is read_committed", id, txn)
			case !reqCommit[txn] && !uncommitted[id]:
				t.Errorf("%s of the open transaction %s, sent, is not even read_uncommitted", id, txn)
			}
		}
	}
	if open != 1 || len(uncommitted) <= len(committed) {
		t.Errorf("%d transactions open at the kill (want 1); read_uncommitted %d records, read_committed %d (want more)", open, len(uncommitted), len(committed))
	}
	t.Logf("p1: %d records read_committed; read_uncommitted holds %d records, read_committed %d", p1n, len(uncommitted), len(committed))

	// Only the histories: --dir would ask for a read of the topic.
	if out, err := exec.Command(filepath.Join(binDir, "chaos"), "check", "--txn-history", h1+","+h2, "--expect", "exactly-once").CombinedOutput(); err != nil {
		t.Fatalf("chaos check --txn-history: %v:\n%s", err, out)
	} else {
		t.Logf("chaos check --txn-history:\n%s", out)
	}
}

// SIGTERM with a transaction open: producerd commits it, writes the
// history and exits 0; every record it sent is read_committed.
func TestProducerdTransactionalSIGTERMCommitsTheOpenTransaction(t *testing.T) {
	e := start(t, 3)
	const topic = "txterm"
	e.CreateTopic(topic, 2, 3, nil)
	h := filepath.Join(t.TempDir(), "p.jsonl")
	p := startProducerd(t, e, "--topic", topic, "--transactional-id", "tx-term", "--txn-records", "40", "--rate", "300/s", "--history", h, "--name", "pt")
	eventually.Nil(t, 60*time.Second, "a transaction committed and one open", func() error {
		st, err := p.control().Status(context.Background(), &tapesv1.StatusRequest{})
		if err != nil {
			return err
		}
		if st.TransactionsCommitted < 1 || st.Sent%40 == 0 {
			return fmt.Errorf("status %v", st)
		}
		return p.cmd.Process.Signal(syscall.SIGTERM)
	})
	if code := p.wait(60 * time.Second); code != 0 {
		t.Fatalf("producerd exited %d after SIGTERM", code)
	}
	lines, err := check.ReadTxnHistory(h)
	if err != nil {
		t.Fatal(err)
	}
	sent, ended := map[string]bool{}, map[string]bool{}
	for _, l := range lines {
		switch {
		case l.Type == check.TxnSend:
			sent[l.EventID] = true
		case l.Type == check.TxnEnd && l.Status == check.EndOK && l.Outcome == check.OutcomeCommit:
			ended[l.Txn] = true
		}
	}
	committed := grpcRead(t, e, topic, 2, 1)
	if len(committed) != len(sent) || len(sent)%40 == 0 {
		t.Fatalf("%d records sent (want not a multiple of 40: the last transaction was cut by SIGTERM), %d read_committed", len(sent), len(committed))
	}
	for v := range committed {
		if !sent[strings.TrimRight(v, ".")] {
			t.Errorf("read_committed %q not in the history", v)
		}
	}
	if want := (len(sent) + 39) / 40; len(ended) != want {
		t.Errorf("%d transactions committed in the history, want %d", len(ended), want)
	}
}

// A zombie: a second producerd with the same transactional id fences the
// first, whose next write fails; the first says so and exits 1.
func TestProducerdTransactionalFencedExits(t *testing.T) {
	e := start(t, 3)
	const topic = "txzombie"
	e.CreateTopic(topic, 1, 3, nil)
	p1 := startProducerd(t, e, "--topic", topic, "--transactional-id", "tx-z", "--txn-records", "100000", "--rate", "50/s", "--name", "z1")
	eventually.Nil(t, 60*time.Second, "z1 has a transaction open", func() error {
		st, err := p1.control().Status(context.Background(), &tapesv1.StatusRequest{})
		if err != nil || st.Sent == 0 {
			return fmt.Errorf("status %v, %v", st, err)
		}
		return nil
	})
	if code, out, errOut := runProducerd(t, e, "--topic", topic, "--transactional-id", "tx-z", "--count", "10", "--name", "z2"); code != 0 {
		t.Fatalf("z2 exited %d\n%s\n%s", code, out, errOut)
	}
	if code := p1.wait(60 * time.Second); code != 1 {
		t.Fatalf("the fenced producerd exited %d, want 1", code)
	}
	if s := p1.stderr.String(); !strings.Contains(s, "fenced") {
		t.Fatalf("the fenced producerd's stderr does not say fenced:\n%s", tail(s, 2000))
	}
	committed := grpcRead(t, e, topic, 1, 1)
	if len(committed) != 10 {
		t.Errorf("read_committed holds %d records, want z2's 10 only", len(committed))
	}
}
