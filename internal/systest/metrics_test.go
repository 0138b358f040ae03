package systest

import (
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tapes-dev/tapes/internal/testcluster"
)

// TestMetrics: a broker started with --metrics-listen serves Prometheus
// metrics whose figures follow what really happened: the records its
// partition leader acknowledged, the partition's high watermark and the
// fsyncs of its Raft log; with --pprof-listen it serves Go's profiles on a
// listener of their own.
func TestMetrics(t *testing.T) {
	e := start(t, 3, "--metrics-listen", "127.0.0.1:0", "--pprof-listen", "127.0.0.1:0")
	e.CreateTopic("orders", 1, 3, nil)
	e.ProduceN("orders", 0, "m", 120)
	leader := e.Partition("orders", 0).LeaderId
	url := e.ServedURL(testcluster.BrokerName(leader), "metrics")
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`tapes_produce_records_total{acks="all"} 120`,
		`tapes_partition_high_watermark{partition="0",topic="orders"} 120`,
		`tapes_partition_leader{partition="0",topic="orders"} 1`,
		`tapes_partition_isr_size{partition="0",topic="orders"} 3`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// 120 acks=all records in batches of 50: at least three commits of the
	// partition's Raft log on its leader, two fdatasyncs each.
	m := regexp.MustCompile(`(?m)^tapes_fsyncs_total\{kind="raft_log"\} (\d+)$`).FindSubmatch(body)
	if m == nil {
		t.Fatalf("metrics lack tapes_fsyncs_total{kind=\"raft_log\"}")
	}
	if n, _ := strconv.Atoi(string(m[1])); n < 6 {
		t.Errorf("tapes_fsyncs_total{kind=\"raft_log\"} = %d after three acks=all batches, want at least 6", n)
	}
	purl := e.ServedURL(testcluster.BrokerName(leader), "pprof")
	presp, err := http.Get(purl + "goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	pbody, _ := io.ReadAll(presp.Body)
	presp.Body.Close()
	if presp.StatusCode != http.StatusOK || !strings.Contains(string(pbody), "goroutine profile:") {
		t.Errorf("%sgoroutine?debug=1: %s\n%.300s", purl, presp.Status, pbody)
	}
}
