package raftnet

import (
	"time"

	"github.com/hashicorp/raft"

	raftv1 "github.com/tapes-dev/tapes/internal/gen/tapes/raft/v1"
)

// This file converts hashicorp/raft's RPC structs to the protobuf messages of
// tapes.raft.v1 and back, field by field. Every field of the raft structs in
// v1.7.3 is carried, the deprecated ones (Leader, Candidate, Peers) included,
// so that a peer sees exactly what its leader or candidate sent.
//
// Byte slices are shared, not copied: outbound messages are marshalled before
// the call returns, and inbound messages own freshly unmarshalled bytes.

// isHeartbeat reports whether req has the shape of a heartbeat, with the
// definition hashicorp/raft v1.7.3's NetworkTransport uses: a term, a leader
// address (RPCHeader.Addr, or the deprecated Leader field), and nothing else.
// Such a request says nothing about the follower's log.
func isHeartbeat(req *raft.AppendEntriesRequest) bool {
	leader := req.RPCHeader.Addr
	if len(leader) == 0 {
		leader = req.Leader
	}
	return req.Term != 0 && leader != nil &&
		req.PrevLogEntry == 0 && req.PrevLogTerm == 0 &&
		len(req.Entries) == 0 && req.LeaderCommitIndex == 0
}

func headerToProto(h raft.RPCHeader) *raftv1.RPCHeader {
	return &raftv1.RPCHeader{
		ProtocolVersion: int64(h.ProtocolVersion),
		Id:              h.ID,
		Addr:            h.Addr,
	}
}

func headerFromProto(h *raftv1.RPCHeader) raft.RPCHeader {
	return raft.RPCHeader{
		ProtocolVersion: raft.ProtocolVersion(h.GetProtocolVersion()),
		ID:              h.GetId(),
		Addr:            h.GetAddr(),
	}
}

// timeToUnixNano maps the zero time to 0, since time.Time{}.UnixNano() is
// outside int64's range and would not survive the round trip.
func timeToUnixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func timeFromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

func appendEntriesRequestToProto(group string, r *raft.AppendEntriesRequest) *raftv1.AppendEntriesRequest {
	out := &raftv1.AppendEntriesRequest{
		Group:             group,
		Header:            headerToProto(r.RPCHeader),
		Term:              r.Term,
		Leader:            r.Leader,
		PrevLogEntry:      r.PrevLogEntry,
		PrevLogTerm:       r.PrevLogTerm,
		LeaderCommitIndex: r.LeaderCommitIndex,
	}
	if n := len(r.Entries); n > 0 {
		// One backing array for all entries instead of one allocation each.
		logs := make([]raftv1.Log, n)
		out.Entries = make([]*raftv1.Log, n)
		for i, e := range r.Entries {
			l := &logs[i]
			l.Index = e.Index
			l.Term = e.Term
			l.Type = uint32(e.Type)
			l.Data = e.Data
			l.Extensions = e.Extensions
			l.AppendedAtUnixNano = timeToUnixNano(e.AppendedAt)
			out.Entries[i] = l
		}
	}
	return out
}

func appendEntriesRequestFromProto(r *raftv1.AppendEntriesRequest) *raft.AppendEntriesRequest {
	out := &raft.AppendEntriesRequest{
		RPCHeader:         headerFromProto(r.GetHeader()),
		Term:              r.GetTerm(),
		Leader:            r.GetLeader(),
		PrevLogEntry:      r.GetPrevLogEntry(),
		PrevLogTerm:       r.GetPrevLogTerm(),
		LeaderCommitIndex: r.GetLeaderCommitIndex(),
	}
	if n := len(r.GetEntries()); n > 0 {
		logs := make([]raft.Log, n)
		out.Entries = make([]*raft.Log, n)
		for i, e := range r.GetEntries() {
			logs[i] = raft.Log{
				Index:      e.GetIndex(),
				Term:       e.GetTerm(),
				Type:       raft.LogType(e.GetType()),
				Data:       e.GetData(),
				Extensions: e.GetExtensions(),
				AppendedAt: timeFromUnixNano(e.GetAppendedAtUnixNano()),
			}
			out.Entries[i] = &logs[i]
		}
	}
	return out
}

func appendEntriesResponseToProto(r *raft.AppendEntriesResponse) *raftv1.AppendEntriesResponse {
	return &raftv1.AppendEntriesResponse{
		Header:         headerToProto(r.RPCHeader),
		Term:           r.Term,
		LastLog:        r.LastLog,
		Success:        r.Success,
		NoRetryBackoff: r.NoRetryBackoff,
	}
}

// appendEntriesResponseFromProto fills out in place: raft owns the response
// struct and passes it in.
func appendEntriesResponseFromProto(r *raftv1.AppendEntriesResponse, out *raft.AppendEntriesResponse) {
	out.RPCHeader = headerFromProto(r.GetHeader())
	out.Term = r.GetTerm()
	out.LastLog = r.GetLastLog()
	out.Success = r.GetSuccess()
	out.NoRetryBackoff = r.GetNoRetryBackoff()
}

func requestVoteRequestToProto(group string, r *raft.RequestVoteRequest) *raftv1.RequestVoteRequest {
	return &raftv1.RequestVoteRequest{
		Group:              group,
		Header:             headerToProto(r.RPCHeader),
		Term:               r.Term,
		Candidate:          r.Candidate,
		LastLogIndex:       r.LastLogIndex,
		LastLogTerm:        r.LastLogTerm,
		LeadershipTransfer: r.LeadershipTransfer,
	}
}

func requestVoteRequestFromProto(r *raftv1.RequestVoteRequest) *raft.RequestVoteRequest {
	return &raft.RequestVoteRequest{
		RPCHeader:          headerFromProto(r.GetHeader()),
		Term:               r.GetTerm(),
		Candidate:          r.GetCandidate(),
		LastLogIndex:       r.GetLastLogIndex(),
		LastLogTerm:        r.GetLastLogTerm(),
		LeadershipTransfer: r.GetLeadershipTransfer(),
	}
}

func requestVoteResponseToProto(r *raft.RequestVoteResponse) *raftv1.RequestVoteResponse {
	return &raftv1.RequestVoteResponse{
		Header:  headerToProto(r.RPCHeader),
		Term:    r.Term,
		Peers:   r.Peers,
		Granted: r.Granted,
	}
}

func requestVoteResponseFromProto(r *raftv1.RequestVoteResponse, out *raft.RequestVoteResponse) {
	out.RPCHeader = headerFromProto(r.GetHeader())
	out.Term = r.GetTerm()
	out.Peers = r.GetPeers()
	out.Granted = r.GetGranted()
}

func requestPreVoteRequestToProto(group string, r *raft.RequestPreVoteRequest) *raftv1.RequestPreVoteRequest {
	return &raftv1.RequestPreVoteRequest{
		Group:        group,
		Header:       headerToProto(r.RPCHeader),
		Term:         r.Term,
		LastLogIndex: r.LastLogIndex,
		LastLogTerm:  r.LastLogTerm,
	}
}

func requestPreVoteRequestFromProto(r *raftv1.RequestPreVoteRequest) *raft.RequestPreVoteRequest {
	return &raft.RequestPreVoteRequest{
		RPCHeader:    headerFromProto(r.GetHeader()),
		Term:         r.GetTerm(),
		LastLogIndex: r.GetLastLogIndex(),
		LastLogTerm:  r.GetLastLogTerm(),
	}
}

func requestPreVoteResponseToProto(r *raft.RequestPreVoteResponse) *raftv1.RequestPreVoteResponse {
	return &raftv1.RequestPreVoteResponse{
		Header:  headerToProto(r.RPCHeader),
		Term:    r.Term,
		Granted: r.Granted,
	}
}

func requestPreVoteResponseFromProto(r *raftv1.RequestPreVoteResponse, out *raft.RequestPreVoteResponse) {
	out.RPCHeader = headerFromProto(r.GetHeader())
	out.Term = r.GetTerm()
	out.Granted = r.GetGranted()
}

func timeoutNowRequestToProto(group string, r *raft.TimeoutNowRequest) *raftv1.TimeoutNowRequest {
	return &raftv1.TimeoutNowRequest{Group: group, Header: headerToProto(r.RPCHeader)}
}

func timeoutNowRequestFromProto(r *raftv1.TimeoutNowRequest) *raft.TimeoutNowRequest {
	return &raft.TimeoutNowRequest{RPCHeader: headerFromProto(r.GetHeader())}
}

func timeoutNowResponseToProto(r *raft.TimeoutNowResponse) *raftv1.TimeoutNowResponse {
	return &raftv1.TimeoutNowResponse{Header: headerToProto(r.RPCHeader)}
}

func timeoutNowResponseFromProto(r *raftv1.TimeoutNowResponse, out *raft.TimeoutNowResponse) {
	out.RPCHeader = headerFromProto(r.GetHeader())
}

func installSnapshotMetaToProto(group string, r *raft.InstallSnapshotRequest) *raftv1.InstallSnapshotMeta {
	return &raftv1.InstallSnapshotMeta{
		Group:              group,
		Header:             headerToProto(r.RPCHeader),
		SnapshotVersion:    int64(r.SnapshotVersion),
		Term:               r.Term,
		Leader:             r.Leader,
		LastLogIndex:       r.LastLogIndex,
		LastLogTerm:        r.LastLogTerm,
		Peers:              r.Peers,
		Configuration:      r.Configuration,
		ConfigurationIndex: r.ConfigurationIndex,
		Size:               r.Size,
	}
}

func installSnapshotRequestFromProto(r *raftv1.InstallSnapshotMeta) *raft.InstallSnapshotRequest {
	return &raft.InstallSnapshotRequest{
		RPCHeader:          headerFromProto(r.GetHeader()),
		SnapshotVersion:    raft.SnapshotVersion(r.GetSnapshotVersion()),
		Term:               r.GetTerm(),
		Leader:             r.GetLeader(),
		LastLogIndex:       r.GetLastLogIndex(),
		LastLogTerm:        r.GetLastLogTerm(),
		Peers:              r.GetPeers(),
		Configuration:      r.GetConfiguration(),
		ConfigurationIndex: r.GetConfigurationIndex(),
		Size:               r.GetSize(),
	}
}

func installSnapshotResponseToProto(r *raft.InstallSnapshotResponse) *raftv1.InstallSnapshotResponse {
	return &raftv1.InstallSnapshotResponse{
		Header:  headerToProto(r.RPCHeader),
		Term:    r.Term,
		Success: r.Success,
	}
}

func installSnapshotResponseFromProto(r *raftv1.InstallSnapshotResponse, out *raft.InstallSnapshotResponse) {
	out.RPCHeader = headerFromProto(r.GetHeader())
	out.Term = r.GetTerm()
	out.Success = r.GetSuccess()
}

// heartbeatCallFromRequest fills the call of the heartbeat stream that
// carries r, an AppendEntries without entries (the caller checks), for
// group. Id and TimeoutMicros are the batcher's.
func heartbeatCallFromRequest(c *raftv1.HeartbeatCall, group string, r *raft.AppendEntriesRequest) {
	c.Group = group
	c.ProtocolVersion = int64(r.ProtocolVersion)
	c.HeaderId = r.ID
	c.HeaderAddr = r.Addr
	c.Term = r.Term
	c.Leader = r.Leader
	c.PrevLogEntry = r.PrevLogEntry
	c.PrevLogTerm = r.PrevLogTerm
	c.LeaderCommitIndex = r.LeaderCommitIndex
}

func requestFromHeartbeatCall(c *raftv1.HeartbeatCall) *raft.AppendEntriesRequest {
	return &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{
			ProtocolVersion: raft.ProtocolVersion(c.GetProtocolVersion()),
			ID:              c.GetHeaderId(),
			Addr:            c.GetHeaderAddr(),
		},
		Term:              c.GetTerm(),
		Leader:            c.GetLeader(),
		PrevLogEntry:      c.GetPrevLogEntry(),
		PrevLogTerm:       c.GetPrevLogTerm(),
		LeaderCommitIndex: c.GetLeaderCommitIndex(),
	}
}

func heartbeatAnswerFromResponse(id uint64, r *raft.AppendEntriesResponse) *raftv1.HeartbeatAnswer {
	return &raftv1.HeartbeatAnswer{
		Id:              id,
		ProtocolVersion: int64(r.ProtocolVersion),
		HeaderId:        r.ID,
		HeaderAddr:      r.Addr,
		Term:            r.Term,
		LastLog:         r.LastLog,
		Success:         r.Success,
		NoRetryBackoff:  r.NoRetryBackoff,
	}
}

// responseFromHeartbeatAnswer fills out in place from a (not an error).
func responseFromHeartbeatAnswer(a *raftv1.HeartbeatAnswer, out *raft.AppendEntriesResponse) {
	out.RPCHeader = raft.RPCHeader{
		ProtocolVersion: raft.ProtocolVersion(a.GetProtocolVersion()),
		ID:              a.GetHeaderId(),
		Addr:            a.GetHeaderAddr(),
	}
	out.Term = a.GetTerm()
	out.LastLog = a.GetLastLog()
	out.Success = a.GetSuccess()
	out.NoRetryBackoff = a.GetNoRetryBackoff()
}
