// Package report owns the report of a chaos experiment: the experiment's own
// timeline (events.jsonl, written through EventLog while the experiment
// runs, read back with ReadEvents) and the page that `chaos run` leaves in
// its output directory, DIR/report.html (Write).
//
// The page is one self-contained HTML file (inline CSS and SVG, no script,
// nothing fetched) drawn from what the experiment left in DIR:
//
//   - producer-*.jsonl, the producers' histories (producer.HistoryLine);
//   - consumer-*.jsonl, the consumers' histories (consumer.HistoryLine);
//   - events.jsonl, the timeline of faults, leader changes and notes
//     (Event);
//   - check.json, the checker's result, treated as opaque JSON: it is
//     shown pretty-printed, and its top-level "counts" (kind -> number)
//     and "valid" (bool), when present, as a verdict table.
//
// Like Jepsen's plots, the page draws over the seconds of the run: the
// acknowledged writes per second, the failed sends per second by error,
// the write latency (median and maximum per second), the fault intervals
// shaded and labelled, the leader changes as ticks and the consumers'
// rebalances as marks on one lane per consumer. It also measures the
// unavailability after every kill (Unavailability): the time from the kill
// to the next acknowledged write.
//
// The aggregations the page plots (PerSecond, Aggregate, Median,
// Unavailability, Windows, FaultIntervals) are exported for the experiment
// runner and for tests. The package reads the histories through the
// producer and consumer packages' readers and depends on nothing else of
// tapes.
package report
