package main

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestStartKafkaClientNeedsACommand: a name that is not producer-N or
// consumer-N is a Kafka client, whose command must follow -- and be found;
// both mistakes are usage errors said before any cluster is asked.
func TestStartKafkaClientNeedsACommand(t *testing.T) {
	dir := t.TempDir() // no cluster: the errors must come first
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"kcat-1"}, "give its command after --"},
		{[]string{"kcat-1", "--"}, "give its command after --"},
		{[]string{"kcat-1", "--", "tapes-no-such-program", "{kafka-bootstrap}"}, "tapes-no-such-program"},
	} {
		s := &startCommand{stdout: &strings.Builder{}, stderr: &strings.Builder{}}
		err := s.Run(context.Background(), append([]string{"--dir", dir}, tc.args...))
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("chaos start %v: %v; want a usage error saying %q", tc.args, err, tc.want)
		}
	}
}
