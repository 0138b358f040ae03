package broker

import (
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/storage"
	"github.com/tapes-dev/tapes/internal/txn"
)

// metrics are the broker's Prometheus metrics. Request counters are updated
// by the API handlers; partition gauges are read from the replicas at scrape
// time, so an unscraped broker pays nothing for them.
type metrics struct {
	reg            *prometheus.Registry
	produce        *prometheus.CounterVec
	produceRecords *prometheus.CounterVec
	produceSeconds *prometheus.HistogramVec
	fetch          *prometheus.CounterVec
}

func newMetrics(b *Broker) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		produce: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tapes_produce_requests_total", Help: "Produce requests answered by this broker, by acks and Kafka error name (\"\" = success).",
		}, []string{"acks", "error"}),
		produceRecords: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tapes_produce_records_total", Help: "Records acknowledged by this broker, by acks.",
		}, []string{"acks"}),
		produceSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tapes_produce_seconds", Help: "Time from a Produce request's arrival to its answer, by acks.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"acks"}),
		fetch: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tapes_fetch_requests_total", Help: "Fetch requests answered by this broker, by Kafka error name (\"\" = success).",
		}, []string{"error"}),
	}
	m.reg.MustRegister(m.produce, m.produceRecords, m.produceSeconds, m.fetch,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&partitionCollector{b: b})
	for _, k := range storage.FsyncKinds() {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tapes_fsyncs_total", Help: "fsyncs this broker issued, by what they made durable (raft_log: two per bbolt commit).",
			ConstLabels: prometheus.Labels{"kind": k.String()},
		}, func() float64 { return float64(storage.Fsyncs(k)) }))
	}
	for _, k := range txn.Kinds() {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tapes_txn_concurrent_transactions_total", Help: "CONCURRENT_TRANSACTIONS answers of this broker's transaction coordinator (after the hold), by request.",
			ConstLabels: prometheus.Labels{"request": k},
		}, func() float64 {
			if b.txns == nil {
				return 0
			}
			return float64(b.txns.ConcurrentAnswers()[k])
		}))
	}
	return m
}

func acksLabel(acks int32) string {
	if acks == -1 {
		return "all"
	}
	return fmt.Sprint(acks)
}

// observeProduce records one answered Produce.
func (m *metrics) observeProduce(acks int32, records int, start time.Time, err error) {
	a := acksLabel(acks)
	m.produce.WithLabelValues(a, string(kerr.CodeOf(kerr.FromStatus(err)))).Inc()
	if err == nil {
		m.produceRecords.WithLabelValues(a).Add(float64(records))
	}
	m.produceSeconds.WithLabelValues(a).Observe(time.Since(start).Seconds())
}

// MetricsHandler serves the metrics in Prometheus' text format.
func (b *Broker) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(b.metrics.reg, promhttp.HandlerOpts{})
}

var (
	descHW       = prometheus.NewDesc("tapes_partition_high_watermark", "High watermark (end of the committed, applied log) of a hosted replica.", []string{"topic", "partition"}, nil)
	descLogStart = prometheus.NewDesc("tapes_partition_log_start_offset", "First retained offset of a hosted replica.", []string{"topic", "partition"}, nil)
	descLeader   = prometheus.NewDesc("tapes_partition_leader", "1 when this broker is the partition's ready leader, else 0.", []string{"topic", "partition"}, nil)
	descISR      = prometheus.NewDesc("tapes_partition_isr_size", "In-sync replicas as this broker computes them (leaders only).", []string{"topic", "partition"}, nil)
	descTerm     = prometheus.NewDesc("tapes_partition_raft_term", "Current Raft term (leader epoch) of a hosted replica.", []string{"topic", "partition"}, nil)
	descLogBytes = prometheus.NewDesc("tapes_partition_log_bytes", "Bytes of segment files of a hosted replica.", []string{"topic", "partition"}, nil)
)

// partitionCollector reports every hosted replica at scrape time.
type partitionCollector struct{ b *Broker }

func (c *partitionCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descHW, descLogStart, descLeader, descISR, descTerm, descLogBytes} {
		ch <- d
	}
}

func (c *partitionCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.b.replicaList() {
		cfg := r.Config()
		st := r.Status()
		labels := []string{cfg.Topic, fmt.Sprint(cfg.Partition)}
		leader := 0.0
		if st.ReadyForClient {
			leader = 1
			ch <- prometheus.MustNewConstMetric(descISR, prometheus.GaugeValue, float64(len(st.ISR)), labels...)
		}
		ch <- prometheus.MustNewConstMetric(descHW, prometheus.GaugeValue, float64(st.HighWatermark), labels...)
		ch <- prometheus.MustNewConstMetric(descLogStart, prometheus.GaugeValue, float64(st.LogStart), labels...)
		ch <- prometheus.MustNewConstMetric(descLeader, prometheus.GaugeValue, leader, labels...)
		ch <- prometheus.MustNewConstMetric(descTerm, prometheus.GaugeValue, float64(st.Term), labels...)
		ch <- prometheus.MustNewConstMetric(descLogBytes, prometheus.GaugeValue, float64(st.LogBytes), labels...)
	}
}
