// Package compat is `make compat`: the Kafka clients people already use,
// run against a real three-broker tapes cluster through its Kafka
// listeners, each checked against tapes' own reading of what it wrote.
//
// The suite itself is behind the build tag compat (compat_test.go and its
// helpers): `go test -tags compat -count=1 -v ./internal/compat/`. It starts
// the cluster (internal/testcluster: brokerd processes on loopback, ports
// the kernel picks, a temporary directory), runs each client program
// (Apache Kafka's tools and Java client with `java -cp`, kcat,
// confluent-kafka on two librdkafka versions, kafka-python, KafkaJS; their
// sources in testdata/), and prints one line per client:
//
//	compat: CLIENT ok
//	compat: CLIENT FAIL (reason)
//	compat: CLIENT skip (reason: what to install)
//
// A client whose tool is missing fails under CI=true and is skipped
// otherwise; .ci/compat-deps installs them all. COMPAT_BOOTSTRAP=HOST:PORT,...
// runs the same programs against any Kafka cluster instead (a real Apache
// Kafka, to show that each program is right), leaving out the comparisons
// with tapes' CLI.
// `make compat COMPAT_RUN=REGEXP` (go test -run 'TestCompat/REGEXP') runs
// only the clients whose subtest names match, one at a time while
// iterating; a consumer step whose producer step did not run says so.
//
// What is checked (check.go, tested in plain `go test`): every record a
// producer had acknowledged is stored exactly once, at the partition and
// offset the acknowledgement named, each key's records in the order sent;
// every stored record is handled exactly once by a consumer, and a group's
// committed offsets reach the log end.
package compat
