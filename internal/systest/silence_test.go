package systest

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runBin runs one of the built binaries with a generous bound and returns
// its combined output, its error, and how long it took.
func runBin(t *testing.T, within time.Duration, name string, args ...string) (string, error, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, name), args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %s still running after %v (hung in silence?): %s", name, strings.Join(args, " "), within, out.String())
	}
	return out.String(), err, time.Since(start)
}

// A second brokerd on a live broker's data directory fails at once, naming
// the broker that holds it, instead of blocking in the storage's file lock.
func TestSecondBrokerdOnALiveDataDirFails(t *testing.T) {
	e := start(t, 1)
	b := e.Brokers()[0]
	out, err, _ := runBin(t, 60*time.Second, "brokerd", "--id", "1", "--data-dir", b.DataDir,
		"--listen", "127.0.0.1:0", "--peers", fmt.Sprintf("1=%s", b.Address))
	want := fmt.Sprintf("data dir %s is in use by pid %d", b.DataDir, b.PID)
	if err == nil || !strings.Contains(out, want) {
		t.Fatalf("second brokerd: %v: %q; want it to fail with %q", err, out, want)
	}
}
