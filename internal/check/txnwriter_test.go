package check

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTxnHistoryWriterRoundTripAndRefusal: lines written are read back by
// ReadTxnHistory as written; a line lacking a field its type needs is
// refused with the field named and nothing of it is written.
func TestTxnHistoryWriterRoundTripAndRefusal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "txn.jsonl")
	h, err := CreateTxnHistory(path)
	if err != nil {
		t.Fatal(err)
	}
	p, off := int32(1), int64(7)
	if err := h.Write(TxnLine{Type: TxnRead, Process: "r", Topic: "out", Partition: &p, Offset: &off, EventID: "e1"}); err != nil {
		t.Fatal(err)
	}
	if err := h.Write(TxnLine{Type: TxnStep, Process: "p"}); err == nil || !strings.Contains(err.Error(), "txn") {
		t.Fatalf("a step line without txn: err %v; want it refused naming txn", err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	lines, err := ReadTxnHistory(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 1 || lines[0].EventID != "e1" || *lines[0].Offset != 7 || lines[0].At.IsZero() {
		b, _ := os.ReadFile(path)
		t.Fatalf("read back %+v from\n%s", lines, b)
	}
}
