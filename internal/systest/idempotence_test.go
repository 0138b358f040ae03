package systest

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/tapes-dev/tapes/internal/client"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/netfault"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// TestLostResponseRetry: the leader appends a batch but its answer is lost
// (the link from the leader back to the producer drops), then the leader is
// SIGKILLed, and the producer retries the same batch against the new
// leader. Without idempotence the retry is appended again: a duplicate.
// With idempotence the new leader's replicated producer state recognises it
// and answers with the original offset: no duplicate.
func TestLostResponseRetry(t *testing.T) {
	for _, idempotent := range []bool{false, true} {
		name := "plain"
		if idempotent {
			name = "idempotent"
		}
		t.Run(name, func(t *testing.T) {
			e := start(t, 3)
			e.CreateTopic("orders", 1, 3, map[string]string{"min.insync.replicas": "2"})
			pm := e.Partition("orders", 0)
			leaderProc, _ := e.C.Process(testcluster.BrokerName(pm.LeaderId))
			link, err := netfault.Listen(leaderProc.Address, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer link.Close()
			// The producer reaches the leader only through the link.
			var d net.Dialer
			prod, err := client.New(client.Config{Bootstrap: e.C.Bootstrap(), RequestTimeout: time.Second,
				DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
					if addr == leaderProc.Address {
						addr = link.Addr()
					}
					return d.DialContext(ctx, "tcp", addr)
				})}})
			if err != nil {
				t.Fatal(err)
			}
			defer prod.Close()
			req := func(seq int32, prefix string) *tapesv1.ProduceRequest {
				r := &tapesv1.ProduceRequest{Topic: "orders", Partition: 0, Acks: -1, Records: testcluster.Records(prefix, 0, 5), ProducerId: -1}
				return r
			}
			var pid int64 = -1
			if idempotent {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				pid, _, err = prod.InitProducerId(ctx)
				cancel()
				if err != nil {
					t.Fatal(err)
				}
			}
			send := func(r *tapesv1.ProduceRequest, seq int32) (*tapesv1.ProduceResponse, error) {
				r.ProducerId, r.BaseSequence = pid, seq
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				return prod.ProduceWith(ctx, r, client.ProduceOptions{RetryUnknownOutcome: true})
			}
			if _, err := send(req(0, "first"), 0); err != nil {
				t.Fatal(err)
			}
			link.SetMode(netfault.DropBack)
			type result struct {
				resp *tapesv1.ProduceResponse
				err  error
			}
			done := make(chan result, 1)
			go func() {
				resp, err := send(req(5, "second"), 5)
				done <- result{resp, err}
			}()
			e.WaitFor(10*time.Second, "the second batch to commit on the leader", func() bool {
				return e.Partition("orders", 0).HighWatermark == 10
			})
			if err := e.C.Kill(leaderProc.Name); err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil {
				t.Fatalf("retried produce: %v", r.err)
			}
			got := e.ReadAll("orders", 0)
			seconds := 0
			for _, rec := range got {
				if strings.HasPrefix(string(rec.Value), "second-") {
					seconds++
				}
			}
			if idempotent {
				if !r.resp.Duplicate || r.resp.BaseOffset != 5 || seconds != 5 {
					t.Fatalf("idempotent retry: duplicate=%v offset=%d, %d records of the batch in the log; want true, 5, 5",
						r.resp.Duplicate, r.resp.BaseOffset, seconds)
				}
			} else if r.resp.Duplicate || r.resp.BaseOffset != 10 || seconds != 10 {
				t.Fatalf("plain retry: duplicate=%v offset=%d, %d records of the batch in the log; want false, 10, 10 (the lesson: a duplicate)",
					r.resp.Duplicate, r.resp.BaseOffset, seconds)
			}
			t.Logf("%s: the retried batch is in the log %d times (offset %d, duplicate=%v)", name, seconds/5, r.resp.BaseOffset, r.resp.Duplicate)
		})
	}
}
