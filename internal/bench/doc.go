// Package bench measures a real 3-broker cluster on this machine and prints
// the figures: produce throughput and latency percentiles (1 and 6
// partitions, acks=1 and acks=all, batched), the time from a leader's
// SIGKILL (and SIGSTOP) to the next acks=all success, the idle CPU of 100
// partitions, `producerd perf` for acks 0, 1 and all (idempotent), a
// rebalance's cost per assignor, and a group coordinator's failover with
// and without compaction of __consumer_offsets.
// It runs only with TAPES_BENCH=1 (`make bench`); nothing here asserts a
// timing.
package bench
