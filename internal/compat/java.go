package compat

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
// arguments, with a small serial-GC JVM logging at WARN to stderr.
func JavaCmd(classes, main string, args ...string) (string, []string) {
	cp := filepath.Join(LibDir(), "*")
	if classes != "" {
		cp += string(os.PathListSeparator) + classes
	}
	return "java", append([]string{"-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-Dorg.slf4j.simpleLogger.logFile=System.err",
		"-cp", cp, main}, args...)
}
