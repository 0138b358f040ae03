package broker

import (
	"context"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tapes-dev/tapes/internal/eventually"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/metadata"
)

// topicNames lists the names a Metadata answer carries, in order.
func topicNames(resp *tapesv1.MetadataResponse) []string {
	var out []string
	for _, t := range resp.GetTopics() {
		out = append(out, t.GetName())
	}
	return out
}

// TestMetadataAnswersOnlyWhatIsAsked (issue 15.1): a real one-broker
// cluster with two topics answers no_topics with its brokers and no topic,
// a named topic with that topic alone, and an empty request (what older
// clients send) with every topic. no_topics with names is INVALID_REQUEST.
func TestMetadataAnswersOnlyWhatIsAsked(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := validConfig(t)
	c.Advertise = lis.Addr().String()
	c.Peers = map[metadata.BrokerID]string{1: c.Advertise}
	b, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	go b.Serve(lis)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		b.Shutdown(ctx)
	}()
	cc, err := grpc.NewClient(c.Advertise, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	bc := tapesv1.NewBrokerServiceClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	specs := []*tapesv1.TopicSpec{{Name: "a", Partitions: 2, ReplicationFactor: 1}, {Name: "b", Partitions: 1, ReplicationFactor: 1}}
	eventually.Nil(t, 60*time.Second, "the broker creates topics a and b", func() error {
		resp, err := bc.CreateTopics(ctx, &tapesv1.CreateTopicsRequest{Topics: specs})
		if err != nil {
			return err
		}
		for _, r := range resp.GetResults() {
			if code := r.GetError().GetCode(); code != "" && code != string(kerr.TopicAlreadyExists) {
				return fmt.Errorf("%s: %s %s", r.GetName(), code, r.GetError().GetMessage())
			}
		}
		return nil
	})
	eventually.Nil(t, 60*time.Second, "an empty request lists both topics", func() error {
		resp, err := bc.Metadata(ctx, &tapesv1.MetadataRequest{})
		if err != nil {
			return err
		}
		if got := topicNames(resp); !slices.Equal(got, []string{"a", "b"}) {
			return fmt.Errorf("topics %q, want [a b]", got)
		}
		return nil
	})

	resp, err := bc.Metadata(ctx, &tapesv1.MetadataRequest{NoTopics: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetTopics()) != 0 {
		t.Errorf("no_topics answered topics %q, want none", topicNames(resp))
	}
	if len(resp.GetBrokers()) != 1 || resp.GetBrokers()[0].GetAddress() != c.Advertise || resp.GetBrokerId() != 1 {
		t.Errorf("no_topics answered brokers %v (answered by %d), want broker 1 at %s", resp.GetBrokers(), resp.GetBrokerId(), c.Advertise)
	}

	resp, err = bc.Metadata(ctx, &tapesv1.MetadataRequest{Topics: []string{"b"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := topicNames(resp); !slices.Equal(got, []string{"b"}) {
		t.Errorf("asked for b, answered topics %q", got)
	}

	_, err = bc.Metadata(ctx, &tapesv1.MetadataRequest{Topics: []string{"a"}, NoTopics: true})
	if ke, ok := kerr.As(kerr.FromStatus(err)); !ok || ke.Code() != kerr.InvalidRequest {
		t.Errorf("no_topics with a topic: %v, want INVALID_REQUEST", err)
	}
}
