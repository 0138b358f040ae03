package raftnet

import (
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Errors returned by the Mux and its Transports. Outbound calls on a closed
// Transport return raft.ErrTransportShutdown, the error hashicorp/raft knows.
var (
	// ErrGroupExists is returned by Mux.Group when a Transport for that group
	// is open on the Mux. Close it first to open the group again.
	ErrGroupExists = errors.New("raftnet: raft group already open")

	// ErrMuxClosed is returned by Mux.Group after Mux.Close.
	ErrMuxClosed = errors.New("raftnet: mux closed")

	// ErrUnknownGroup is wrapped in the error of an outbound call when the
	// peer has no open Transport for the group (not opened yet, or closed).
	// It says nothing about the peer's health otherwise.
	ErrUnknownGroup = errors.New("raftnet: peer does not serve the raft group")

	// ErrPreVoteUnsupported is wrapped in the error of RequestPreVote when
	// the peer's RaftService has no RequestPreVote method (a broker from
	// before it). Its text holds "unexpected command", the words by which
	// hashicorp/raft (v1.7.3, preElectSelf) recognises a peer without
	// pre-vote and counts its pre-vote as granted.
	ErrPreVoteUnsupported = errors.New("raftnet: peer does not support pre-vote (unexpected command)")
)

// The peer answers an RPC for a group it does not serve with
// codes.Unavailable and an ErrorInfo carrying this reason, so that the caller
// can tell it apart from a transport failure without reading message text.
const (
	errorDomain        = "raftnet.tapes.dev"
	reasonUnknownGroup = "UNKNOWN_RAFT_GROUP"
)

// unknownGroupStatus is the answer to an RPC for a group that is not open.
func unknownGroupStatus(group string) error {
	st := status.Newf(codes.Unavailable, "unknown raft group %s", group)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{
		Reason:   reasonUnknownGroup,
		Domain:   errorDomain,
		Metadata: map[string]string{"group": group},
	}); err == nil {
		st = d
	}
	return st.Err()
}

// remoteError wraps err, the error of an outbound call, adding
// ErrUnknownGroup when the peer answered with unknownGroupStatus.
func remoteError(err error) error {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable {
		return err
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok &&
			info.GetDomain() == errorDomain && info.GetReason() == reasonUnknownGroup {
			return fmt.Errorf("%w: %w", ErrUnknownGroup, err)
		}
	}
	return err
}
