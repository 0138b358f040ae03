package systest

import (
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/testcluster"
)

// TestMetrics: a broker started with --metrics-listen serves Prometheus
// metrics whose figures follow what really happened: the records its
// partition leader acknowledged and the partition's high watermark.
func TestMetrics(t *testing.T) {
	e := start(t, 3, "--metrics-listen", "127.0.0.1:0")
	e.CreateTopic("orders", 1, 3, nil)
	e.ProduceN("orders", 0, "m", 120)
	leader := e.Partition("orders", 0).LeaderId
	p, _ := e.C.Process(testcluster.BrokerName(leader))
	var url string
	e.WaitFor(10*time.Second, "the metrics address in the leader's log", func() bool {
		b, _ := os.ReadFile(p.Log)
		m := regexp.MustCompile(`serving metrics" url=(\S+)`).FindSubmatch(b)
		if m != nil {
			url = string(m[1])
		}
		return m != nil
	})
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
}
