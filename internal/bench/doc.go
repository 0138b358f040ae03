// Package bench measures a real 3-broker cluster on this machine and prints
// the figures: produce throughput and latency percentiles (1 and 6
// partitions, acks=1 and acks=all, batched), the time from a leader's
// SIGKILL to the next acks=all success, and the idle CPU of 100 partitions.
// It runs only with TAPES_BENCH=1 (`make bench`); nothing here asserts a
// timing.
package bench
