package kafkawire

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"testing"

	fkerr "github.com/twmb/franz-go/pkg/kerr"

	"github.com/tapes-dev/tapes/internal/kerr"
)

// kafkaRenames are tapes' names that Kafka's protocol (as franz-go's kerr
// spells it) names otherwise, for the same code.
var kafkaRenames = map[kerr.Code]string{
	kerr.NotLeaderOrFollower: "NOT_LEADER_FOR_PARTITION", // KIP-392 renamed it
	kerr.RecordTooLarge:      "MESSAGE_TOO_LARGE",        // Java's RecordTooLargeException
}

// TestEveryTapesErrorHasAKafkaCode reads internal/kerr's source, so that a
// name added there without a wire code fails here.
func TestEveryTapesErrorHasAKafkaCode(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "../kerr/kerr.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []kerr.Code
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || vs.Type == nil {
			return true
		}
		if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Code" {
			return true
		}
		for _, v := range vs.Values {
			if lit, ok := v.(*ast.BasicLit); ok {
				s, _ := strconv.Unquote(lit.Value)
				names = append(names, kerr.Code(s))
			}
		}
		return true
	})
	if len(names) < 30 {
		t.Fatalf("found %d kerr codes in kerr.go; the parse is broken", len(names))
	}
	for _, name := range names {
		ke, ok := kafkaCodes[name]
		if !ok {
			t.Errorf("%s has no Kafka code in kafkaCodes", name)
			continue
		}
		want := string(name)
		if r, ok := kafkaRenames[name]; ok {
			want = r
		}
		if ke.Message != want {
			t.Errorf("%s maps to %s (%d)", name, ke.Message, ke.Code)
		}
		if got := ErrorCode(kerr.New(name, "x")); got != ke.Code {
			t.Errorf("ErrorCode(%s) = %d, want %d", name, got, ke.Code)
		}
	}
	if len(kafkaCodes) != len(names) {
		t.Errorf("kafkaCodes has %d entries, kerr.go %d codes", len(kafkaCodes), len(names))
	}
}
func TestErrorCodeOfOtherErrors(t *testing.T) {
	if got := ErrorCode(nil); got != 0 {
		t.Fatalf("nil: %d", got)
	}
	if got := ErrorCode(fkerr.NotCoordinator); got != fkerr.NotCoordinator.Code {
		t.Fatalf("franz-go error: %d", got)
	}
	if got := ErrorCode(bytes.ErrTooLarge); got != fkerr.UnknownServerError.Code {
		t.Fatalf("plain error: %d", got)
	}
	if got := ErrorCode(kerr.New("NOT_A_KAFKA_NAME", "x")); got != fkerr.UnknownServerError.Code {
		t.Fatalf("unknown name: %d", got)
	}
}
