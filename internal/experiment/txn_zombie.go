package experiment

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/tapes-dev/tapes/internal/check"
)

func init() {
	register(&Experiment{
		Name: "zombie-fencing",
		About: `A zombie producer fenced by its successor. producerd txn-zombie (transactional id payments-writer)
writes to payments at 50 records/s in one long transaction; once 30 of its records are in the log,
not committed, it is paused with SIGSTOP. A successor, txn-successor, starts with the same
transactional id: its InitProducerId bumps the epoch, which fences the zombie's epoch and makes
the coordinator abort the zombie's open transaction; it then commits transactions of 20 records
for --duration (default 20 s). Then the zombie is resumed (SIGCONT): its next request is refused
PRODUCER_FENCED / INVALID_PRODUCER_EPOCH and it exits with status 1. payments is read back
read_committed (every record of the successor's committed transactions, none of the zombie's) and
read_uncommitted (the zombie's records are there, aborted). The report lists the steps in order
with the producer id and epochs; the checker (exactly-once, zombie-commit included) and the verdict
fail if any zombie record is visible to read_committed.`,
		Expect:   check.ExactlyOnce,
		Duration: 20 * time.Second,
		Run:      zombieRun,
		Verdict: func(e *Env, r *check.Result) []string {
			return fencingVerdict(e.History(zombieName), e.History(successorName), e.History(zombieReaders), e.exitOf(zombieName))
		},
	})
}

const (
	zombieTopic     = "payments"
	zombieTxnID     = "payments-writer"
	zombieName      = "txn-zombie"
	successorName   = "txn-successor"
	zombieReaders   = "txn-readers"
	zombieOpenRecs  = 30
	successorTxnLen = 20
)

// zombieRun: the zombie's open transaction, SIGSTOP, the successor's
// fencing and commits, SIGCONT, the zombie's exit, the read-back.
func zombieRun(ctx context.Context, e *Env) error {
	if err := e.CreateTopic(ctx, zombieTopic, 3, 3, map[string]string{"min.insync.replicas": "2"}); err != nil {
		return err
	}
	// The zombie's transaction must outlive the pause: only the
	// successor's InitProducerId may end it, not the timeout.
	timeout := e.Duration + 3*time.Minute
	e.Set("transactional id", zombieTxnID)
	e.Set("zombie's --transaction-timeout (longer than the pause: only the successor ends its transaction)", timeout.String())
	if err := e.StartProducer(zombieName, "--topic", zombieTopic, "--transactional-id", zombieTxnID, "--txn-records", "1000000",
		"--rate", "50/s", "--transaction-timeout", timeout.String()); err != nil {
		return err
	}
	z, err := e.waitSummary(ctx, zombieName, fmt.Sprintf("%d records of an open transaction in the log", zombieOpenRecs), time.Minute,
		func(s txnSummary) bool { return s.Open != nil && s.Open.Sent >= zombieOpenRecs })
	if err != nil {
		return err
	}
	pause, err := e.Fault("SIGSTOP "+zombieName+" mid-transaction", func() error { return e.C.Pause(zombieName) })
	if err != nil {
		return err
	}
	// Read after the pause: what the zombie had sent when it stopped.
	if z, err = readSummary(e.History(zombieName)); err != nil {
		return err
	}
	zepoch := z.Open.Epoch
	e.Note(fmt.Sprintf("1. %s (producer id %d, epoch %d) paused with transaction %s open: %d records in the log, not committed",
		zombieName, z.ProducerID, zepoch, z.Open.Txn, z.Open.Sent))
	e.Set("zombie: producer id / epoch", fmt.Sprintf("%d / %d", z.ProducerID, zepoch))
	e.Set("zombie: records of its open transaction in the log when paused", strconv.Itoa(z.Open.Sent))

	if err := e.StartProducer(successorName, "--topic", zombieTopic, "--transactional-id", zombieTxnID, "--txn-records", strconv.Itoa(successorTxnLen),
		"--rate", "50/s", "--duration", e.Duration.String()); err != nil {
		return err
	}
	s, err := e.waitSummary(ctx, successorName, "its first transaction begun (InitProducerId answered)", time.Minute,
		func(s txnSummary) bool { return len(s.Epochs) > 0 })
	if err != nil {
		return err
	}
	e.Note(fmt.Sprintf("2. %s: InitProducerId with transactional id %s answered producer id %d, epoch %d: the coordinator aborted %s "+
		"with the epoch bumped past %d, so epoch %d is fenced", successorName, zombieTxnID, s.ProducerID, s.Epochs[0], z.Open.Txn, zepoch, zepoch))
	if err := e.waitExit(ctx, successorName, e.Duration+2*time.Minute); err != nil {
		return err
	}
	if s, err = readSummary(e.History(successorName)); err != nil {
		return err
	}
	e.Note(fmt.Sprintf("3. %s committed %d transactions (%d records) at epoch %v and exited", successorName, s.Committed, len(s.CommittedIDs), s.Epochs))
	e.Set("successor: producer id / epochs", fmt.Sprintf("%d / %v", s.ProducerID, s.Epochs))
	e.Set("successor: transactions committed", strconv.Itoa(s.Committed))

	if err := e.EndFault(pause, "SIGCONT "+zombieName, func() error { return e.C.Resume(zombieName) }); err != nil {
		return err
	}
	if err := e.waitExit(ctx, zombieName, 2*time.Minute); err != nil {
		return err
	}
	if z, err = readSummary(e.History(zombieName)); err != nil {
		return err
	}
	how := "no fencing error in its history"
	if z.Fenced != "" {
		how = "its next request refused " + z.Fenced + " at " + z.FencedAt.UTC().Format("15:04:05.000")
	}
	e.Note(fmt.Sprintf("4. %s resumed at epoch %d: %s; it exited (%s), having committed %d transactions", zombieName, zepoch, how, e.exitOf(zombieName), z.Committed))
	e.Set("zombie: after SIGCONT", how+"; "+e.exitOf(zombieName))

	h, err := check.CreateTxnHistory(e.History(zombieReaders))
	if err != nil {
		return err
	}
	defer h.Close()
	read, err := e.readBack(ctx, zombieTopic, h)
	if err != nil {
		return err
	}
	for _, level := range []string{check.ReadCommitted, check.ReadUncommitted} {
		ids := read[level]
		var zn, sn int
		for _, id := range ids {
			zn += b2i(z.Sent[id])
			sn += b2i(s.Sent[id])
		}
		e.Set(fmt.Sprintf("%s read %s: records of the zombie / of the successor", zombieTopic, level), fmt.Sprintf("%d / %d", zn, sn))
		e.Note(fmt.Sprintf("5. read back %s: %d records of %s, %d of %s", level, zn, zombieName, sn, successorName))
	}
	return nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// fencingVerdict: the zombie had records in the log when paused; the
// successor began at a higher epoch of the same producer id and committed;
// the resumed zombie was refused with a fencing error and exited 1,
// having committed nothing; read_committed (by the readers' isolation
// lines) saw none of the zombie's records and every committed record of
// the successor once; read_uncommitted saw the zombie's records.
func fencingVerdict(zombiePath, successorPath, readersPath, zombieExit string) []string {
	z, err := readSummary(zombiePath)
	if err != nil {
		return []string{err.Error()}
	}
	s, err := readSummary(successorPath)
	if err != nil {
		return []string{err.Error()}
	}
	lines, err := check.ReadTxnHistory(readersPath)
	if err != nil {
		return []string{err.Error()}
	}
	reads := readsByLevel(lines)
	var why []string
	if len(z.Sent) == 0 || len(z.Epochs) == 0 {
		why = append(why, "the zombie wrote nothing before its pause: the run proves nothing")
	}
	switch {
	case len(s.Epochs) == 0:
		why = append(why, "the successor began no transaction: nothing fenced the zombie")
	case len(z.Epochs) > 0 && s.Epochs[0] <= z.Epochs[len(z.Epochs)-1]:
		why = append(why, fmt.Sprintf("the successor's epoch %d is not above the zombie's %d: it did not fence it", s.Epochs[0], z.Epochs[len(z.Epochs)-1]))
	}
	if s.Committed == 0 {
		why = append(why, "the successor committed no transaction")
	}
	if z.Committed > 0 {
		why = append(why, fmt.Sprintf("the zombie committed %d transactions", z.Committed))
	}
	if z.Fenced == "" {
		why = append(why, "the resumed zombie's history has no "+fmt.Sprint(fencingErrors)+" error: it was not refused as fenced")
	}
	if zombieExit != "exit status 1" {
		why = append(why, fmt.Sprintf("the zombie ended %q, want exit status 1 (fenced)", zombieExit))
	}
	var visible, inLog []string
	for id := range z.Sent {
		if reads[check.ReadCommitted][id] > 0 {
			visible = append(visible, id)
		}
		if reads[check.ReadUncommitted][id] > 0 {
			inLog = append(inLog, id)
		}
	}
	slices.Sort(visible)
	if len(visible) > 0 {
		why = append(why, fmt.Sprintf("%d records of the zombie visible to read_committed, e.g. %s", len(visible), visible[0]))
	}
	if len(z.Sent) > 0 && len(inLog) == 0 {
		why = append(why, "read_uncommitted saw none of the zombie's records: its writes were not in the log, the run proves nothing")
	}
	var missing, twice int
	for id := range s.CommittedIDs {
		switch n := reads[check.ReadCommitted][id]; {
		case n == 0:
			missing++
		case n > 1:
			twice++
		}
	}
	if missing > 0 || twice > 0 {
		why = append(why, fmt.Sprintf("read_committed: %d of the successor's %d committed records missing, %d read more than once", missing, len(s.CommittedIDs), twice))
	}
	return why
}
