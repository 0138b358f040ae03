package experiment

import (
	"bytes"
	"encoding/json"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/tapes-dev/tapes/internal/check"
)

// TestSMSGatewayReceivers: three requests, one of them a repeat of an
// event_id: the plain receiver sends three SMS, the idempotent one two;
// both are effect lines of the history, which the checker counts as one
// external duplicate of the plain receiver. A body without event_id is
// refused and recorded nowhere.
func TestSMSGatewayReceivers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "txn-sms.jsonl")
	g, err := startSMSGateway(path)
	if err != nil {
		t.Fatal(err)
	}
	post := func(body any) int {
		b, _ := json.Marshal(body)
		resp, err := http.Post(g.URL(), "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, id := range []string{"e1", "e2", "e1"} {
		if code := post(SMSRequest{EventID: id, To: "k", Text: "hi"}); code != http.StatusNoContent {
			t.Fatalf("POST %s: %d", id, code)
		}
	}
	if code := post(map[string]string{"to": "k"}); code != http.StatusBadRequest {
		t.Fatalf("POST without event_id: %d, want 400", code)
	}
	req, plain, idem := g.counts()
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if req != 3 || plain != 3 || idem != 2 {
		t.Fatalf("requests %d, plain %d, idempotent %d; want 3, 3, 2", req, plain, idem)
	}
	res, err := check.Check(t.Context(), check.Input{TxnHistories: []string{path}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Txn.ExternalDuplicates != 1 || res.Counts[check.ExternalDuplicate] != 1 || res.Txn.Effects != 5 {
		t.Fatalf("checker: effects %d, external duplicates %d (count %d); want 5, 1, 1", res.Txn.Effects, res.Txn.ExternalDuplicates, res.Counts[check.ExternalDuplicate])
	}
	if a := res.Anomalies[0]; a.Consumer != SMSPlain {
		t.Fatalf("duplicate of %q; want %s", a.Consumer, SMSPlain)
	}
}
