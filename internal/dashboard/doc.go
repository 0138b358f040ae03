// Package dashboard serves the live page of a local cluster: `cluster up`
// starts it on loopback (--web-listen) and prints its address. The page
// (static/, embedded with go:embed: no build step) shows every partition as
// a tape of records with each replica's log end, the high watermark, the
// ISR and the leader with its epoch; the producers, the consumer groups and
// their members; the sink's effects and counters; the text of the CLI's
// describe commands; a timeline; and it drives all of them: process and
// link faults, producers and consumers, offset resets, chaos experiments.
//
// # How it reads the cluster
//
// Background loops, each at its own pace, so that a paused or isolated
// broker slows or skews its own part and never the page. Every
// PollInterval (100 ms):
//
//   - each broker, by a loop of its own and directly (the observer is never
//     behind a fault-injection link), for its Metadata (its own view,
//     without offsets: a broker answering with offsets first asks its peers,
//     which a cut link holds for a second) and DescribeReplicas (each
//     replica's Raft term, log end, and on leaders the ISR, high watermark
//     and log start). The views are merged as a broker's own Metadata with
//     offsets merges them (internal/broker fillOffsets): per partition the
//     highest leader epoch, then the offsets and ISR of its ready leader,
//     the highest term winning. So an isolated old leader, which still
//     believes it leads, shows as the follower it has become, and the new
//     leader shows while the cut lasts. A broker that refuses (dead) adds
//     nothing; one that does not answer in time (paused) keeps its last
//     answer, as its log does not move either;
//   - the last RecordsPerTape records below the high watermark of every
//     partition whose high watermark or log start moved (Fetch), and the
//     acks=1 records to check for losses;
//   - ListGroups, DescribeGroup and OffsetFetch of every group, then the
//     merged metadata of reads that started after them (as `cluster groups
//     describe` reads the log ends after the offsets);
//   - the control endpoint of every producerd and consumerd the launcher
//     supervises, found in DIR/logs/NAME.log where the launcher writes the
//     "NAME: control endpoint ADDR" line they print.
//
// Every 200 ms: the sink file DIR/sink.db (read only, never created,
// through internal/sink's Follower, which counts as `cluster sink stats`
// counts but reads only the effects applied since its last poll) and the
// histories DIR/histories/NAME.jsonl of the launcher's producers and
// consumers. Every PollInterval the latest of each part is assembled into
// a Snapshot (the launcher's process states and links are read then);
// when it differs from the last one, its time aside, it is sent to every
// event stream, at most every PollInterval per stream.
//
// # HTTP API
//
//	GET  /                 the page: static/index.html (and /app.js, /style.css)
//	GET  /static/FILE      the same files under /static/
//	GET  /api/state        the Snapshot as JSON, plus "timeline": the last 200 entries
//	GET  /api/events       Server-Sent Events (below)
//	POST /api/action       an action (below)
//	GET  /runs/PATH        DIR/runs: experiment reports, /runs/NAME-TIME/report.html
//
// /api/events sends "retry: 1000", then at once `event: state` with the
// current snapshot and one `event: timeline` per entry for the last 200
// entries; then `event: state` whenever the snapshot changed (at most every
// PollInterval), `event: timeline` with one entry as each happens, and the
// comment ": keep-alive" after KeepAlive (15 s) without anything else.
//
// Snapshot (JSON field names; see snapshot.go for each field):
//
//	{ "at": RFC 3339, "dir": "...",
//	  "brokers": [{"id","name","address","state":"running|paused|exited|never started","pid","controller","lastExit"}],
//	  "topics": [{"name","partitions":[{"partition","leader","epoch","replicas","isr","logStart","highWatermark",
//	      "replicaEnds":{"1":120,...},"records":[{"offset","key","value","eventId","timestamp","control","txn","producerId"}],
//	      "lastStable","lastStableLag","lastStableSince","readers":[{"isolation","position","records","aborted"}],"error"}]}],
//	  "groups": [{"group","state","generation","assignor","coordinator",
//	      "members":[{"memberId","clientId","host","partitions":[..],"assignment"}],
//	      "committed":{"orders":{"0":100}},"totalLag"}],
//	  "consumers": [{"name","state":"running|paused|joining|rebalancing|crashed|stopped","group","topic","generation",
//	      "memberId","partitions":[{"partition","position","committed"}],"processed","commit","recordsPerPoll",
//	      "idempotentSink","assignor","pid","lastExit"}],
//	  "producers": [{"name","state":"starting|running|paused|stopping|stopped|crashed","topic","rate","acks","idempotent",
//	      "keys","hotKeyShare","sent","acked","failed":{"NAME":n},"retried","inFlight",
//	      "ackedPerPartition":{"0":n},"ratePerPartition":{"0":r},"pid","lastExit"}],
//	  "kafkaClients": [{"name","state":"running|paused|crashed|stopped","pid","lastExit","command",
//	      "links":[{"broker","mode","delayMs","jitterMs","connections","requests","responses"}]}],
//	  "links": [{"from","to","mode":"pass|blackhole|drop-back|drop-forward","delayMs","jitterMs"}],
//	  "sink": {"delivered","duplicates","neverProcessed","outOfKeyOrder","totalLag","activeConsumers","generation"},
//	  "effects": [{"eventId","key","partition","offset","consumer","duplicate","outOfOrder"}],
//	  "describeGroups": "...", "describeTopics": "...",
//	  "experiments": [{"name","about","defaultDuration"}],
//	  "runs": [{"name","dir","state":"running|passed|failed","report","started"}] }
//
// A record's "control" is "commit" or "abort" for a transaction marker
// (its own cell), "txn" "committed", "aborted" or "open" for a
// transactional record; "lastStable" is the partition's last stable
// offset and "lastStableLag" the high watermark minus it, both as of the
// tape's read; "lastStableSince" when (ms) the page first saw it at its value
// below the high watermark (0 when equal); "readers" are the page's own
// read_uncommitted and read_committed reads of the tape's window.
// Topics leave out internal ones (__consumer_offsets); "describeTopics"
// has them, as `cluster topics describe` does. Records carry their value
// cut to ValueChars characters and a null key when keyless. A sink
// counter is null while unknown (no sink file yet; Never processed without
// producer histories; the last three without a consumer of a known
// group). A consumer that exited with code 3, was killed or failed is
// "crashed"; one that exited cleanly (stopped through its control
// endpoint, or SIGTERM) is "stopped". "describeGroups" and
// "describeTopics" are the bytes `cluster groups describe GROUP` (one
// table per group, with the line it prints on stderr) and `cluster topics
// describe` print (internal/clitext).
//
// Timeline entries are {"at","kind","text"}, kind one of leader, isr,
// rebalance, commit-rejected, lost, fault, experiment:
//
//	leader           orders-0: broker 2 leads, epoch 5
//	isr              orders-0 ISR shrank to 1,3 | expanded to 1,2,3 | changed to 2,3
//	rebalance        group demo generation 4: consumer-2 got 2, 5; consumer-1 gave up 2, 5
//	commit-rejected  consumer-1: commit rejected with ILLEGAL_GENERATION (generation 3; orders 0→120)
//	lost             acks=1: 12 acknowledged records lost on orders-0 (offsets 120-131; producer-1)
//	fault            broker-2 paused (SIGSTOP) | broker-2 exited (signal: killed) | links: broker-1->broker-2 cut both ways
//	experiment       acks1-leader-isolation: <a line of `chaos run`'s output>
//
// Faults come from comparing the launcher's process states and links
// between polls, so those applied by `chaos` show as well as the page's.
// A lost record is an acks=1 record a producer history (written while the
// page runs) shows acknowledged at an offset that, once below the high
// watermark, holds another event_id or nothing: the leader that
// acknowledged it was deposed and its log truncated.
//
// Every request must name the page's own address in its Host header
// (127.0.0.1, localhost or [::1], the listener's IP or Config.Host, with
// the port; else 403, whatever the path: DNS rebinding). POST /api/action
// takes {"action": NAME, ...} with Content-Type application/json, the
// launch's token (Server.Token: the X-Tapes-Token header, or the cookie
// that GET /?token=T sets) and, when the browser sends an Origin, from
// this server's own page (see guard.go: another site's page cannot drive
// the cluster through the user's browser), and answers
// {"ok":true,"message":"..."} or an HTTP error status with
// {"ok":false,"error":"..."} whose text starts with the Kafka error name
// when there is one. A malformed or invalid request is 400 and nothing is
// done; another content type 415, a foreign Origin or a missing or wrong
// token 403; an unknown
// process 404; a conflict with the cluster's state (not running, a group
// with members, an experiment already running) 409.
//
//	kill|pause|resume|restart   {name}                      any process (SIGKILL, SIGSTOP, SIGCONT, restart)
//	cut          {from, to, oneWay}   both ways, or (oneWay) only what from sends to to
//	delay        {name, ms, jitter}   every link of name (ms > 0)
//	heal         {}                   every link passes, without delay
//	producer-start {name?, topic?="orders", rate=100, keys=true, hotKeyShare=0, acks="all"|"1"|"0", idempotent}
//	producer-stop|producer-pause|producer-resume {name}
//	producer-rate  {name, rate}
//	consumer-start {name?, group?="demo", topic?="orders", recordsPerPoll=100, commit="after"|"before"|"auto",
//	                idempotentSink, assignor="cooperative-sticky"|"range", processTime (ms)}
//	consumer-pause|consumer-resume|consumer-crash|consumer-stop {name}
//	reset-offsets  {group, topic, partition, offset}   refused while the group has members
//	experiment-run {name}             `chaos run NAME --out DIR/runs/NAME-TIME`, one at a time
//	predict-consumers {answer: "0".."8"}  topic predict-six (6 partitions) and 8 consumers in group predict-six
//	predict-order  {answer: "A1"|"B1"|"either", runs=5 (1-20)}  A1 then B1 to predict-order's 2 partitions, runs times
//
// The two predict actions are the "Test yourself" panel (predict.go):
// predict-consumers starts the group's missing consumers and answers at
// once; the panel then shows group predict-six's members from the
// snapshot, active (owning a partition) or idle. predict-order starts two
// consumers (30 ms per record) in group predict-order, waits until each
// owns a partition, and per run writes a few other records ahead of A1 and
// B1, then A1 (acknowledged) and B1, and answers with each run's
// processing order read from the two consumers' histories.
//
// producer-start runs producerd under the launcher (name: the first free
// producer-N) with --control-listen 127.0.0.1:0 and --history
// DIR/histories/NAME.jsonl; consumer-start runs consumerd (consumer-N)
// with --sink DIR/sink.db, --history DIR/histories/NAME.jsonl,
// --control-listen 127.0.0.1:0 and --session-timeout 6s. The producer and
// consumer actions go through their control endpoints
// (tapes.v1.ProducerControlService, tapes.v1.ConsumerControlService).
// reset-offsets is `cluster groups reset-offsets GROUP --topic TOPIC:P
// --to-offset N --execute` (internal/offsetreset): clamped to the log, and
// refused with the CLI's reason while the group has members.
package dashboard
