package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/tapes-dev/tapes/internal/check"
	"github.com/tapes-dev/tapes/internal/client"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/partitioner"
	"github.com/tapes-dev/tapes/internal/producer"
)

// Transactional mode (--transactional-id): every --txn-records records are
// one transaction of a client.TxnProducer (Begin, Produce per partition,
// Commit), written to --history as internal/check's transactional history
// (check.TxnLine), so that `chaos check --txn-history` reads a run.

// txnMode is the transactional producer of one run and its counters.
type txnMode struct {
	p      *client.TxnProducer
	hist   *os.File // nil without --history
	sticky *partitioner.Sticky
	n      int64 // transactions begun
	// The open transaction: its name, records so far, records not yet
	// sent, keyless records' partition.
	open       bool
	name       string
	count      int64
	pending    []*producer.Record
	stickyPart int32
	// Counters, under daemon.mu.
	sent, acked, committed, aborted int64
	failed                          map[string]int64
}

// txnStart initialises the transactional producer (fencing every earlier
// incarnation of the id; the coordinator aborts its open transaction) and
// opens the transactional history.
func (d *daemon) txnStart(ctx context.Context, cl *client.Client) error {
	o := d.o
	t := &txnMode{sticky: partitioner.NewSticky(nil), failed: map[string]int64{}}
	if o.history != "" {
		f, err := os.OpenFile(o.history, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		if err != nil {
			return usagef("--history %s: %v", o.history, err)
		}
		t.hist = f
	}
	p, err := cl.NewTransactionalProducer(ctx, o.transactionalID, o.txnTimeout)
	if err != nil {
		if t.hist != nil {
			t.hist.Close()
		}
		return fmt.Errorf("--transactional-id %s: %w", o.transactionalID, err)
	}
	t.p = p
	d.txn = t
	d.log.Info("transactional producer initialised", "transactional_id", o.transactionalID,
		"producer_id", p.ProducerID, "epoch", p.Epoch, "txn_records", o.txnRecords)
	return nil
}

// txnChunk is the most records sent to the broker at once inside a
// transaction: records are written as they are made, so a transaction is
// open (and its records in the log, uncommitted) while it fills.
const txnChunk = 10

// txnAdd adds rec to the open transaction (beginning one first), sends
// what is pending once txnChunk records are, and ends the transaction
// once it holds --txn-records records.
func (d *daemon) txnAdd(rec *producer.Record) error {
	t := d.txn
	if !t.open {
		if err := d.txnBegin(); err != nil {
			return err
		}
	}
	t.pending = append(t.pending, rec)
	t.count++
	if len(t.pending) >= txnChunk || t.count >= d.o.txnRecords {
		if err := d.txnSend(); err != nil {
			return d.txnEnd(err)
		}
	}
	if t.count >= d.o.txnRecords {
		return d.txnEnd(nil)
	}
	return nil
}

// txnFlush ends the open transaction, if any: its pending records are
// sent and it commits (on SIGTERM, Stop, the end of --count or
// --duration). Its context is not the generator's: a stop does not cut
// it short.
func (d *daemon) txnFlush() error {
	if !d.txn.open {
		return nil
	}
	return d.txnEnd(d.txnSend())
}

// txnLine writes one line of the transactional history of the open
// transaction, unbuffered: a line is in the file before the request it
// announces is sent (the "requested" end line).
func (d *daemon) txnLine(l check.TxnLine) error {
	t := d.txn
	l.Process, l.At, l.Txn = d.o.name, time.Now().UTC(), t.name
	if t.hist == nil {
		return nil
	}
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	if _, err := t.hist.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("--history %s: %w", d.o.history, err)
	}
	return nil
}

func (d *daemon) txnBegin() error {
	t := d.txn
	pid, epoch := t.p.ProducerID, int16(t.p.Epoch)
	t.name = fmt.Sprintf("%s/%d/%d", d.o.transactionalID, epoch, t.n)
	t.n++
	if err := d.txnLine(check.TxnLine{Type: check.TxnBegin, TransactionalID: d.o.transactionalID, ProducerID: &pid, Epoch: &epoch}); err != nil {
		return err
	}
	if err := t.p.Begin(); err != nil {
		return err
	}
	t.open, t.count = true, 0
	// Keyless records stick to one partition per transaction.
	t.stickyPart = t.sticky.Next(d.prod.Partitions(), true)
	return nil
}

// txnSend sends the pending records, each to its partition as the
// batching producer picks it (keyed records by murmur2), and writes their
// send lines.
func (d *daemon) txnSend() error {
	t := d.txn
	recs := t.pending
	t.pending = nil
	ctx, cancel := context.WithTimeout(context.Background(), d.o.deliveryTimeout+d.o.requestTimeout)
	defer cancel()
	nparts := d.prod.Partitions()
	var order []int32
	byPart := map[int32][]*producer.Record{}
	for _, r := range recs {
		p := t.stickyPart
		if r.Key != nil {
			p = partitioner.ForKey(r.Key, nparts)
		}
		if _, ok := byPart[p]; !ok {
			order = append(order, p)
		}
		byPart[p] = append(byPart[p], r)
	}
	for _, p := range order {
		rs := byPart[p]
		wire := make([]*tapesv1.Record, len(rs))
		now := time.Now().UnixMilli()
		for i, r := range rs {
			wire[i] = &tapesv1.Record{TimestampMs: now, Key: r.Key, Value: r.Value, Headers: r.Headers}
		}
		resp, err := t.p.Produce(ctx, d.o.topic, p, wire)
		if err == nil {
			d.mu.Lock()
			t.sent += int64(len(rs)) // in the log, uncommitted
			d.mu.Unlock()
		}
		status, ename := check.SendOK, ""
		if err != nil {
			status, ename = check.SendError, errName(err)
		}
		for i, r := range rs {
			part, off := p, int64(-1)
			if err == nil {
				off = resp.BaseOffset + int64(i)
			}
			key := string(r.Key)
			l := check.TxnLine{Type: check.TxnSend, EventID: eventID(r), Topic: d.o.topic, Partition: &part, Offset: &off, Status: status, Error: ename}
			if r.Key != nil {
				l.Key = &key
			}
			if werr := d.txnLine(l); werr != nil {
				return werr
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// txnEnd commits the open transaction, or aborts it when sendErr (a
// failed send) is set. ErrProducerFenced is returned as is.
func (d *daemon) txnEnd(sendErr error) error {
	t := d.txn
	ctx, cancel := context.WithTimeout(context.Background(), d.o.deliveryTimeout+d.o.requestTimeout)
	defer cancel()
	n := t.count
	t.open, t.count, t.pending = false, 0, nil
	commit := sendErr == nil
	outcome := check.OutcomeAbort
	if commit {
		outcome = check.OutcomeCommit
	}
	var endErr error
	if !errors.Is(sendErr, client.ErrProducerFenced) {
		if err := d.txnLine(check.TxnLine{Type: check.TxnEnd, Outcome: outcome, Status: check.EndRequested}); err != nil {
			return err
		}
		if commit {
			endErr = t.p.Commit(ctx)
		} else {
			endErr = t.p.Abort(ctx)
		}
		end := check.TxnLine{Type: check.TxnEnd, Outcome: outcome, Status: check.EndOK}
		switch {
		case endErr == nil:
		case kerr.CodeOf(endErr) == "" || errors.Is(endErr, context.DeadlineExceeded):
			end.Status = check.EndUnknown
		default:
			end.Status, end.Error = check.EndError, errName(endErr)
		}
		if err := d.txnLine(end); err != nil {
			return err
		}
	}
	d.mu.Lock()
	switch {
	case endErr != nil:
		t.failed[errName(endErr)] += n
	case commit:
		t.committed++
		t.acked += n
	default:
		t.aborted++
		t.failed[errName(sendErr)] += n
	}
	d.mu.Unlock()
	if errors.Is(sendErr, client.ErrProducerFenced) || errors.Is(endErr, client.ErrProducerFenced) {
		return errors.Join(sendErr, endErr)
	}
	if endErr != nil {
		return fmt.Errorf("transaction %s: %s: %w", t.name, outcome, endErr)
	}
	if sendErr != nil {
		d.log.Warn("transaction aborted", "txn", t.name, "err", sendErr)
	}
	return nil
}

// txnClose closes the transactional history.
func (d *daemon) txnClose() error {
	if d.txn == nil || d.txn.hist == nil {
		return nil
	}
	if err := d.txn.hist.Sync(); err != nil {
		d.txn.hist.Close()
		return fmt.Errorf("--history %s: %w", d.o.history, err)
	}
	return d.txn.hist.Close()
}

// errName is err's Kafka error name (NETWORK_EXCEPTION when it has none).
func errName(err error) string {
	if c := kerr.CodeOf(err); c != "" {
		return string(c)
	}
	return producer.ErrNameNetwork
}

// eventID is r's event_id header.
func eventID(r *producer.Record) string {
	for _, h := range r.Headers {
		if h.Key == producer.EventIDHeader {
			return string(h.Value)
		}
	}
	return ""
}
