package raftnet

import (
	"context"
	"fmt"

	"github.com/hashicorp/raft"
)

// TriggerElection hands the local Raft instance of this group a TimeoutNow,
// as if the leader `from` were transferring leadership to it: the instance
// becomes a candidate at once and its RequestVote carries the
// leadership-transfer flag, so followers that still believe in `from` vote
// for it. The broker calls this only when `from`'s process is gone (its port
// refuses connections), to skip the heartbeat timeout a crashed leader
// would otherwise cost. It blocks until Raft took the RPC or ctx ends.
func (t *Transport) TriggerElection(ctx context.Context, from raft.ServerID) error {
	req := &raft.TimeoutNowRequest{RPCHeader: raft.RPCHeader{
		ProtocolVersion: raft.ProtocolVersionMax,
		ID:              []byte(from),
		Addr:            []byte(from),
	}}
	if _, err := t.deliver(ctx, req, false); err != nil {
		return fmt.Errorf("trigger election in %s: %w", t.name, err)
	}
	return nil
}
