# tapes: a Kafka-like log whose brokers replicate every partition through Raft.
#
#   make cluster   build everything and start a local 3-broker cluster with topic `orders`
#   make cluster-netns  (root only) the same on three network namespaces, one broker on each
#                  own address (10.77.0.1-3), joined by a bridge; removed on exit
#   make test      format and vet checks, generated-code drift check, every test (-race)
#   make bench     throughput, latency, failover and idle-CPU figures, with the disk's fsync
#                  rate and each broker's fsyncs/s, CPU and profile per row (minutes); Kafka's
#                  kafka-producer-perf-test on the Kafka listener beside producerd perf on gRPC
#                  (skipped, with the reason, without java and .ci/compat-deps' jars)
#   make compat    the Kafka clients people use (Kafka's tools and Java client, kcat,
#                  confluent-kafka, kafka-python, KafkaJS) against a fresh cluster, one line
#                  per client; .ci/compat-deps installs them (COMPAT_BOOTSTRAP: another Kafka;
#                  COMPAT_RUN=REGEXP: only the clients it matches)
#   make chaos     every chaos experiment once, then a 10-minute nemesis (reports in .tapes/runs/)
#   make proto     regenerate internal/gen from proto/ with buf (run through `go run`)

BUF       := go run github.com/bufbuild/buf/cmd/buf@v1.75.0
BIN       := $(CURDIR)/bin
BINARIES  := brokerd cluster producerd consumerd chaos
GOTEST    ?= go test
# -count=1: the end-to-end tests build brokerd & co. themselves, which Go's
# test cache cannot see; a cached pass could hide a change to them.
# -timeout catches a hung test; internal/systest alone takes 11-14 minutes
# on a loaded 2-core machine (14m was too close: a contaminated run hit it).
TESTFLAGS ?= -race -count=1 -timeout 20m

.PHONY: all build cluster cluster-netns test check proto proto-check lint-proto bench compat chaos clean

all: build

build:
	@mkdir -p $(BIN)
	go build -o $(BIN)/ $(addprefix ./,$(BINARIES))

cluster: build
	$(BIN)/cluster up --brokers 3 --demo

# Root only: three hosts (network namespaces) on 10.77.0.0/24 joined by a
# bridge, one broker each; `chaos ip-partition` & co. fault the network
# between them. Its own directory: the brokers' addresses differ from
# `make cluster`'s.
cluster-netns: build
	$(BIN)/cluster up --brokers 3 --demo --netns --dir .tapes-netns

test: check proto-check
	$(GOTEST) $(TESTFLAGS) ./...

# gofmt and go vet must be clean (generated code excluded from gofmt).
check:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	go vet ./...

proto:
	$(BUF) lint
	$(BUF) generate

# Regenerate into a temporary directory and fail when internal/gen differs.
proto-check:
	@tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	  $(BUF) lint && $(BUF) generate -o $$tmp && \
	  diff -r internal/gen $$tmp/internal/gen && echo "proto: generated code matches proto/"

# The environment reaches the benchmarks as is: e.g. make bench
# TAPES_BENCH_JETSTREAM=/tmp/jsbench (a jsbench binary) adds NATS JetStream's
# rows and the ratios to TestBenchProducerPerf; TAPES_BENCH_KAFKA_PEER=DIR an
# Apache Kafka row to TestBenchKafkaPerf.
bench: build
	TAPES_BENCH=1 $(GOTEST) -run '^TestBench' -v -timeout 60m ./internal/bench/
	TAPES_STARTUP_ITERATIONS=20 $(GOTEST) -run '^TestStartupScriptNeverRaces$$' -v -timeout 30m ./internal/systest/

# internal/compat, behind its build tag: one cluster, the clients one after
# the other (each a JVM, Python or Node process on 2 cores: minutes).
# COMPAT_RUN=REGEXP runs only the clients whose subtest names match (spaces
# are underscores there), e.g. COMPAT_RUN=kcat or COMPAT_RUN='^KafkaJS'.
compat:
	$(GOTEST) -tags compat -count=1 -v -timeout 40m $(if $(COMPAT_RUN),-run 'TestCompat/$(COMPAT_RUN)') ./internal/compat/

# Each experiment on a fresh cluster; stops at the first whose expectation
# does not hold. NEMESIS sets the long run's length.
NEMESIS ?= 10m
RUNS    := $(CURDIR)/.tapes/runs/$(shell date +%Y%m%d-%H%M%S)
chaos: build
	@for x in $$($(BIN)/chaos list | grep -E '^[a-z0-9-]+ \(' | cut -d' ' -f1); do \
	  $(BIN)/chaos run $$x --out $(RUNS)/$$x || exit 1; done
	$(BIN)/chaos run nemesis --duration $(NEMESIS) --out $(RUNS)/nemesis-long

clean:
	rm -rf $(BIN)
