package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/tapes-dev/tapes/internal/client"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/producer"
	"github.com/tapes-dev/tapes/internal/schema"
)

// daemonOpts are producerd's flags.
type daemonOpts struct {
	target
	sendOpts
	topic         string
	count         int64
	duration      time.Duration
	rateStr       string
	rate          float64
	keys          string
	keySpace      int
	hotShare      float64
	saltHotKey    int
	seed          uint64
	valueSize     int
	schemaVersion int
	retries       int
	history       string
	name          string
	controlListen string
	progress      time.Duration
	closeTimeout  time.Duration
	logLevel      string
	// Transactional mode.
	transactionalID string
	txnRecords      int64
	txnTimeout      time.Duration
}

const daemonAbout = `Writes records to a topic until --count records or --duration have passed (or forever), at
--rate records per second, then prints a summary: records sent, acknowledged, failed (by Kafka
error name), retried, and duplicates avoided. A progress line is printed every --progress.

Every record carries the headers event_id (unique; the same in every retry), schema_version and
entity, a timestamp and a --value-size byte value that starts with its event_id. entity is the
record's logical key, key-0 ... key-(K-1) (--key-space K; --hot-key-share F sends that share of
records to key-0, to load one partition; --salt-hot-key N gives key-0's records the Kafka key
key-0#S with S one of 0 ... N-1 drawn at random, so that they spread over up to N partitions,
and the headers salt S and key_seq, the record's place among this run's key-0 records, from 0,
by which a consumer can restore their order); with --keys on it is also the record's key, with
--keys off the record has no key but keeps its entity, so that consumers can still check the
order of each entity's records. Keyed records go to the partition Kafka's murmur2 partitioner
picks for the key; keyless records use the sticky partitioner.

Records are batched per partition (--linger, --batch-bytes), up to --max-in-flight requests per
partition are in flight, and failures Kafka retries are retried with backoff (--retries,
--delivery-timeout). Without --idempotent a retried batch can be written twice and, with several
in flight, out of order; with --idempotent (acks=all, at most 5 in flight) neither happens.

It is also a daemon: --control-listen serves tapes.v1.ProducerControlService (Status, Pause,
Resume, SetRate, Stop) and its address is printed on start. Ctrl-C or SIGTERM (or Stop) stop
sending, wait up to --close-timeout for the records in flight, write the history and exit;
a second Ctrl-C gives up at once (open records are written as PRODUCER_CLOSED).

--history FILE writes one JSON line per record attempted, once its outcome is final:
  {"event_id","key","value","partition","offset","acks","status":"ok"|"error","error":NAME,
   "attempts","sent_at","acked_at"[,"salt","key_seq"]}
offset is -1 when unknown; error and acked_at are null on success and on failure respectively.
Error names: the broker's Kafka names, NETWORK_EXCEPTION (connection failed or lost),
REQUEST_TIMED_OUT (not answered in time, or older than --delivery-timeout), PRODUCER_CLOSED.

--transactional-id ID makes it a transactional producer: it initialises ID (fencing an earlier
producerd with the same id, whose open transaction the coordinator aborts) and writes every
--txn-records records as one transaction (Begin, the records to their partitions, Commit; a
failed write aborts it). Read_committed consumers see whole transactions only. Ctrl-C or SIGTERM
commit the open transaction's records before exiting. Fenced by a newer incarnation, it says so
and exits 1. With --history its file is internal/check's transactional history, one JSON line
each (begin, send, end requested, end ok/error/unknown), for chaos check --txn-history F.

Exit status: 0 every record acknowledged; 1 some failed (or the cluster was unreachable);
2 bad command line; 3 input the cluster cannot take (unknown topic, record too large).`

func parseDaemon(args []string, stderr io.Writer) (*daemonOpts, error) {
	o := &daemonOpts{txnTimeout: 60 * time.Second}
	fs := newFlags("producerd", "producerd (--bootstrap-server ADDR[,ADDR] | --dir DIR) --topic T [FLAGS]\n  producerd perf --help", daemonAbout, stderr)
	o.target.addFlags(fs)
	fs.StringVar(&o.topic, "topic", "", "topic to write to (required; it must exist)")
	fs.Int64Var(&o.count, "count", 0, "stop after this many records (0: no limit)")
	fs.DurationVar(&o.duration, "duration", 0, "stop after this long, e.g. 30s (0: no limit)")
	fs.StringVar(&o.rateStr, "rate", "1000/s", "target records per second, e.g. 500/s (0: as fast as possible)")
	fs.StringVar(&o.keys, "keys", "on", "on: every record's key is its entity (header entity, from the key space); off: keyless records (sticky partitioner) that keep their entity header")
	fs.IntVar(&o.keySpace, "key-space", 100, "number of distinct entities key-0 ... key-(K-1), the records' keys with --keys on")
	fs.Float64Var(&o.hotShare, "hot-key-share", 0, "share of records, 0 to 1, that use the hot key key-0 (skews one partition)")
	fs.IntVar(&o.saltHotKey, "salt-hot-key", 0, "spread the hot key over up to `N` partitions: its records get the key key-0#S, S drawn from 0 ... N-1, and the headers salt and key_seq (0: no salting; needs --hot-key-share > 0)")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of the record generator (keys, hot-key draws, salts): the same seed makes the same key sequence (0: a random seed)")
	fs.IntVar(&o.valueSize, "value-size", 100, "bytes in each record's value")
	fs.IntVar(&o.schemaVersion, "schema-version", 1, "schema of the values and their schema_version header: 1 (the event id, then '.' padding) or 2 (JSON {\"event_id\",\"entity\",\"pad\"}: id renamed, entity added); see internal/schema")
	o.sendOpts.addFlags(fs)
	fs.IntVar(&o.retries, "retries", producer.DefaultRetries, "most times a failed batch is retried (0: never; --idempotent needs at least 1)")
	fs.StringVar(&o.history, "history", "", "write every record's outcome to this `file`, one JSON line each (see above)")
	fs.StringVar(&o.name, "name", "producer-1", "this producer's name, in its logs, status, event ids and summary")
	fs.StringVar(&o.controlListen, "control-listen", "127.0.0.1:0", "address of the gRPC control endpoint (port 0: any free port; empty: none)")
	fs.DurationVar(&o.progress, "progress", 5*time.Second, "print a progress line this often (0: never)")
	fs.DurationVar(&o.closeTimeout, "close-timeout", 5*time.Second, "after Ctrl-C, SIGTERM or Stop, how long to wait for records in flight")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level on stderr: debug, info, warn or error")
	fs.StringVar(&o.transactionalID, "transactional-id", "", "transactional `id`: write records in transactions (see above; empty: not transactional)")
	fs.Int64Var(&o.txnRecords, "txn-records", 100, "with --transactional-id, records per transaction (more than 0)")
	fs.Var(msDuration{&o.txnTimeout}, "transaction-timeout", "with --transactional-id, transaction.timeout.ms: the coordinator aborts a transaction open longer (ms or a duration)")
	if err := parse(fs, args); err != nil {
		return nil, err
	}
	var err error
	switch {
	case o.topic == "":
		return nil, usagef("--topic is required")
	case o.count < 0:
		return nil, usagef("--count %d: want 0 (no limit) or more", o.count)
	case o.duration < 0:
		return nil, usagef("--duration %v: want 0 (no limit) or more", o.duration)
	case o.keys != "on" && o.keys != "off":
		return nil, usagef("--keys %q: want on or off", o.keys)
	case o.keySpace < 1:
		return nil, usagef("--key-space %d: want at least 1 key", o.keySpace)
	case o.hotShare < 0 || o.hotShare > 1 || math.IsNaN(o.hotShare):
		return nil, usagef("--hot-key-share %v: want a share between 0 and 1", o.hotShare)
	case o.hotShare > 0 && o.keys == "off":
		return nil, usagef("--hot-key-share %v needs --keys on", o.hotShare)
	case o.saltHotKey < 0 || o.saltHotKey > maxSalts:
		return nil, usagef("--salt-hot-key %d: want 0 (no salting) to %d suffixes", o.saltHotKey, maxSalts)
	case o.saltHotKey > 0 && o.hotShare == 0:
		return nil, usagef("--salt-hot-key %d needs --hot-key-share > 0: only the hot key is salted", o.saltHotKey)
	case o.valueSize < 0:
		return nil, usagef("--value-size %d: want 0 or more bytes", o.valueSize)
	case !slices.Contains(schema.Known, o.schemaVersion):
		return nil, usagef("--schema-version %d: want one of %v", o.schemaVersion, schema.Known)
	case o.retries < 0:
		return nil, usagef("--retries %d: want 0 or more", o.retries)
	case o.progress < 0:
		return nil, usagef("--progress %v: want 0 (never) or more", o.progress)
	case o.closeTimeout < 0:
		return nil, usagef("--close-timeout %v: want 0 or more", o.closeTimeout)
	case strings.TrimSpace(o.name) == "":
		return nil, usagef("--name must not be empty")
	case o.txnRecords <= 0:
		return nil, usagef("--txn-records %d: want more than 0 records per transaction", o.txnRecords)
	case o.txnTimeout <= 0:
		return nil, usagef("--transaction-timeout %v: want more than 0", o.txnTimeout)
	}
	if o.rate, err = parseRate(o.rateStr); err != nil {
		return nil, &usageError{err.Error()}
	}
	if err := o.sendOpts.check(); err != nil {
		return nil, err
	}
	if o.idempotent && o.retries < 1 {
		return nil, usagef("--idempotent needs --retries of at least 1, not %d", o.retries)
	}
	return o, nil
}

func (o *daemonOpts) producerConfig() producer.Config {
	cfg := producer.DefaultConfig(o.topic)
	cfg.Acks, cfg.Idempotent, cfg.MaxInFlight = o.acks, o.idempotent, o.maxInFlight
	cfg.Linger, cfg.BatchBytes, cfg.Retries = o.linger, o.batchBytes, o.retries
	cfg.DeliveryTimeout, cfg.RequestTimeout = o.deliveryTimeout, o.requestTimeout
	return cfg
}

// Daemon states, as StatusResponse.state spells them.
const (
	stateRunning  = "running"
	statePaused   = "paused"
	stateStopping = "stopping"
	stateDone     = "done"
)

// daemon is one run of producerd.
type daemon struct {
	o        *daemonOpts
	out      io.Writer
	log      *slog.Logger
	prod     *producer.Producer
	hist     *producer.History
	idPrefix string
	start    time.Time
	// hotSeq is the key_seq of the next salted hot-key record: generate's
	// goroutine only.
	hotSeq int64
	// txn is the transactional mode (--transactional-id), nil otherwise.
	txn *txnMode

	mu       sync.Mutex
	state    string
	rate     float64
	changed  chan struct{} // closed and replaced on every change of state or rate
	stopOnce sync.Once
	stopReq  chan struct{} // closed by requestStop
	finished chan struct{} // closed once the run is over and final is set
	final    *tapesv1.StatusResponse
}

func runDaemon(args []string, stdout, stderr io.Writer) error {
	o, err := parseDaemon(args, stderr)
	if err != nil {
		return err
	}
	logger, err := newLogger(o.logLevel, stderr, o.name)
	if err != nil {
		return err
	}
	d := &daemon{o: o, out: stdout, log: logger, state: stateRunning, rate: o.rate,
		changed: make(chan struct{}), stopReq: make(chan struct{}), finished: make(chan struct{}),
		idPrefix: fmt.Sprintf("%s-%08x-", o.name, rand.Uint32())}
	return d.run()
}

// setupFailed closes the history after a setup step failed with err and
// returns err joined with the close's error, if any (the history may then
// be incomplete on disk: the user must hear of it). err keeps its kind
// (errors.As still finds a usageError or inputError).
func setupFailed(err error, path string, closeHistory func() error) error {
	if cerr := closeHistory(); cerr != nil {
		return errors.Join(err, fmt.Errorf("close --history %s: %w", path, cerr))
	}
	return err
}

func (d *daemon) run() error {
	o := d.o
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	setup, cancelSetup := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelSetup()
	setupDone, watcherDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watcherDone)
		select {
		case <-sigs:
			cancelSetup()
		case <-setupDone:
		}
	}()

	cl, err := o.client(d.log)
	if err != nil {
		return err
	}
	defer cl.Close()
	cfg := o.producerConfig()
	cfg.Logger = d.log
	if o.transactionalID != "" {
		// The batching producer only reads the topic's metadata.
		cfg.Idempotent = false
	} else if o.history != "" {
		if d.hist, err = producer.CreateHistory(o.history, o.acks); err != nil {
			return usagef("--history %s: %v", o.history, err)
		}
		cfg.OnBatch = d.hist.Write
	}
	closeHistory := func() error {
		if d.hist == nil {
			return nil
		}
		return d.hist.Close()
	}
	prod, err := producer.New(setup, cl, cfg)
	if err != nil {
		if kerr.Is(err, kerr.UnknownTopicOrPartition) {
			err = &inputError{fmt.Errorf("--topic %s: %w", o.topic, err)}
		}
		return setupFailed(err, o.history, closeHistory)
	}
	d.prod = prod
	if o.transactionalID != "" {
		if err := d.txnStart(setup, cl); err != nil {
			prod.Close(context.Background())
			return err
		}
		closeHistory = d.txnClose
	}
	if err := d.checkRecordSize(); err != nil {
		prod.Close(context.Background())
		return setupFailed(err, o.history, closeHistory)
	}

	var srv *grpc.Server
	if o.controlListen != "" {
		lis, err := net.Listen("tcp", o.controlListen)
		if err != nil {
			prod.Close(context.Background())
			return setupFailed(usagef("--control-listen %s: %v", o.controlListen, err), o.history, closeHistory)
		}
		srv = grpc.NewServer()
		tapesv1.RegisterProducerControlServiceServer(srv, &controlServer{d: d})
		go srv.Serve(lis)
		fmt.Fprintf(d.out, "%s: control endpoint %s\n", o.name, lis.Addr())
		d.log.Info("control endpoint", "address", lis.Addr().String())
	}
	// From here on, signals go to the loop below.
	close(setupDone)
	<-watcherDone
	if setup.Err() != nil {
		// A signal came during set-up, just after it ended.
		d.requestStop()
	}
	cancelSetup()
	pid, epoch := prod.ProducerID()
	d.log.Info("producing", "topic", o.topic, "partitions", prod.Partitions(), "acks", producer.AcksName(o.acks),
		"idempotent", o.idempotent, "producer_id", pid, "epoch", epoch, "rate", o.rate, "keys", o.keys)

	// Signals: the first stops sending, the second gives up on the records
	// in flight.
	go func() {
		n := 0
		for {
			select {
			case <-sigs:
				n++
				if n == 1 {
					d.log.Info("signal: stopping (again to give up on records in flight)")
					d.requestStop()
				} else {
					d.log.Warn("second signal: giving up on records in flight")
					prod.Abort()
				}
			case <-d.finished:
				return
			}
		}
	}()

	d.start = time.Now()
	progressDone := make(chan struct{})
	go d.progressLoop(progressDone)
	sendErr := d.generate()
	if d.txn != nil && sendErr == nil {
		sendErr = d.txnFlush()
	}
	if errors.Is(sendErr, client.ErrProducerFenced) {
		d.log.Error("fenced: a newer producer with this transactional id exists; exiting", "transactional_id", o.transactionalID, "err", sendErr)
	}

	// Close: wait for every outcome. A normal end waits as long as a batch
	// may take; a stop request waits --close-timeout from the request.
	d.setState(stateStopping)
	closeCtx, cancelClose := context.WithTimeout(context.Background(), o.deliveryTimeout+o.requestTimeout)
	defer cancelClose()
	closed := make(chan struct{})
	go func() {
		select {
		case <-d.stopReq:
			t := time.NewTimer(o.closeTimeout)
			defer t.Stop()
			select {
			case <-t.C:
				cancelClose()
			case <-closed:
			}
		case <-closed:
		}
	}()
	if err := prod.Close(closeCtx); err != nil {
		d.log.Warn("gave up waiting for records in flight", "err", err)
	}
	close(closed)
	close(progressDone)
	histErr := closeHistory()
	st := d.status()
	st.State = stateDone
	d.mu.Lock()
	d.state = stateDone
	d.final = st
	d.mu.Unlock()
	close(d.finished)
	d.summary(st)
	if srv != nil {
		stopServer(srv)
	}
	switch {
	case histErr != nil:
		return histErr
	case sendErr != nil:
		return sendErr
	}
	if d.txn != nil {
		var n int64
		for _, v := range st.Failed {
			n += v
		}
		if n > 0 {
			return &failedError{n}
		}
		return nil
	}
	if n := prod.Stats().FailedTotal(); n > 0 {
		return &failedError{n}
	}
	return nil
}

// stopServer lets a pending Stop call get its answer, briefly.
func stopServer(srv *grpc.Server) {
	done := make(chan struct{})
	go func() { srv.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		srv.Stop()
	}
}

// checkRecordSize refuses a --value-size whose records can never be
// written: the largest record this run makes must fit max.message.bytes.
func (d *daemon) checkRecordSize() error {
	o := d.o
	n := int64(math.MaxInt64)
	if o.count > 0 {
		n = o.count - 1
	}
	// The longest event id, entity and key; a salted hot-key record also
	// carries its salt and key_seq.
	longest := []*producer.Record{d.makeRecord(n, o.keySpace-1, noSalt, 0)}
	if o.saltHotKey > 0 {
		longest = append(longest, d.makeRecord(n, 0, o.saltHotKey-1, n))
	}
	for _, rec := range longest {
		size := producer.SingleRecordBatchSize(&tapesv1.Record{TimestampMs: time.Now().UnixMilli(), Key: rec.Key, Value: rec.Value, Headers: rec.Headers})
		if max := d.prod.MaxMessageBytes(); int64(size) > max {
			return &inputError{kerr.New(kerr.RecordTooLarge, "--value-size %d makes records of up to %d bytes (key and headers included), more than max.message.bytes=%d of topic %q",
				o.valueSize, size, max, o.topic)}
		}
	}
	return nil
}

// maxSalts is the most suffixes --salt-hot-key takes.
const maxSalts = 1000

// noSalt is makeRecord's salt for a record that is not salted.
const noSalt = -1

// newRecordRand is the generator of one run's keys, hot-key draws and
// salts: seeded by --seed, or at random when it is 0.
func newRecordRand(seed uint64) *rand.Rand {
	if seed == 0 {
		return rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// record makes record number n, its entity drawn from rng over the key
// space (key-0 with --hot-key-share), and with --salt-hot-key salts every
// record of key-0 with a suffix drawn from rng. Only generate's goroutine
// calls it (it advances hotSeq).
func (d *daemon) record(n int64, rng *rand.Rand) *producer.Record {
	o := d.o
	k := 0
	if o.hotShare == 0 || rng.Float64() >= o.hotShare {
		k = rng.IntN(o.keySpace)
	}
	if o.saltHotKey == 0 || k != 0 {
		return d.makeRecord(n, k, noSalt, 0)
	}
	rec := d.makeRecord(n, k, rng.IntN(o.saltHotKey), d.hotSeq)
	d.hotSeq++
	return rec
}

// SaltSeparator joins the hot key and its salt in a salted record's key.
const SaltSeparator = "#"

// makeRecord makes record number n for entity key-k: the entity header
// always, and the Kafka key too with --keys on. A salt other than noSalt
// makes the key key-k#salt and adds the salt and key_seq headers.
func (d *daemon) makeRecord(n int64, k, salt int, keySeq int64) *producer.Record {
	o := d.o
	id := d.idPrefix + strconv.FormatInt(n, 10)
	entity := []byte("key-" + strconv.Itoa(k))
	var key []byte
	if o.keys == "on" {
		key = entity
	}
	// A known version and a plain id and entity: Encode cannot fail.
	value, _ := schema.Encode(o.schemaVersion, schema.Order{EventID: id, Entity: string(entity)}, o.valueSize)
	headers := []*tapesv1.Header{
		{Key: producer.EventIDHeader, Value: []byte(id)},
		{Key: producer.SchemaVersionHeader, Value: []byte(strconv.Itoa(o.schemaVersion))},
		{Key: producer.EntityHeader, Value: entity},
	}
	if salt != noSalt {
		key = []byte(string(entity) + SaltSeparator + strconv.Itoa(salt))
		headers = append(headers,
			&tapesv1.Header{Key: producer.SaltHeader, Value: []byte(strconv.Itoa(salt))},
			&tapesv1.Header{Key: producer.KeySeqHeader, Value: []byte(strconv.FormatInt(keySeq, 10))})
	}
	return &producer.Record{Key: key, Value: value, Tag: n, Headers: headers}
}

// generate sends records until the count or duration is reached or a stop
// is requested. It returns an error only when Send failed unexpectedly.
func (d *daemon) generate() error {
	o := d.o
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-d.stopReq:
			cancel()
		case <-ctx.Done():
		}
	}()
	var end <-chan time.Time
	if o.duration > 0 {
		t := time.NewTimer(o.duration)
		defer t.Stop()
		end = t.C
	}
	rng := newRecordRand(o.seed)
	var pc pacer
	d.mu.Lock()
	pc.reset(d.rate, time.Now())
	d.mu.Unlock()
	for n := int64(0); o.count == 0 || n < o.count; n++ {
		// Pause and rate changes.
		for {
			d.mu.Lock()
			state, rate, changed := d.state, d.rate, d.changed
			d.mu.Unlock()
			if rate != pc.rate {
				pc.reset(rate, time.Now())
			}
			if state == stateRunning {
				break
			}
			if state != statePaused {
				return nil
			}
			select {
			case <-changed:
				pc.reset(rate, time.Now())
			case <-ctx.Done():
				return nil
			case <-end:
				return nil
			}
		}
		if w := pc.next(time.Now()); w > time.Millisecond {
			t := time.NewTimer(w)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-end:
				t.Stop()
				return nil
			}
		}
		select {
		case <-end:
			return nil
		case <-ctx.Done():
			return nil
		default:
		}
		if d.txn != nil {
			if err := d.txnAdd(d.record(n, rng)); err != nil {
				return err
			}
			continue
		}
		if err := d.prod.Send(ctx, d.record(n, rng)); err != nil {
			if ctx.Err() != nil || errors.Is(err, producer.ErrClosed) {
				return nil
			}
			return fmt.Errorf("send record %d: %w", n, err)
		}
	}
	return nil
}

func (d *daemon) requestStop() {
	d.stopOnce.Do(func() {
		close(d.stopReq)
		d.setState(stateStopping)
	})
}

func (d *daemon) setState(s string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.state == stateDone || d.state == s || (d.state == stateStopping && s != stateDone) {
		return
	}
	d.state = s
	close(d.changed)
	d.changed = make(chan struct{})
}

func (d *daemon) setRate(r float64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.rate = r
	close(d.changed)
	d.changed = make(chan struct{})
}

// status is the StatusResponse now.
func (d *daemon) status() *tapesv1.StatusResponse {
	st := d.prod.Stats()
	pid, epoch := d.prod.ProducerID()
	d.mu.Lock()
	state, rate := d.state, d.rate
	d.mu.Unlock()
	resp := &tapesv1.StatusResponse{
		State: state, Topic: d.o.topic, Acks: d.o.acks, Idempotent: d.o.idempotent, Keys: d.o.keys == "on",
		Rate: rate, Sent: st.Sent, Acked: st.Acked, Failed: st.Failed, Retried: st.RetriedRecords,
		DuplicatesAvoided: st.DuplicatesAvoided, InFlight: st.InFlight,
		AckedPerPartition: map[int32]int64{}, ProducerId: pid, ProducerEpoch: epoch,
	}
	for p, n := range st.AckedPerPartition {
		resp.AckedPerPartition[int32(p)] = n
	}
	if t := d.txn; t != nil {
		d.mu.Lock()
		resp.TransactionalId, resp.ProducerId, resp.ProducerEpoch = d.o.transactionalID, t.p.ProducerID, t.p.Epoch
		resp.Sent, resp.Acked, resp.TransactionsCommitted, resp.TransactionsAborted = t.sent, t.acked, t.committed, t.aborted
		resp.Failed = map[string]int64{}
		for k, v := range t.failed {
			resp.Failed[k] = v
		}
		d.mu.Unlock()
	}
	return resp
}

func (d *daemon) progressLoop(done <-chan struct{}) {
	if d.o.progress <= 0 {
		return
	}
	t := time.NewTicker(d.o.progress)
	defer t.Stop()
	last, lastAt := int64(0), time.Now()
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			if d.txn != nil {
				st := d.status()
				rate := float64(st.Acked-last) / now.Sub(lastAt).Seconds()
				last, lastAt = st.Acked, now
				fmt.Fprintf(d.out, "%s: %d sent, %d committed in %d transactions, %d aborted transactions, %.0f committed/s\n",
					d.o.name, st.Sent, st.Acked, st.TransactionsCommitted, st.TransactionsAborted, rate)
				continue
			}
			st := d.prod.Stats()
			rate := float64(st.Acked-last) / now.Sub(lastAt).Seconds()
			last, lastAt = st.Acked, now
			fmt.Fprintf(d.out, "%s: %d sent, %d acked, %d failed, %d retried, %d duplicates avoided, %d in flight, %.0f acked/s\n",
				d.o.name, st.Sent, st.Acked, st.FailedTotal(), st.RetriedRecords, st.DuplicatesAvoided, st.InFlight, rate)
		}
	}
}

// summary prints the final counters.
func (d *daemon) summary(st *tapesv1.StatusResponse) {
	o := d.o
	mode := "not idempotent"
	if o.idempotent {
		mode = fmt.Sprintf("idempotent (producer id %d)", st.ProducerId)
	}
	if d.txn != nil {
		fmt.Fprintf(d.out, "%s summary: topic %s, transactional id %s (producer id %d, epoch %d), %.1fs\n", o.name, o.topic, o.transactionalID, st.ProducerId, st.ProducerEpoch, time.Since(d.start).Seconds())
		fmt.Fprintf(d.out, "  sent                %d\n", st.Sent)
		fmt.Fprintf(d.out, "  committed           %d records in %d transactions\n", st.Acked, st.TransactionsCommitted)
		fmt.Fprintf(d.out, "  aborted             %d transactions\n", st.TransactionsAborted)
		if o.history != "" {
			fmt.Fprintf(d.out, "  history             %s\n", o.history)
		}
		return
	}
	ps := d.prod.Stats()
	fmt.Fprintf(d.out, "%s summary: topic %s, acks=%s, %s, %.1fs\n", o.name, o.topic, producer.AcksName(o.acks), mode, time.Since(d.start).Seconds())
	fmt.Fprintf(d.out, "  sent                %d\n", ps.Sent)
	fmt.Fprintf(d.out, "  acked               %d\n", ps.Acked)
	failed := fmt.Sprint(ps.FailedTotal())
	if names := ps.FailedNames(); len(names) > 0 {
		var parts []string
		for _, n := range names {
			parts = append(parts, fmt.Sprintf("%s %d", n, ps.Failed[n]))
		}
		failed += " (" + strings.Join(parts, ", ") + ")"
	}
	fmt.Fprintf(d.out, "  failed              %s\n", failed)
	fmt.Fprintf(d.out, "  retried             %d records in %d requests\n", ps.RetriedRecords, ps.RetriedRequests)
	fmt.Fprintf(d.out, "  duplicates avoided  %d batches\n", ps.DuplicatesAvoided)
	if o.history != "" {
		fmt.Fprintf(d.out, "  history             %s\n", o.history)
	}
}
