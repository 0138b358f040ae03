package recordbatch

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tapes-dev/tapes/internal/kerr"
)

// TestMarkerAsKafkaWritesIt decodes EncodeMarker's batch with kmsg (Kafka's
// own message definitions): attributes transactional|control, the
// producer's id and epoch, base sequence -1, one record whose key is a
// ControlRecordKey and value an EndTxnMarker; ParseMarker reads it back.
func TestMarkerAsKafkaWritesIt(t *testing.T) {
	for _, commit := range []bool{false, true} {
		m := Marker{ProducerID: 7, ProducerEpoch: 3, Commit: commit, CoordinatorEpoch: 11}
		b := EncodeMarker(m, 1_700_000_000_000)
		var kb kmsg.RecordBatch
		if err := kb.ReadFrom(b); err != nil {
			t.Fatal(err)
		}
		if kb.Attributes != 0x30 || kb.ProducerID != 7 || kb.ProducerEpoch != 3 || kb.FirstSequence != -1 || kb.NumRecords != 1 || kb.Magic != 2 {
			t.Fatalf("header %+v", kb)
		}
		if err := CheckCRC(b); err != nil {
			t.Fatal(err)
		}
		var rec kmsg.Record
		if err := rec.ReadFrom(kb.Records); err != nil {
			t.Fatal(err)
		}
		var key kmsg.ControlRecordKey
		if err := key.ReadFrom(rec.Key); err != nil {
			t.Fatal(err)
		}
		want := kmsg.ControlRecordKeyTypeAbort
		if commit {
			want = kmsg.ControlRecordKeyTypeCommit
		}
		if key.Version != 0 || key.Type != want {
			t.Fatalf("key %+v, want type %v", key, want)
		}
		var val kmsg.EndTxnMarker
		if err := val.ReadFrom(rec.Value); err != nil {
			t.Fatal(err)
		}
		if val.Version != 0 || val.CoordinatorEpoch != 11 {
			t.Fatalf("value %+v", val)
		}
		got, err := ParseMarker(b)
		if err != nil || got != m {
			t.Fatalf("ParseMarker = %+v, %v; want %+v", got, err, m)
		}
		if !IsControl(b) || !IsTransactional(b) {
			t.Fatal("IsControl/IsTransactional false")
		}
	}
}

// TestParseMarkerRefuses: a data batch, and control records of an unknown
// type, are CORRUPT_MESSAGE.
func TestParseMarkerRefuses(t *testing.T) {
	data := EncodeTransactional(Producer{ID: 1, Epoch: 0, BaseSequence: 0}, []Record{{Key: []byte("k"), Value: []byte("v")}})
	if !IsTransactional(data) || IsControl(data) {
		t.Fatal("EncodeTransactional: wrong attributes")
	}
	if _, err := Validate(data, 9); err != nil {
		t.Fatalf("a transactional batch does not validate: %v", err)
	}
	if _, err := ParseMarker(data); !kerr.Is(err, kerr.CorruptMessage) {
		t.Fatalf("ParseMarker(data batch) = %v", err)
	}
	bad := EncodeMarker(Marker{ProducerID: 1}, 0)
	recs, _ := Records(bad, 0)
	recs[0].Key = []byte{0, 0, 0, 5}
	b := Encode(Producer{ID: 1, BaseSequence: -1}, recs)
	b[attributesAt+1] = attrTransactional | attrControl
	putCRC(b)
	if _, err := ParseMarker(b); !kerr.Is(err, kerr.CorruptMessage) {
		t.Fatalf("ParseMarker(type 5) = %v", err)
	}
}
