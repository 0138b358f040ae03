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
		Name: "eos-read-process-write",
		About: `Exactly-once read-process-write inside the log. An idempotent producer writes 100 records/s
to orders for --duration (default 40 s); one consumerd --eos reads them read_committed and, per
poll of at most 50, writes one result per input to orders-out and commits its input offsets in ONE
transaction. It is SIGKILLed again and again, 0.2-1 s after each restart has committed again (it is
kept busy, so the kill lands mid-transaction), and restarted with the same transactional id, which
aborts the open transaction. Then orders-out is read twice: read_committed sees every input exactly
once (the checker on the transactional histories, --expect exactly-once, and every acknowledged input
read back); read_uncommitted also sees the results of the aborted attempts, counted in the report.`,
		Expect:   check.ExactlyOnce,
		Duration: 40 * time.Second,
		Run:      func(ctx context.Context, e *Env) error { return eosPipeline(ctx, e, false) },
		Verdict:  func(e *Env, r *check.Result) []string { return eosVerdict(e, r, false) },
	})
	register(&Experiment{
		Name: "eos-external-effect",
		About: `Where exactly-once stops. The pipeline of eos-read-process-write, SIGKILLed as often, but the
handler also sends an "SMS" per input: a POST to a local HTTP endpoint the experiment runs, outside
the log. orders-out read read_committed is still exactly once, yet the plain SMS receiver has sent
duplicates: a killed attempt's SMS went out before its transaction aborted, and the retry sends it
again. The transaction covers the log and the offsets, not the SMS. The third variant gets the same
requests: an idempotent receiver keyed by the input's event_id sends each SMS once, zero duplicates.`,
		Expect:   check.ExactlyOnce,
		Duration: 40 * time.Second,
		Run:      func(ctx context.Context, e *Env) error { return eosPipeline(ctx, e, true) },
		Verdict:  func(e *Env, r *check.Result) []string { return eosVerdict(e, r, true) },
	})
}

const (
	eosRate       = 100
	eosGroup      = "eos-app"
	eosOutput     = "orders-out"
	eosProcessor  = "processor"
	eosReadersLog = "txn-readers"
	eosSMSLog     = "txn-sms"
	// eosInputProducer's history is not a producer-*.jsonl: the checker
	// judges the transactional histories only (the input's coverage is
	// the verdict's: every acknowledged input read back once).
	eosInputProducer = "input-producer"
)

// eosPipeline: input, the processor under SIGKILLs, the readers of the
// output; with sms, the SMS gateway.
func eosPipeline(ctx context.Context, e *Env, sms bool) error {
	for _, t := range []string{"orders", eosOutput} {
		if err := e.CreateTopic(ctx, t, 3, 3, map[string]string{"min.insync.replicas": "2"}); err != nil {
			return err
		}
	}
	// Input throughout the run, so that every kill finds work.
	if err := e.StartProducer(eosInputProducer, "--topic", "orders", "--idempotent", "--rate", strconv.Itoa(eosRate)+"/s",
		"--duration", e.Duration.String()); err != nil {
		return err
	}
	args := consumerArgs(e, eosGroup, "--eos", "--output-topic", eosOutput, "--txn-history", e.History("txn-processor"),
		"--records-per-poll", "50", "--process-time", "3ms", "--transaction-timeout", "10s")
	if sms {
		g, err := startSMSGateway(e.History(eosSMSLog))
		if err != nil {
			return err
		}
		defer g.Close()
		args = append(args, "--sms-url", g.URL())
		e.Set("sms endpoint", g.URL())
		defer func() {
			req, plain, idem := g.counts()
			e.Set("SMS requests received", strconv.FormatInt(req, 10))
			e.Set("SMS sent by the plain receiver", strconv.Itoa(plain))
			e.Set("SMS sent by the idempotent receiver (keyed by event_id)", strconv.Itoa(idem))
		}()
	}
	if err := e.StartConsumer(eosProcessor, args...); err != nil {
		return err
	}
	kills := 0
	for end := time.Now().Add(e.Duration); time.Now().Before(end); {
		// A restarted processor first waits out its predecessor's
		// session: kill it only once it committed again, then 0.2-1 s
		// later, most likely mid-transaction.
		if err := e.waitCommitsAdvance(ctx, eosGroup, end); err != nil {
			return err
		}
		if err := e.Sleep(ctx, time.Duration(200+e.Rand.IntN(800))*time.Millisecond); err != nil {
			return err
		}
		if time.Now().After(end) {
			break
		}
		if _, err := e.Fault("SIGKILL "+eosProcessor+" (mid-transaction)", func() error { return e.C.Kill(eosProcessor) }); err != nil {
			return err
		}
		kills++
		if err := e.C.Restart(eosProcessor); err != nil {
			return err
		}
		e.Printf("restarted %s (same transactional id: its open transaction is aborted)", eosProcessor)
	}
	if err := e.waitExit(ctx, eosInputProducer, 2*time.Minute); err != nil {
		return err
	}
	e.Set("processor SIGKILLs", strconv.Itoa(kills))
	e.Note(fmt.Sprintf("%d SIGKILLs done; the processor finishes the input", kills))
	if err := e.WaitCommitted(ctx, eosGroup, "orders"); err != nil {
		return err
	}
	if err := e.Stop(eosProcessor); err != nil {
		return err
	}
	h, err := check.CreateTxnHistory(e.History(eosReadersLog))
	if err != nil {
		return err
	}
	defer h.Close()
	read, err := e.readBack(ctx, eosOutput, h)
	if err != nil {
		return err
	}
	for level, ids := range read {
		e.Set(eosOutput+" records read "+level, strconv.Itoa(len(ids)))
	}
	return nil
}

// waitCommitsAdvance waits until group's committed offsets (summed over
// its partitions) have moved twice since now, or until end: the first move
// may be the transaction a killed predecessor had ended just before its
// kill, which its coordinator completes later; the second is the
// restarted processor's own.
func (e *Env) waitCommitsAdvance(ctx context.Context, group string, end time.Time) error {
	sum := func() int64 {
		octx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		offs, err := e.Client.OffsetFetch(octx, group, nil)
		if err != nil {
			return -1
		}
		var n int64
		for _, o := range offs {
			n += max(o.Offset, 0)
		}
		return n
	}
	from, moves := sum(), 0
	for time.Now().Before(end) {
		if n := sum(); n > from && from >= 0 {
			if moves++; moves == 2 {
				return nil
			}
			from = n
		} else if from < 0 {
			from = n
		}
		if err := e.Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// eosVerdict: every acknowledged input is read exactly once by the
// read_committed reader; the kills showed as aborted attempts read
// read_uncommitted; with sms, the plain receiver duplicated and the
// idempotent one did not.
func eosVerdict(e *Env, r *check.Result, sms bool) []string {
	acked, err := ackedIDs(e.History(eosInputProducer))
	if err != nil {
		return []string{err.Error()}
	}
	lines, err := check.ReadTxnHistory(e.History(eosReadersLog))
	if err != nil {
		return []string{err.Error()}
	}
	read := map[string]map[string]int{}
	for _, l := range lines {
		if l.Type == check.TxnRead {
			if read[l.Process] == nil {
				read[l.Process] = map[string]int{}
			}
			read[l.Process][l.EventID]++
		}
	}
	var why []string
	committed, uncommitted := read["reader-"+check.ReadCommitted], read["reader-"+check.ReadUncommitted]
	var missing, twice int
	for _, id := range acked {
		switch n := committed[id]; {
		case n == 0:
			missing++
		case n > 1:
			twice++
		}
	}
	if missing > 0 || twice > 0 || len(committed) != len(slices.Compact(slices.Sorted(slices.Values(acked)))) {
		why = append(why, fmt.Sprintf("read_committed output: %d of %d inputs missing, %d more than once, %d distinct read", missing, len(acked), twice, len(committed)))
	}
	aborted := 0
	for _, n := range uncommitted {
		aborted += n
	}
	for _, n := range committed {
		aborted -= n
	}
	e.Set("aborted attempts seen read_uncommitted", strconv.Itoa(aborted))
	if r.Txn != nil {
		e.Set("transactions (committed / aborted / unknown)", fmt.Sprintf("%d / %d / %d", r.Txn.Committed, r.Txn.Aborted, r.Txn.Unknown))
	}
	if aborted <= 0 {
		why = append(why, "read_uncommitted saw no aborted attempt: no kill landed mid-transaction, the run proves nothing")
	}
	if !sms {
		return why
	}
	effects, err := check.ReadTxnHistory(e.History(eosSMSLog))
	if err != nil {
		return append(why, err.Error())
	}
	dups := map[string]int{}
	seen := map[string]map[string]bool{}
	for _, l := range effects {
		if seen[l.Process] == nil {
			seen[l.Process] = map[string]bool{}
		}
		if seen[l.Process][l.InputEventID] {
			dups[l.Process]++
		}
		seen[l.Process][l.InputEventID] = true
	}
	e.Set("SMS duplicates, plain receiver", strconv.Itoa(dups[SMSPlain]))
	e.Set("SMS duplicates, idempotent receiver", strconv.Itoa(dups[SMSIdempotent]))
	e.Set("why the SMS repeats", "the transaction covers the output topic and the input offsets, not the POST: "+
		"a killed attempt's SMS was already sent when its transaction aborted, and the retry sends it again; "+
		"only a receiver that dedupes by the input's event_id makes it once")
	if dups[SMSPlain] == 0 {
		why = append(why, "the plain SMS receiver has no duplicate: no kill landed between an SMS and its commit")
	}
	if dups[SMSIdempotent] != 0 {
		why = append(why, fmt.Sprintf("the idempotent SMS receiver sent %d duplicates", dups[SMSIdempotent]))
	}
	if len(seen[SMSIdempotent]) != len(committed) {
		why = append(why, fmt.Sprintf("the idempotent receiver sent %d distinct SMS for %d inputs", len(seen[SMSIdempotent]), len(committed)))
	}
	return why
}
