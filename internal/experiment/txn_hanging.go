package experiment

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/tapes-dev/tapes/internal/check"
)

func init() {
	register(&Experiment{
		Name: "hanging-transaction",
		About: `A producer dies with a transaction open, and read_committed readers wait for its timeout. Two
transactional producerd write to ledger (one partition): txn-live commits transactions of 10 records
at 40 records/s for --duration (default 45 s); txn-dying commits transactions of 40 with
--transaction-timeout = --duration/3 (15 s) and is SIGKILLed with one open, its records in the log.
A read_committed reader follows the partition from the start, recording the last stable offset and
the high watermark of every fetch: the LSO stays at the dead transaction's first offset while
txn-live's committed records pile up above it (the lag), until the coordinator's timeout aborts the
transaction; then the LSO moves on and the reader gets the records held back. The report shows the
hang measured from the reader's history beside the configured timeout, and the largest lag; the
live page shows the same as "LSO lag N · not moved for T" on the tape. The run fails if the LSO moved
before the timeout, never moved, or the reader did not get the later committed records.`,
		Expect:   check.Expectation{Name: "exactly-once, hung-lso", MustBeZero: check.ExactlyOnce.MustBeZero, MustBePositive: []string{check.HungLSO}},
		Duration: 45 * time.Second,
		Run:      hangingRun,
		Verdict: func(e *Env, r *check.Result) []string {
			return hangingVerdict(e, r)
		},
	})
}

const (
	hangTopic   = "ledger"
	hangLive    = "txn-live"
	hangDying   = "txn-dying"
	hangReaders = "txn-readers"
	hangFollow  = "reader-follow"
)

// hangTimeout is the dying producer's transaction.timeout.ms for a run of
// duration d: a third of it, at least 2 s, in whole seconds.
func hangTimeout(d time.Duration) time.Duration {
	return max(2*time.Second, (d / 3).Truncate(time.Second))
}

func hangingRun(ctx context.Context, e *Env) error {
	timeout := hangTimeout(e.Duration)
	e.mu.Lock()
	e.hungLSOAfter = timeout / 2
	e.mu.Unlock()
	e.Set("txn-dying's transaction.timeout.ms (--transaction-timeout)", timeout.String())
	e.Set("hung-lso threshold of the checker (half the timeout)", (timeout / 2).String())
	if err := e.CreateTopic(ctx, hangTopic, 1, 3, map[string]string{"min.insync.replicas": "2"}); err != nil {
		return err
	}
	h, err := check.CreateTxnHistory(e.History(hangReaders))
	if err != nil {
		return err
	}
	defer h.Close()
	f := check.FollowLSO(ctx, e.Client, hangTopic, 0, hangFollow, h)
	defer f.Stop()

	if err := e.StartProducer(hangLive, "--topic", hangTopic, "--transactional-id", "ledger-live", "--txn-records", "10",
		"--rate", "40/s", "--duration", e.Duration.String()); err != nil {
		return err
	}
	if err := e.StartProducer(hangDying, "--topic", hangTopic, "--transactional-id", "ledger-dying", "--txn-records", "40",
		"--rate", "40/s", "--transaction-timeout", timeout.String()); err != nil {
		return err
	}
	if _, err := e.waitSummary(ctx, hangDying, "two transactions committed and one open with records in the log", time.Minute,
		func(s txnSummary) bool { return s.Committed >= 2 && s.Open != nil && s.Open.Sent >= 10 }); err != nil {
		return err
	}
	if _, err := e.Fault("SIGKILL "+hangDying+" with a transaction open", func() error { return e.C.Kill(hangDying) }); err != nil {
		return err
	}
	killed := time.Now()
	d, err := readSummary(e.History(hangDying))
	if err != nil {
		return err
	}
	if d.Open == nil {
		return fmt.Errorf("%s: no open transaction in its history after the kill", hangDying)
	}
	first := d.Open.First[0]
	e.Note(fmt.Sprintf("%s died with transaction %s (epoch %d) open since %s: %d records from offset %d, not committed; the LSO cannot pass %d until the coordinator aborts it, %v after it began",
		hangDying, d.Open.Txn, d.Open.Epoch, d.Open.Begin.UTC().Format("15:04:05.000"), d.Open.Sent, first, first, timeout))
	// The LSO moves once the timeout (checked every second) aborted it.
	for f.LSO() <= first {
		if time.Since(killed) > timeout+time.Minute {
			return fmt.Errorf("the LSO of %s-0 is still %d, %v after the kill (transaction timeout %v)", hangTopic, f.LSO(), time.Since(killed).Round(time.Millisecond), timeout)
		}
		if err := f.Err(); err != nil {
			return err
		}
		if err := e.Sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	e.Note(fmt.Sprintf("the LSO moved past %d to %d, %.1f s after %s began (its timeout %v)",
		first, f.LSO(), time.Since(d.Open.Begin).Seconds(), d.Open.Txn, timeout))
	if err := e.waitExit(ctx, hangLive, e.Duration+2*time.Minute); err != nil {
		return err
	}
	if err := f.Finish(2 * time.Minute); err != nil {
		return err
	}
	read, err := e.readBack(ctx, hangTopic, h)
	if err != nil {
		return err
	}
	for level, ids := range read {
		e.Set(hangTopic+" records read back "+level, strconv.Itoa(len(ids)))
	}
	return nil
}

// hangingVerdict: the dead transaction is found in txn-dying's history;
// the checker's longest LSO stretch is at its first offset and ended with
// the LSO moving, no earlier than the timeout after the transaction began
// (so the timeout, nothing else, aborted it); the follower read committed
// records above that offset (the LSO moved on) and none of the dead
// transaction's; read_uncommitted saw them.
func hangingVerdict(e *Env, r *check.Result) []string {
	d, err := readSummary(e.History(hangDying))
	if err != nil {
		return []string{err.Error()}
	}
	lines, err := check.ReadTxnHistory(e.History(hangReaders))
	if err != nil {
		return []string{err.Error()}
	}
	timeout := hangTimeout(e.Duration)
	why, figures := judgeHang(d, lines, hangFollow, r.Txn, timeout)
	for _, kv := range figures {
		e.Set(kv[0], kv[1])
	}
	return why
}

// judgeHang is hangingVerdict on the histories and the checker's
// transactional result; figures are the report's settings.
func judgeHang(d txnSummary, readers []check.TxnLine, follower string, st *check.TxnStats, timeout time.Duration) (why []string, figures [][2]string) {
	if d.Open == nil || d.Open.Sent == 0 {
		return []string{"txn-dying's history has no open transaction with records in the log: the run proves nothing"}, nil
	}
	first, ok := d.Open.First[0]
	if !ok {
		return []string{"txn-dying's open transaction wrote nothing to partition 0"}, nil
	}
	if st == nil || st.LongestLSOHang == nil {
		return []string{"no LSO stretch in the reader's history"}, nil
	}
	h := st.LongestLSOHang
	after := h.To.Sub(d.Open.Begin)
	figures = [][2]string{
		{"LSO hang (from the reader's history)", fmt.Sprintf("%.1f s at offset %d (%s to %s), reader %s", h.Seconds, h.LSO, fmtClock(h.From), fmtClock(h.To), h.Reader)},
		{"LSO moved after the dead transaction began", fmt.Sprintf("%.1f s (transaction.timeout.ms %v)", after.Seconds(), timeout)},
		{"largest lag behind the LSO (high watermark - LSO)", fmt.Sprintf("%d records", h.MaxHW-h.LSO)},
	}
	if h.LSO != first {
		why = append(why, fmt.Sprintf("the longest LSO stretch is at offset %d, not at the dead transaction's first offset %d", h.LSO, first))
	}
	if !h.Moved || h.Caught {
		why = append(why, fmt.Sprintf("the LSO did not move on from %d while records were above it", h.LSO))
	}
	if after < timeout {
		why = append(why, fmt.Sprintf("the LSO moved %.1f s after the dead transaction began, before its timeout %v: something else ended it", after.Seconds(), timeout))
	}
	level := map[string]string{}
	var later, dead, deadUncommitted int
	for _, l := range readers {
		switch l.Type {
		case check.TxnIsolation:
			level[l.Process] = l.Isolation
		case check.TxnRead:
			inDead := d.Sent[l.EventID] && !d.CommittedIDs[l.EventID]
			switch {
			case level[l.Process] == check.ReadCommitted && inDead:
				dead++
			case l.Process == follower && *l.Offset > first && !l.At.Before(h.To):
				later++
			case level[l.Process] == check.ReadUncommitted && inDead:
				deadUncommitted++
			}
		}
	}
	figures = append(figures, [2]string{"records above the dead transaction read read_committed once the LSO moved", strconv.Itoa(later)})
	if later == 0 {
		why = append(why, fmt.Sprintf("no read_committed read above offset %d after the LSO moved: the reader did not get the later committed records", first))
	}
	if dead > 0 {
		why = append(why, fmt.Sprintf("%d records of the dead transaction read read_committed", dead))
	}
	if deadUncommitted == 0 {
		why = append(why, "read_uncommitted saw none of the dead transaction's records")
	}
	return why, figures
}

func fmtClock(t time.Time) string { return t.UTC().Format("15:04:05.000") }
