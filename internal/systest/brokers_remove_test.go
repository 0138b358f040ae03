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

	"github.com/tapes-dev/tapes/internal/client"
	"github.com/tapes-dev/tapes/internal/clusterfile"
	"github.com/tapes-dev/tapes/internal/eventually"
)

// clusterCmd runs the cluster CLI against dir.
func clusterCmd(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "cluster"), append(args, "--dir", dir)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String() + errb.String(), err
}

// TestBrokersRemove: under a real `cluster up --brokers 4`, removing a
// broker that a partition of RF 4 needs is refused naming the partition,
// with nothing moved; once that topic is gone, `cluster brokers remove 4`
// moves every replica of broker 4 away, stops it and unregisters it, and the
// records written before are all still there.
func TestBrokersRemove(t *testing.T) {
	dir := t.TempDir()
	startClusterUp(t, dir, "--brokers", "4")
	if out, err := clusterCmd(t, dir, "topics", "create", "wide", "--partitions", "1", "--replication-factor", "4"); err != nil {
		t.Fatalf("create wide: %v\n%s", err, out)
	}
	out, err := clusterCmd(t, dir, "brokers", "remove", "4")
	if err == nil || !strings.Contains(out, "wide-0") || !strings.Contains(out, "nothing was moved") {
		t.Fatalf("brokers remove 4 with an RF-4 topic: %v\n%s", err, out)
	}
	if out, err := clusterCmd(t, dir, "topics", "delete", "wide"); err != nil {
		t.Fatalf("delete wide: %v\n%s", err, out)
	}
	if out, err := clusterCmd(t, dir, "topics", "create", "kept", "--partitions", "4", "--replication-factor", "3", "--config", "min.insync.replicas=2"); err != nil {
		t.Fatalf("create kept: %v\n%s", err, out)
	}
	lines := strings.Repeat("record\n", 200)
	produce := exec.Command(filepath.Join(binDir, "cluster"), "produce", "--topic", "kept", "--acks", "all", "--dir", dir)
	produce.Stdin = strings.NewReader(lines)
	if b, err := produce.CombinedOutput(); err != nil {
		t.Fatalf("produce: %v\n%s", err, b)
	}
	if ids := brokerRows(t, dir); ids != "1 alive,2 alive,3 alive,4 alive" {
		t.Fatalf("cluster brokers before the removal: %s", ids)
	}
	out, err = clusterCmd(t, dir, "brokers", "remove", "4")
	if err != nil {
		t.Fatalf("brokers remove 4: %v\n%s", err, out)
	}
	t.Logf("cluster brokers remove 4:\n%s", out)
	if !strings.Contains(out, "Removed broker 4") {
		t.Fatalf("no removal reported:\n%s", out)
	}
	f, err := clusterfile.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(client.Config{Bootstrap: strings.Split(f.Bootstrap, ","), MetadataMaxAge: 200 * time.Millisecond, RequestTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	err = eventually.Wait(60*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		md, err := cl.Metadata(ctx, nil, true)
		if err != nil {
			return err
		}
		for _, b := range md.Brokers {
			if b.Id == 4 {
				return fmt.Errorf("broker 4 still registered")
			}
		}
		var total int64
		for _, tm := range md.Topics {
			for _, pm := range tm.Partitions {
				for _, r := range pm.Replicas {
					if r == 4 {
						return fmt.Errorf("%s-%d still on broker 4", tm.Name, pm.Partition)
					}
				}
				if tm.Name == "kept" {
					if pm.HighWatermark < 0 {
						return fmt.Errorf("kept-%d has no high watermark yet", pm.Partition)
					}
					total += pm.HighWatermark - pm.LogStartOffset
				}
			}
		}
		if total != 200 {
			return fmt.Errorf("kept holds %d records, want 200", total)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if ids := brokerRows(t, dir); ids != "1 alive,2 alive,3 alive" {
		t.Fatalf("cluster brokers after the removal: %s", ids)
	}
}

// brokerRows runs `cluster brokers` and returns its rows' ID and STATE as
// "1 alive,2 alive,...".
func brokerRows(t *testing.T, dir string) string {
	t.Helper()
	out, err := clusterCmd(t, dir, "brokers")
	if err != nil {
		t.Fatalf("cluster brokers: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) == 0 || strings.Join(strings.Fields(lines[0]), " ") != "ID ADDRESS KAFKA-ADDRESS STATE LEADER REPLICAS" {
		t.Fatalf("cluster brokers header:\n%s", out)
	}
	var rows []string
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		rows = append(rows, f[0]+" "+f[3])
	}
	t.Logf("cluster brokers:\n%s", out)
	return strings.Join(rows, ",")
}
