package experiment

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"time"

	"github.com/tapes-dev/tapes/internal/check"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// txnSummary is what one transactional producerd's history (check.TxnLine)
// says: its epochs, its transactions and their records, and whether it was
// fenced. zombie-fencing and hanging-transaction read their producers'
// progress and verdicts from it.
type txnSummary struct {
	// ProducerID and Epochs: of its begin lines, in order (one epoch per
	// InitProducerId that a transaction began under).
	ProducerID int64
	Epochs     []int16
	// Committed counts the transactions whose commit was answered ok;
	// CommittedIDs are their records' event_ids.
	Committed    int
	CommittedIDs map[string]bool
	// Sent are the event_ids of every record the broker took (ok sends).
	Sent map[string]bool
	// Open is the last transaction begun when it has no end line at all
	// (nil when the last one ended).
	Open *openTxn
	// Fenced is the first fencing error (PRODUCER_FENCED or
	// INVALID_PRODUCER_EPOCH) of a send or end line, "" without one;
	// FencedAt its line's time.
	Fenced   string
	FencedAt time.Time
}

// openTxn is a transaction begun and not ended.
type openTxn struct {
	Txn   string
	Epoch int16
	Begin time.Time
	// Sent is how many of its records the broker took; First the first
	// offset of each partition it wrote to.
	Sent  int
	First map[int32]int64
}

// fencingErrors are the errors of a producer a newer epoch fenced.
var fencingErrors = []string{string(kerr.ProducerFenced), string(kerr.InvalidProducerEpoch)}

// summarize summarizes lines (one producer's history).
func summarize(lines []check.TxnLine) txnSummary {
	s := txnSummary{CommittedIDs: map[string]bool{}, Sent: map[string]bool{}}
	sends := map[string][]string{}
	ended := map[string]bool{}
	var last string
	var open *openTxn
	for _, l := range lines {
		if s.Fenced == "" && slices.Contains(fencingErrors, l.Error) {
			s.Fenced, s.FencedAt = l.Error, l.At
		}
		switch l.Type {
		case check.TxnBegin:
			if l.ProducerID != nil {
				s.ProducerID = *l.ProducerID
			}
			var epoch int16
			if l.Epoch != nil {
				epoch = *l.Epoch
				if len(s.Epochs) == 0 || s.Epochs[len(s.Epochs)-1] != epoch {
					s.Epochs = append(s.Epochs, epoch)
				}
			}
			last = l.Txn
			open = &openTxn{Txn: l.Txn, Epoch: epoch, Begin: l.At, First: map[int32]int64{}}
		case check.TxnSend:
			if l.Status != check.SendOK {
				continue
			}
			s.Sent[l.EventID] = true
			sends[l.Txn] = append(sends[l.Txn], l.EventID)
			if open != nil && l.Txn == open.Txn {
				open.Sent++
				if f, ok := open.First[*l.Partition]; !ok || *l.Offset < f {
					open.First[*l.Partition] = *l.Offset
				}
			}
		case check.TxnEnd:
			ended[l.Txn] = true
			if l.Outcome == check.OutcomeCommit && l.Status == check.EndOK {
				s.Committed++
				for _, id := range sends[l.Txn] {
					s.CommittedIDs[id] = true
				}
			}
		}
	}
	if open != nil && !ended[last] {
		s.Open = open
	}
	return s
}

// readSummary summarizes the history at path; a history not written yet
// is empty.
func readSummary(path string) (txnSummary, error) {
	lines, err := check.ReadTxnHistory(path)
	if errors.Is(err, fs.ErrNotExist) {
		return summarize(nil), nil
	}
	if err != nil {
		return txnSummary{}, err
	}
	return summarize(lines), nil
}

// waitSummary polls the history of process name until cond holds of its
// summary, within d.
func (e *Env) waitSummary(ctx context.Context, name, what string, d time.Duration, cond func(txnSummary) bool) (txnSummary, error) {
	deadline := time.Now().Add(d)
	for {
		s, err := readSummary(e.History(name))
		if err != nil {
			return s, err
		}
		if cond(s) {
			return s, nil
		}
		if time.Now().After(deadline) {
			return s, fmt.Errorf("%s: not within %v: %s", name, d, what)
		}
		if err := e.Sleep(ctx, 100*time.Millisecond); err != nil {
			return s, err
		}
	}
}

// readsByLevel returns, per isolation level, how many times each event_id
// was read in the readers' history lines (the level is each process's
// isolation line, not its name).
func readsByLevel(lines []check.TxnLine) map[string]map[string]int {
	level := map[string]string{}
	out := map[string]map[string]int{check.ReadCommitted: {}, check.ReadUncommitted: {}}
	for _, l := range lines {
		switch l.Type {
		case check.TxnIsolation:
			level[l.Process] = l.Isolation
		case check.TxnRead:
			if lv, ok := level[l.Process]; ok {
				out[lv][l.EventID]++
			}
		}
	}
	return out
}

// readBack reads topic back read_committed, then read_uncommitted
// (check.ReadTopicTxn, processes reader-LEVEL, lines to h), within 3
// minutes, and returns the event_ids read at each level.
func (e *Env) readBack(ctx context.Context, topic string, h *check.TxnHistoryWriter) (map[string][]string, error) {
	rctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	out := map[string][]string{}
	for _, level := range []string{check.ReadCommitted, check.ReadUncommitted} {
		ids, err := check.ReadTopicTxn(rctx, e.Client, topic, level, "reader-"+level, h)
		if err != nil {
			return nil, err
		}
		out[level] = ids
	}
	return out, nil
}
