package systest

import (
	"strings"
	"testing"
	"time"

	fkerr "github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tapes-dev/tapes/internal/eventually"
)

// TestTransactionsCLI: `cluster list-transactions` and `cluster
// describe-transactions` against real brokers, in kafka-transactions.sh's
// columns: a transactional id registered by InitProducerId (raw Kafka
// requests, through FindCoordinator key type 1) is listed Empty, then
// Ongoing with its partitions once AddPartitionsToTxn added them; an
// unknown id is TRANSACTIONAL_ID_NOT_FOUND. No transaction ends here, so
// no marker is needed.
func TestTransactionsCLI(t *testing.T) {
	e := start(t, 3)
	e.CreateTopic("orders", 2, 3, nil)
	e.WaitSettled("orders", 60*time.Second)
	var coord string
	eventually.Nil(t, 60*time.Second, "the transaction coordinator of cli-txn", func() error {
		id, err := kafkaTxnCoordinator(e, "cli-txn") // grpc_txn_test.go
		if err != nil {
			return err
		}
		coord = e.KafkaAddress(id)
		return nil
	})
	var pid int64
	var epoch int16
	eventually.Nil(t, 60*time.Second, "InitProducerId cli-txn", func() error {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.Version, req.TransactionalID, req.TransactionTimeoutMillis, req.ProducerID, req.ProducerEpoch = 4, kmsg.StringPtr("cli-txn"), 90_000, -1, -1
		resp, err := rawKafka(coord, req)
		if err != nil {
			return err
		}
		r := resp.(*kmsg.InitProducerIDResponse)
		pid, epoch = r.ProducerID, r.ProducerEpoch
		return fkerr.ErrorForCode(r.ErrorCode)
	})
	out, err := cli(t, e, "", "list-transactions")
	if err != nil || !strings.HasPrefix(out, "TransactionalId") || !strings.Contains(out, "cli-txn") || !strings.Contains(out, "Empty") {
		t.Fatalf("list: %q %v", out, err)
	}
	add := kmsg.NewPtrAddPartitionsToTxnRequest()
	add.Version, add.TransactionalID, add.ProducerID, add.ProducerEpoch = 3, "cli-txn", pid, epoch
	add.Topics = []kmsg.AddPartitionsToTxnRequestTopic{{Topic: "orders", Partitions: []int32{1, 0}}}
	resp, err := rawKafka(coord, add)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range resp.(*kmsg.AddPartitionsToTxnResponse).Topics[0].Partitions {
		if p.ErrorCode != 0 {
			t.Fatalf("AddPartitionsToTxn: %v", fkerr.ErrorForCode(p.ErrorCode))
		}
	}
	out, err = cli(t, e, "", "describe-transactions", "--transactional-id", "cli-txn")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	header := strings.Fields(lines[0])
	want := []string{"CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState", "TransactionTimeoutMs",
		"CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions"}
	if len(lines) != 2 || strings.Join(header, " ") != strings.Join(want, " ") {
		t.Fatalf("describe: %q", out)
	}
	row := strings.Fields(lines[1])
	if len(row) != 9 || row[1] != "cli-txn" || row[4] != "Ongoing" || row[5] != "90000" || row[6] == "None" || row[8] != "orders-0,orders-1" {
		t.Fatalf("describe row: %q", row)
	}
	out, err = cli(t, e, "", "list-transactions", "--state", "Ongoing")
	if err != nil || len(strings.Split(strings.TrimSpace(out), "\n")) != 2 || !strings.Contains(out, "Ongoing") {
		t.Fatalf("list Ongoing: %q %v", out, err)
	}
	if _, err := cli(t, e, "", "describe-transactions", "--transactional-id", "nobody"); err == nil || !strings.Contains(err.Error(), "TRANSACTIONAL_ID_NOT_FOUND") {
		t.Fatalf("describe nobody: %v", err)
	}
}
