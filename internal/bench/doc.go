// Package bench measures a real 3-broker cluster on this machine and prints
// the figures: produce throughput and latency percentiles (1 and 6
// partitions, acks=1 and acks=all, batched), the time from a leader's
// SIGKILL (and SIGSTOP) to the next acks=all success, the idle CPU of 100
// partitions, `producerd perf` for acks 0, 1 and all (idempotent), a
// rebalance's cost per assignor, a group coordinator's failover with
// and without compaction of __consumer_offsets, and Apache Kafka's
// kafka-producer-perf-test and a franz-go producer against the Kafka
// listeners beside `producerd perf` against gRPC on one cluster
// (TestBenchKafkaPerf); the cost as work
// grows: acks=all records/s for 1, 6, 24 and 96 partitions
// (TestBenchScaleProduce), the start, idle CPU, RSS, goroutines and open
// files, and a leader's SIGKILL at 100 and 1,000 partitions
// (TestBenchScalePartitions); and the grid that chose producerd's batching
// defaults (TestBenchProducerDefaults); with TAPES_BENCH_JETSTREAM (a
// jsbench binary), NATS JetStream R3's async publish after
// TestBenchProducerPerf's rows, tapes' cluster stopped; with
// TAPES_BENCH_KAFKA_PEER (a copy of ../shared/peers/kafka), Apache Kafka's
// row in TestBenchKafkaPerf and, after TestBenchFailover's and
// TestBenchIdleCPU's rows (tapes' cluster stopped), the peer's own failover
// and idle scenarios and the ratios tapes / Kafka. Under every observed row it prints
// the machine's load (load average, other processes' CPU). It starts with the disk's
// fsync rate; under each produce row it prints every broker's fsyncs/s (its
// tapes_fsyncs_total), CPU and the top functions of a CPU profile taken
// during the row (brokerd --pprof-listen), so each row's bottleneck shows.
// TAPES_BENCH_BROKER_ARGS adds brokerd flags (e.g. "--raft-log bolt" to
// measure the per-partition raft-boltdb store), TAPES_BENCH_SECONDS sets
// the length of a row, and TAPES_BENCH_KEEP_PROFILES=DIR keeps each CPU
// profile there for `go tool pprof` (its path is printed under the row).
// It runs only with TAPES_BENCH=1 (`make bench`); nothing here asserts a
// timing.
package bench
