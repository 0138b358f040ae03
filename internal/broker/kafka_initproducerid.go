package broker

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tapes-dev/tapes/internal/kafkawire"
)

// InitProducerId versions served: v0-v4 (v5 is transactions v2, KIP-890).
const (
	kafkaInitProducerIDMin = 0
	kafkaInitProducerIDMax = 4
	// kafkaInitProducerIDTimeout bounds the controller round trip.
	kafkaInitProducerIDTimeout = 10 * time.Second
)

// kafkaInitProducerID answers InitProducerId (key 22) as gRPC's
// InitProducerId does: a new producer id from the controller quorum (unique
// in the cluster, across failovers), epoch 0. Like Kafka for a producer
// without a transactional id, it always allocates a new id, also when v3+
// names the producer's current id and epoch. With a transactional id, the
// transaction coordinator answers (kafkaInitTxnProducerID), allocating
// through the same controller quorum. Called on the connection's request
// goroutine; the controller round trip goes in a Later.
func (b *Broker) kafkaInitProducerID(ctx context.Context, r *kafkawire.Request) kafkawire.Reply {
	req := r.Msg.(*kmsg.InitProducerIDRequest)
	resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	if req.TransactionalID != nil {
		return b.kafkaInitTxnProducerID(ctx, req, resp) // kafka_txn.go
	}
	return kafkawire.Later(func() kafkawire.Reply {
		ctx, cancel := context.WithTimeout(ctx, kafkaInitProducerIDTimeout)
		defer cancel()
		id, err := b.allocProducerID(ctx)
		if err != nil {
			resp.ErrorCode = kafkawire.ErrorCode(err)
			return kafkawire.Respond(resp)
		}
		resp.ProducerID, resp.ProducerEpoch = id, 0
		return kafkawire.Respond(resp)
	})
}
