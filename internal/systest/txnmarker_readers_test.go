package systest

import (
	"context"
	"strings"
	"testing"
	"time"

	fkerr "github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tapes-dev/tapes/internal/check"
	"github.com/tapes-dev/tapes/internal/eventually"
	"github.com/tapes-dev/tapes/internal/recordbatch"
	"github.com/tapes-dev/tapes/internal/storage"
)

// TestTapesReadersPassATrailingMarker: a partition whose last batch is a
// transaction's commit marker (a control record, which no fetch returns as
// a record) is read to its high watermark by tapes' own readers:
// testcluster's ReadAll, the checker's full read (check.ReadTopic) and
// `cluster consume --until-end`, each returning the transaction's records
// and stopping. They take their next position from the fetch's
// next_offset (client.NextOffset), not from the last record.
func TestTapesReadersPassATrailingMarker(t *testing.T) {
	e := start(t, 3)
	e.CreateTopic("marked", 1, 3, map[string]string{"min.insync.replicas": "2"})
	e.WaitSettled("marked", 60*time.Second)
	leader := e.Partition("marked", 0).LeaderId
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.KafkaBootstrap()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	ireq := kmsg.NewPtrInitProducerIDRequest()
	ireq.Version, ireq.TransactionTimeoutMillis = 4, 60000
	iresp, err := ireq.RequestWith(ctx, cl)
	if err == nil {
		err = fkerr.ErrorForCode(iresp.ErrorCode)
	}
	if err != nil {
		t.Fatalf("InitProducerId: %v", err)
	}
	now := time.Now().UnixMilli()
	batch := recordbatch.EncodeTransactional(recordbatch.Producer{ID: iresp.ProducerID, Epoch: iresp.ProducerEpoch, BaseSequence: 0},
		[]storage.Record{{Timestamp: now, Key: []byte("k"), Value: []byte("t0")}, {Timestamp: now, Key: []byte("k"), Value: []byte("t1")}})
	broker := cl.Broker(int(leader))
	eventually.Nil(t, 60*time.Second, "the transactional batch is appended", func() error {
		req := kmsg.NewPtrProduceRequest()
		req.Version, req.Acks, req.TimeoutMillis, req.TransactionID = 9, -1, 30000, kmsg.StringPtr("readers")
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "marked"
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Records = batch
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := broker.Request(ctx, req)
		if err != nil {
			return err
		}
		return fkerr.ErrorForCode(resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode)
	})
	eventually.Nil(t, 60*time.Second, "the commit marker is written", func() error {
		req := kmsg.NewPtrWriteTxnMarkersRequest()
		req.Version = 1
		m := kmsg.NewWriteTxnMarkersRequestMarker()
		m.ProducerID, m.ProducerEpoch, m.Committed = iresp.ProducerID, iresp.ProducerEpoch, true
		mt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
		mt.Topic, mt.Partitions = "marked", []int32{0}
		m.Topics = append(m.Topics, mt)
		req.Markers = append(req.Markers, m)
		resp, err := broker.Request(ctx, req)
		if err != nil {
			return err
		}
		return fkerr.ErrorForCode(resp.(*kmsg.WriteTxnMarkersResponse).Markers[0].Topics[0].Partitions[0].ErrorCode)
	})
	if hw := e.Partition("marked", 0).GetHighWatermark(); hw != 3 {
		t.Fatalf("marked-0 high watermark %d, want 3 (two records and the marker)", hw)
	}

	if recs := e.ReadAll("marked", 0); len(recs) != 2 || string(recs[1].Value) != "t1" {
		t.Fatalf("ReadAll: %d records %v", len(recs), recs)
	}
	log, _, err := check.ReadTopic(ctx, e.Client, "marked")
	if err != nil || len(log[0]) != 2 {
		t.Fatalf("check.ReadTopic: %v, %d records", err, len(log[0]))
	}
	out, err := cli(t, e, "", "consume", "--topic", "marked", "--from-beginning", "--until-end", "--format", "json")
	if err != nil || strings.Count(out, "\n") != 2 || !strings.Contains(out, `"t1"`) {
		t.Fatalf("cluster consume --until-end: %v\n%s", err, out)
	}
}
