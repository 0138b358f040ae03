package main

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/tapes-dev/tapes/internal/consumer"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/producer"
	"github.com/tapes-dev/tapes/internal/sink"
)

// salted is record number n of producer run p-1, key_seq seq of key-0, at
// partition/offset.
func salted(n, seq int64, partition int32, offset int64) consumer.Record {
	return consumer.Record{Topic: "orders", Partition: partition, Record: &tapesv1.Record{Offset: offset, Key: []byte("key-0#1"), Headers: []*tapesv1.Header{
		{Key: producer.EventIDHeader, Value: []byte("p-1-" + strconv.FormatInt(n, 10))},
		{Key: producer.EntityHeader, Value: []byte("key-0")},
		{Key: producer.SaltHeader, Value: []byte("1")},
		{Key: producer.KeySeqHeader, Value: []byte(strconv.FormatInt(seq, 10))},
	}}}
}

func seqs(rs []consumer.Record) []int64 {
	var out []int64
	for _, r := range rs {
		_, n, _ := saltedSeq(r)
		out = append(out, n)
	}
	return out
}

func TestResequencerHandsSaltedRecordsOnInKeySeqOrder(t *testing.T) {
	q := newResequencer()
	// key_seq 2 and 1 arrive (from partitions 3 and 4) before 0 (partition 5).
	if got := q.offer(salted(10, 2, 3, 100)); len(got) != 0 {
		t.Fatalf("key_seq 2 first: handed on %v", seqs(got))
	}
	if got := q.offer(salted(7, 1, 4, 50)); len(got) != 0 {
		t.Fatalf("key_seq 1: handed on %v", seqs(got))
	}
	cold := consumer.Record{Topic: "orders", Partition: 3, Record: &tapesv1.Record{Offset: 101, Key: []byte("key-4")}}
	if got := q.offer(cold); len(got) != 1 || got[0].Offset != 101 {
		t.Fatalf("an unsalted record is not held back: %v", got)
	}
	held := q.heldBack()
	if len(held) != 2 || held[consumer.TopicPartition{Topic: "orders", Partition: 3}] != 100 || held[consumer.TopicPartition{Topic: "orders", Partition: 4}] != 50 {
		t.Fatalf("held back: %v", held)
	}
	capped := q.capCommit(map[consumer.TopicPartition]int64{{Topic: "orders", Partition: 3}: 102, {Topic: "orders", Partition: 5}: 9})
	if capped[consumer.TopicPartition{Topic: "orders", Partition: 3}] != 100 || capped[consumer.TopicPartition{Topic: "orders", Partition: 5}] != 9 {
		t.Fatalf("commit capped to %v", capped)
	}
	got := q.offer(salted(3, 0, 5, 8))
	if s := seqs(got); len(s) != 3 || s[0] != 0 || s[1] != 1 || s[2] != 2 {
		t.Fatalf("key_seq 0 unblocks %v, want [0 1 2]", s)
	}
	if q.held() != 0 || len(q.heldBack()) != 0 {
		t.Fatalf("still held: %d", q.held())
	}
	// A redelivery of key_seq 1 passes through (the sink decides).
	if got := q.offer(salted(7, 1, 4, 50)); len(got) != 1 {
		t.Fatalf("redelivered key_seq 1: %v", seqs(got))
	}
	// Another producer run has its own order.
	other := salted(0, 1, 2, 0)
	other.Headers[0].Value = []byte("p-2-0")
	if got := q.offer(other); len(got) != 0 {
		t.Fatalf("p-2's key_seq 1 before its 0: handed on %v", seqs(got))
	}
	if n := q.drop([]consumer.TopicPartition{{Topic: "orders", Partition: 2}}); n != 1 || q.held() != 0 {
		t.Fatalf("drop of partition 2: %d dropped, %d held", n, q.held())
	}
}

// TestEffectsOfASaltedKeyShareItsEntity: the sink keys an effect by the
// entity header, so two salted records of key-0 applied out of send order
// count as out of key order although their Kafka keys differ.
func TestEffectsOfASaltedKeyShareItsEntity(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sink.db")
	sk, err := sink.Open(path, sink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{o: &options{name: "consumer-1"}, sink: sk}
	later, earlier := salted(5, 1, 2, 0), salted(4, 0, 3, 0)
	later.Key = []byte("key-0#2")
	for _, r := range []consumer.Record{later, earlier} {
		if _, err := d.apply(context.Background(), 1, r); err != nil {
			t.Fatal(err)
		}
	}
	sk.Close()
	st, err := sink.ComputeStats(context.Background(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Effects != 2 || st.OutOfKeyOrder != 1 {
		t.Fatalf("effects %d, out of key order %d; want 2 and 1 (both of entity key-0)", st.Effects, st.OutOfKeyOrder)
	}
}
