package kafkawire

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tapes-dev/tapes/internal/recordbatch"
)

// BenchmarkDecodeProduce measures the request decoder on a Produce of one
// ~1 MiB batch, with and without the check that the body encodes back to
// itself (the cost of refusing negative lengths as Kafka does).
func BenchmarkDecodeProduce(b *testing.B) {
	rs := []recordbatch.Record{{Key: []byte("k"), Value: make([]byte, 1<<20)}}
	f := frame(produceRequest(-1, recordbatch.Encode(recordbatch.NoProducer, rs)), 9, 1)[4:]
	b.Run("decode+reencode", func(b *testing.B) {
		b.SetBytes(int64(len(f)))
		for b.Loop() {
			if _, _, err := DecodeRequest(f); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode only", func(b *testing.B) {
		b.SetBytes(int64(len(f)))
		for b.Loop() {
			_, req, body, err := decodeHeader(f)
			if err != nil {
				b.Fatal(err)
			}
			if err := req.(*kmsg.ProduceRequest).ReadFrom(body); err != nil {
				b.Fatal(err)
			}
		}
	})
}
