package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/tapes-dev/tapes/internal/check"
	"github.com/tapes-dev/tapes/internal/client"
	"github.com/tapes-dev/tapes/internal/consumer"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// The headers --eos puts on every output record besides the input's own
// (event_id among them): where its input was.
const (
	inPartitionHeader = "in-partition"
	inOffsetHeader    = "in-offset"
)

// txnProducer is what the --eos loop needs of a transactional producer
// (client.TransactionalProducer).
type txnProducer interface {
	// ProducerID is the id and epoch InitProducerId gave.
	ProducerID() (int64, int16)
	Begin(ctx context.Context) error
	// Produce writes one record inside the open transaction and returns
	// its offset once acknowledged.
	Produce(ctx context.Context, topic string, partition int32, key, value []byte, headers []*tapesv1.Header) (int64, error)
	// SendOffsets commits the group's input offsets inside the
	// transaction, as member of generation (KIP-447 fencing).
	SendOffsets(ctx context.Context, group string, generation int32, memberID string, offsets map[consumer.TopicPartition]int64) error
	Commit(ctx context.Context) error
	Abort(ctx context.Context) error
	Close() error
}

// errFenced: another incarnation of the transactional id took over; this
// process must stop (it is a zombie).
var errFenced = errors.New("fenced by a newer producer of the transactional id")

// errUncertain: a commit failed without a known outcome; the loop stops.
var errUncertain = errors.New("transaction commit failed, outcome unknown")

// eosLoop is the --eos poll loop: per poll one transaction with the
// results and the input offsets.
func (d *daemon) eosLoop(ctx context.Context) error {
	n, err := d.cl.Partitions(ctx, d.o.outputTopic)
	if err != nil {
		return fmt.Errorf("--output-topic %s: %w", d.o.outputTopic, err)
	}
	outPartitions := int32(n)
	// InitProducerId before the first poll: the predecessor's open
	// transaction is aborted (or its prepared commit finished) before this
	// process reads the committed offsets.
	tp, err := newTxnProducer(ctx, d.cl, d.o.transactionalID, d.o.transactionTimeout, d.log)
	if err != nil {
		return fmt.Errorf("--transactional-id %s: %w", d.o.transactionalID, err)
	}
	defer tp.Close()
	pid, epoch := tp.ProducerID()
	fmt.Fprintf(d.out, "%s: transactional id %s: producer id %d, epoch %d\n", d.o.name, d.o.transactionalID, pid, epoch)
	var seq int
	for {
		recs, stop, err := d.poll(ctx)
		if stop {
			return err
		}
		if len(recs) == 0 {
			continue
		}
		seq++
		txn := fmt.Sprintf("%s/%d/%d", d.o.transactionalID, epoch, seq)
		err = d.transaction(ctx, tp, txn, pid, epoch, outPartitions, recs)
		if errors.Is(err, errFenced) || errors.Is(err, errUncertain) {
			return err
		}
		if err != nil {
			// Aborted: the next poll returns the same records again.
			start := map[consumer.TopicPartition]int64{}
			for _, r := range recs {
				k := consumer.TopicPartition{Topic: r.Topic, Partition: r.Partition}
				if o, ok := start[k]; !ok || r.Offset < o {
					start[k] = r.Offset
				}
			}
			d.cons.Rewind(start)
			d.log.Warn("transaction aborted; its input is read again", "txn", txn, "err", err)
		}
	}
}

// transaction runs one poll's transaction; an error is an aborted one
// (errFenced: this producer may not go on).
func (d *daemon) transaction(ctx context.Context, tp txnProducer, txn string, pid int64, epoch int16, outPartitions int32, recs []consumer.Record) error {
	member, gen := d.cons.Membership()
	if err := tp.Begin(ctx); err != nil {
		return d.fenceOr(err)
	}
	d.txnLine(check.TxnLine{Type: check.TxnBegin, Txn: txn, TransactionalID: d.o.transactionalID, ProducerID: &pid, Epoch: &epoch})
	abort := func(cause error) error {
		d.txnLine(check.TxnLine{Type: check.TxnEnd, Txn: txn, Outcome: check.OutcomeAbort, Status: check.EndRequested})
		actx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := tp.Abort(actx)
		cancel()
		end := check.TxnLine{Type: check.TxnEnd, Txn: txn, Outcome: check.OutcomeAbort, Status: check.EndOK}
		if err != nil {
			end.Status, end.Error = check.EndError, errName(err)
		}
		d.txnLine(end)
		d.mu.Lock()
		d.commitsFailed++
		d.mu.Unlock()
		if fe := d.fenceOr(cause); errors.Is(fe, errFenced) {
			return fe
		}
		return cause
	}
	var inputs []check.TxnInput
	offsets := map[consumer.TopicPartition]int64{}
	for _, r := range recs {
		if d.o.processTime > 0 {
			time.Sleep(d.o.processTime)
		}
		eventID, _, _ := headersOf(r)
		if d.o.smsURL != "" {
			if err := d.sendSMS(ctx, eventID, r); err != nil {
				return abort(err)
			}
		}
		headers := append([]*tapesv1.Header{}, r.Headers...)
		headers = append(headers, &tapesv1.Header{Key: inPartitionHeader, Value: []byte(strconv.Itoa(int(r.Partition)))},
			&tapesv1.Header{Key: inOffsetHeader, Value: []byte(strconv.FormatInt(r.Offset, 10))})
		p := r.Partition % outPartitions
		off, err := tp.Produce(ctx, d.o.outputTopic, p, r.Key, r.Value, headers)
		send := check.TxnLine{Type: check.TxnSend, Txn: txn, EventID: eventID, Topic: d.o.outputTopic, Partition: &p, Offset: &off, Status: check.SendOK}
		if err != nil {
			off = -1
			send.Offset, send.Status, send.Error = &off, check.SendError, errName(err)
		}
		d.txnLine(send)
		if err != nil {
			return abort(err)
		}
		if err := d.record(gen, r, ""); err != nil {
			return abort(err)
		}
		d.mu.Lock()
		d.processed++
		n := d.processed
		d.mu.Unlock()
		if d.o.crashAfter > 0 && n >= d.o.crashAfter {
			d.crash(fmt.Sprintf("--crash-after-records %d reached, mid-transaction", d.o.crashAfter))
		}
		inputs = append(inputs, check.TxnInput{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, EventID: eventID})
		offsets[consumer.TopicPartition{Topic: r.Topic, Partition: r.Partition}] = r.Offset + 1
	}
	if err := tp.SendOffsets(ctx, d.o.group, gen, member, offsets); err != nil {
		return abort(err)
	}
	d.txnLine(check.TxnLine{Type: check.TxnStep, Txn: txn, Inputs: inputs})
	d.txnLine(check.TxnLine{Type: check.TxnEnd, Txn: txn, Outcome: check.OutcomeCommit, Status: check.EndRequested})
	err := tp.Commit(ctx)
	end := check.TxnLine{Type: check.TxnEnd, Txn: txn, Outcome: check.OutcomeCommit, Status: check.EndOK}
	if err != nil {
		end.Status, end.Error = check.EndError, errName(err)
	}
	d.txnLine(end)
	d.recordCommit(gen, offsets, err)
	if err != nil {
		if fe := d.fenceOr(err); errors.Is(fe, errFenced) {
			return fe
		}
		// The commit may have landed: reading the same input again could
		// duplicate it. Exit; a restart's InitProducerId settles the
		// transaction and the committed offsets say where to go on.
		return fmt.Errorf("%w: %s: %w", errUncertain, txn, err)
	}
	return nil
}

// fenceOr returns errFenced (wrapping err) when err says this producer was
// fenced, else err.
func (d *daemon) fenceOr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, errFenced) {
		return err
	}
	if kerr.Is(err, kerr.ProducerFenced) || kerr.Is(err, kerr.InvalidProducerEpoch) {
		return fmt.Errorf("%w: %w", errFenced, err)
	}
	return err
}

// errName is err's Kafka error name (UNKNOWN_SERVER_ERROR when none).
func errName(err error) string {
	if c := kerr.CodeOf(err); c != "" {
		return string(c)
	}
	return string(kerr.UnknownServerError)
}

// txnLine writes a --txn-history line of this process.
func (d *daemon) txnLine(l check.TxnLine) {
	l.Process = d.o.name
	if err := d.txnHist.Write(l); err != nil {
		d.log.Error("transactional history", "err", err)
	}
}

// sendSMS POSTs the input's SMS to --sms-url, retrying (with backoff)
// until it is accepted: at least once, outside the transaction.
func (d *daemon) sendSMS(ctx context.Context, eventID string, r consumer.Record) error {
	_, entity, _ := headersOf(r)
	body, err := json.Marshal(map[string]string{"event_id": eventID, "to": entity, "text": "your order " + string(r.Value)})
	if err != nil {
		return err
	}
	bo := client.NewBackoff(50*time.Millisecond, 2*time.Second)
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		req, err := http.NewRequestWithContext(rctx, http.MethodPost, d.o.smsURL, bytes.NewReader(body))
		if err != nil {
			cancel()
			return fmt.Errorf("--sms-url %s: %w", d.o.smsURL, err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		cancel()
		if err == nil && resp.StatusCode/100 == 2 {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("%s", resp.Status)
		}
		d.log.Warn("SMS not accepted; retrying", "url", d.o.smsURL, "event_id", eventID, "err", err)
		if werr := bo.Wait(ctx); werr != nil {
			return werr
		}
	}
}
