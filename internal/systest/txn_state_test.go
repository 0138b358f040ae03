package systest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tapes-dev/tapes/internal/eventually"
	"github.com/tapes-dev/tapes/internal/testcluster"
	"github.com/tapes-dev/tapes/internal/txn"
)

// TestTransactionStateCompactedSurvivesKill: brokers compact
// __transaction_state after 40 records; one transactional id commits 30
// transactions (about 90 records in its partition). The partition's log
// start moves on; the coordinator's broker is SIGKILLed, and the next
// coordinator, loading the compacted partition, still knows the id: a new
// producer with that id gets the same producer id with the epoch bumped
// (a coordinator that lost the id would answer a new producer id, epoch
// 0), and its transaction commits; read_committed reads all 31 records.
func TestTransactionStateCompactedSurvivesKill(t *testing.T) {
	e := start(t, 3, "--transaction-state-compact-after", "40")
	e.CreateTopic("compact", 1, 3, nil)
	e.WaitSettled("compact", 60*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const id = "compact-1"
	p := txnProducer(t, e, id)
	var values []string
	for i := range 30 {
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		v := fmt.Sprintf("c-%d", i)
		produceTxn(t, ctx, p, "compact", []string{v})
		values = append(values, v)
		if err := p.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
	}
	pid, epoch, err := p.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p.Close()

	md, err := e.Client.Metadata(ctx, []string{txn.StateTopic}, true)
	if err != nil {
		t.Fatal(err)
	}
	part := txn.PartitionFor(id, int32(len(md.Topics[0].Partitions)))
	e.WaitFor(30*time.Second, "the coordinator to compact "+txn.StateTopic, func() bool {
		return e.Partition(txn.StateTopic, part).LogStartOffset > 0
	})
	st := e.Partition(txn.StateTopic, part)
	if held := st.HighWatermark - st.LogStartOffset; held >= 80 {
		t.Errorf("%s-%d holds %d records from its log start %d: not compacted", txn.StateTopic, part, held, st.LogStartOffset)
	}
	t.Logf("%s-%d: log start %d, high watermark %d", txn.StateTopic, part, st.LogStartOffset, st.HighWatermark)

	var coord int32
	eventually.Nil(t, 30*time.Second, "the coordinator of "+id, func() error {
		var err error
		coord, err = kafkaTxnCoordinator(e, id) // grpc_txn_test.go
		return err
	})
	if err := e.C.Kill(testcluster.BrokerName(coord)); err != nil {
		t.Fatal(err)
	}
	t.Logf("coordinator broker %d SIGKILLed", coord)

	p2 := txnProducer(t, e, id)
	if err := p2.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produceTxn(t, ctx, p2, "compact", []string{"after"})
	values = append(values, "after")
	if err := p2.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatalf("commit after the kill: %v", err)
	}
	pid2, epoch2, err := p2.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if pid2 != pid || epoch2 != epoch+1 {
		t.Errorf("after the kill: producer id %d epoch %d, want %d epoch %d (the id's state lost)", pid2, epoch2, pid, epoch+1)
	}
	adm := kadm.NewClient(p2)
	ds, err := adm.DescribeTransactions(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if d := ds[id]; d.Err != nil || d.Coordinator == coord || d.ProducerID != pid || d.ProducerEpoch != epoch+1 {
		t.Errorf("described after the kill: %+v", d)
	}
	seen := readTxnTopic(t, e, "compact", kgo.ReadCommitted(), values)
	for _, v := range values {
		if seen[v] != 1 {
			t.Errorf("read %s %d times", v, seen[v])
		}
	}
}
