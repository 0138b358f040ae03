// Package raftnet owns the network path of every Raft group of a broker:
// hashicorp/raft's RPCs carried over gRPC (tapes.raft.v1.RaftService), many
// groups on the broker's one gRPC port and one client connection per peer.
//
// A Mux belongs to one broker. It registers the RaftService on the broker's
// gRPC server and hands out one Transport (a raft.Transport) per group; every
// message names its group, and the receiving Mux routes it to the Transport
// of that name. A message for a group that is not open there is answered at
// once with codes.Unavailable ("unknown raft group NAME").
//
// Raft servers are named by broker id: a ServerID and its ServerAddress are
// the same decimal string, and configurations hold no network addresses. The
// Mux turns a ServerAddress into a dial target with the broker's resolver,
// asked before every RPC, so a peer that moves (a restart on a new port, or a
// chaos proxy put in between) is followed.
//
// Besides carrying RPCs, a Transport:
//   - coalesces heartbeats, and AppendEntries that carry no entries: a
//     heartbeat, or raft's idle CommitTimeout round, waits up to
//     HeartbeatLinger (default 20 ms) for those of the other groups to the
//     same peer, and they travel as one message of a long-lived
//     HeartbeatStream, one per peer connection, each call numbered (an
//     AppendEntries without entries that raft's replication waits on, such
//     as a new leader's first, goes at once, with whatever is queued); the
//     peer answers each call by
//     its number, heartbeats through raft's heartbeat handler instead of
//     queueing them behind a long AppendEntries, the others through raft's
//     consumer channel, and a call its raft is slow to answer holds back
//     neither the others nor later messages. A batch that has waited half
//     its linger leaves early whenever the Mux sends to some peer anyway
//     (a batch due, or answers), so that a broker's traffic goes in few
//     bursts. A stream that breaks fails the calls it has not answered and
//     the next batch opens a new one; the stream ends when its connection
//     stops being ready, so that a peer's graceful stop does not wait for
//     it (see heartbeat.go and heartbeat_server.go). AppendEntries that
//     carry entries are RPCs of their own;
//   - reports every answered AppendEntries that is not a heartbeat (on the
//     stream or not) to an AppendObserver, with the time raft handed it to
//     the Transport, from which the partition leader derives each
//     follower's match index (hashicorp/raft exposes no follower progress);
//   - bounds every call with a deadline, and on Close fails the calls in
//     flight with raft.ErrTransportShutdown, so that raft's Shutdown after it
//     never hangs on the network.
//
// The Transport implements raft.WithPreVote (RequestPreVote), so raft runs
// a pre-vote round before each election that is not a leadership transfer:
// a server that was away cannot raise its term and depose a leader its
// peers still follow. A peer without the RPC counts as granting it (see
// ErrPreVoteUnsupported).
//
// Not provided: AppendEntries pipelining (raft falls back to one request at
// a time).
package raftnet
