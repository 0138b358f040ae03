package systest

import (
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/tapes-dev/tapes/internal/testcluster"
)

// binDir holds brokerd and cluster, built once for the package.
var binDir string

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == kafkaProbeArg {
		os.Exit(kafkaProbe(os.Args[2:])) // the test binary as a Kafka client under the launcher
	}
	if len(os.Args) > 1 && os.Args[1] == kafkaAcks1Arg {
		os.Exit(kafkaAcks1Producer(os.Args[2:]))
	}
	dir, cleanup, err := testcluster.Build()
	if err != nil {
		fmt.Fprintf(os.Stderr, "systest: %v\n", err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// start starts a cluster of n brokers for t with fast timings.
func start(t *testing.T, n int, extra ...string) *testcluster.Env {
	return testcluster.Start(t, binDir, n, append(slices.Clone(testcluster.FastBrokerArgs), extra...)...)
}
