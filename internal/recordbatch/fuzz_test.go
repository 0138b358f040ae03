package recordbatch

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tapes-dev/tapes/internal/kerr"
)

// FuzzValidate: Validate never panics, refuses with a Kafka name,
// and what it accepts holds the records its header counts.
func FuzzValidate(f *testing.F) {
	raw := encodeRecords(testRecords(3))
	f.Add(buildBatch(raw, 3, 0, nil), int16(9))
	f.Add(buildBatch(xerialSnappy(raw, 50), 3, int16(CodecSnappy), nil), int16(9))
	f.Add(buildBatch(raw, 3, 0, func(b *kmsg.RecordBatch) { b.Magic = 1 }), int16(3))
	f.Fuzz(func(t *testing.T, b []byte, version int16) {
		info, err := Validate(b, version)
		if err != nil {
			if kerr.CodeOf(err) == "" {
				t.Fatalf("refused without a Kafka name: %v", err)
			}
			return
		}
		if info.Records < 1 || info.Size != len(b) {
			t.Fatalf("accepted %+v from %d bytes", info, len(b))
		}
	})
}
