package main

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
)

// TestStartKafkaClientWantsAnAbsoluteProgram: the launcher runs in its own
// directory, so a Kafka client's program must come as an absolute path
// (chaos start resolves it); anything else is InvalidArgument, and nothing
// is started.
func TestStartKafkaClientWantsAnAbsoluteProgram(t *testing.T) {
	s := &controlServer{} // no launcher: the request must be refused before it is needed
	for _, args := range [][]string{nil, {"kcat", "-L"}, {"./probe"}} {
		_, err := s.StartProcess(context.Background(), &tapesv1.StartProcessRequest{Name: "kcat-1", Kind: "kafka", Args: args})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("args %q: %v, want InvalidArgument", args, err)
		}
	}
}
