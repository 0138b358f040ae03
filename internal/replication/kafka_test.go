package replication

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/recordbatch"
	"github.com/tapes-dev/tapes/internal/storage"
)

// TestKafkaBatchThroughProduce: a Kafka batch produced to a real
// (single-replica) partition is stored with the leader's term as its
// partition leader epoch and its log offset as base offset, the rest as
// sent; a retry of it is the duplicate of the original (the same producer
// state as tapes' own batches); max.message.bytes counts the Kafka bytes.
func TestKafkaBatchThroughProduce(t *testing.T) {
	dir := t.TempDir()
	r := openSolo(t, dir, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := produceValues(t, r, AcksAll, storage.NoProducer, "a", "b"); err != nil {
		t.Fatal(err)
	}
	recs := []storage.Record{{Timestamp: 5, Key: []byte("k"), Value: []byte("v1")}, {Timestamp: 6, Value: []byte("v2")}}
	kb := recordbatch.Encode(recordbatch.Producer{ID: 9, Epoch: 0, BaseSequence: 0}, recs)
	b, err := storage.WrapKafka(kb)
	if err != nil {
		t.Fatal(err)
	}
	sent := bytes.Clone(b)
	res, err := r.Produce(ctx, AcksAll, b)
	if err != nil || res.BaseOffset != 2 || res.Duplicate {
		t.Fatalf("Kafka batch: %+v, %v", res, err)
	}
	if !bytes.Equal(b, sent) {
		t.Fatal("Produce modified the caller's batch")
	}
	if res, err := r.Produce(ctx, AcksAll, b); err != nil || res.BaseOffset != 2 || !res.Duplicate {
		t.Fatalf("retry: %+v, %v", res, err)
	}
	if got := valuesAt(t, r); len(got) != 4 || got[2] != "v1" || got[3] != "v2" {
		t.Fatalf("log holds %q", got)
	}
	term := r.ReadyTerm()
	segs, _ := filepath.Glob(filepath.Join(dir, "log", "*.log"))
	if len(segs) == 0 {
		segs, _ = filepath.Glob(filepath.Join(dir, "*", "*.log"))
	}
	var found bool
	for _, s := range segs {
		data, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		if i := bytes.Index(data, kb[16:]); i >= 16 {
			stored := data[i-16:]
			if recordbatch.BaseOffset(stored) != 2 || recordbatch.PartitionLeaderEpoch(stored) != LeaderEpoch(term) || !bytes.Equal(stored[8:12], kb[8:12]) {
				t.Fatalf("stored with base offset %d, leader epoch %d; want 2, %d", recordbatch.BaseOffset(stored), recordbatch.PartitionLeaderEpoch(stored), term)
			}
			found = true
		}
	}
	if !found {
		t.Fatalf("the Kafka batch is not in the segments %v", segs)
	}

	// max.message.bytes is on the Kafka batch's own size: a batch of
	// exactly the limit goes in (its storage form is 5 bytes longer), one
	// byte more does not.
	limit := r.cfg.TopicConfig.MaxMessageBytes
	sized := func(n int64) storage.Batch {
		v := n
		for range 3 { // the varint lengths grow with the value: converge
			v -= int64(len(recordbatch.Encode(recordbatch.NoProducer, []storage.Record{{Value: make([]byte, v)}}))) - n
		}
		b, err := storage.WrapKafka(recordbatch.Encode(recordbatch.NoProducer, []storage.Record{{Value: make([]byte, v)}}))
		if err != nil {
			t.Fatal(err)
		}
		if kb, _ := b.Kafka(); int64(len(kb)) != n {
			t.Fatalf("batch of %d bytes, want %d", len(kb), n)
		}
		return b
	}
	if _, err := r.Produce(ctx, AcksAll, sized(limit)); err != nil {
		t.Fatalf("a batch of exactly max.message.bytes: %v", err)
	}
	if _, err := r.Produce(ctx, AcksAll, sized(limit+1)); !kerr.Is(err, kerr.RecordTooLarge) {
		t.Fatalf("a batch over max.message.bytes: %v", err)
	}
}
