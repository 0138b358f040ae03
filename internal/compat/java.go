package compat

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Where .ci/compat-deps installs Kafka's Java client and tools, and how
// they are run. Used by the suite (tools_test.go) and by internal/bench,
// whose `make bench` runs Kafka's kafka-producer-perf-test beside
// `producerd perf`.

// ProducerPerformance is kafka-producer-perf-test's main class, as
// bin/kafka-producer-perf-test.sh runs it in Kafka 4.x.
const ProducerPerformance = "org.apache.kafka.tools.ProducerPerformance"

// kafkaToolsJar is the jar whose presence says Kafka's jars are installed.
const kafkaToolsJar = "kafka-tools-4.4.0.jar"

// Home is where .ci/compat-deps installs what is not a Debian package:
// lib/ (Kafka's jars), venv/ (confluent-kafka and kafka-python from PyPI),
// js/node_modules (kafkajs). $COMPAT_HOME, else ~/.cache/tapes-compat.
func Home() string {
	if h := os.Getenv("COMPAT_HOME"); h != "" {
		return h
	}
	h, _ := os.UserHomeDir()
	return filepath.Join(h, ".cache", "tapes-compat")
}

// LibDir holds Kafka's jars (kafka-clients, kafka-tools and their runtime
// dependencies).
func LibDir() string { return filepath.Join(Home(), "lib") }

// JavaMissing says why Kafka's Java tools cannot run here (java or the
// jars missing), or nil.
func JavaMissing() error {
	if out, err := exec.Command("java", "-version").CombinedOutput(); err != nil {
		return fmt.Errorf("java missing: java -version: %v: %s", err, strings.TrimSpace(string(out)))
	}
	if _, err := os.Stat(filepath.Join(LibDir(), kafkaToolsJar)); err != nil {
		return fmt.Errorf("Kafka's jars missing: %v", err)
	}
	return nil
}

// JavaCmd is `java -cp LIB/*[:CLASSES] MAIN ARGS` as a command name and
// arguments, with a small serial-GC JVM logging at WARN to stderr. The JVM
// is tuned to start fast (no C2 compiler: -XX:TieredStopAtLevel=1), which
// suits the suite's short-lived tools and makes a long run's hot loop
// slower: for a throughput figure use PerfToolCmd.
func JavaCmd(classes, main string, args ...string) (string, []string) {
	return "java", javaArgs([]string{"-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"}, classes, main, args)
}

// kafkaPerfJVM is the JVM bin/kafka-producer-perf-test.sh gives the tool:
// its heap (KAFKA_HEAP_OPTS=-Xmx512M) and kafka-run-class.sh's
// KAFKA_JVM_PERFORMANCE_OPTS (G1, both JIT compilers), as ../shared/peers/kafka
// runs it.
var kafkaPerfJVM = []string{"-Xmx512M", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
	"-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent", "-XX:MaxInlineLevel=15",
	"-Djava.awt.headless=true"}

// PerfToolCmd is JavaCmd("", main, args...) with the JVM that Kafka's
// bin/kafka-producer-perf-test.sh starts, so that a throughput measured
// with ProducerPerformance is the tool's as Kafka ships it. With
// JavaCmd's fast-start JVM the producer's own CPU per record was about
// three times that of `producerd perf` and bounded the row on a 2-core
// machine (ARCHITECTURE.md "Where the time goes").
func PerfToolCmd(main string, args ...string) (string, []string) {
	return "java", javaArgs(kafkaPerfJVM, "", main, args)
}

// javaArgs is java's arguments: jvm, logging at WARN to stderr, the
// classpath LIB/*[:CLASSES], main and args.
func javaArgs(jvm []string, classes, main string, args []string) []string {
	cp := filepath.Join(LibDir(), "*")
	if classes != "" {
		cp += string(os.PathListSeparator) + classes
	}
	a := append(slices.Clone(jvm), "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-Dorg.slf4j.simpleLogger.logFile=System.err",
		"-cp", cp, main)
	return append(a, args...)
}
