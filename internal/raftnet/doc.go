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
//   - coalesces heartbeats: a heartbeat waits up to HeartbeatLinger
//     (default 5 ms) for those of the other groups to the same peer, and
//     they travel in one Heartbeat RPC whose answer holds one result per
//     heartbeat; the peer answers each through raft's heartbeat handler
//     instead of queueing it behind a long AppendEntries, and a heartbeat
//     its raft does not answer does not hold back the others (see
//     heartbeat.go);
//   - reports every answered AppendEntries that is not a heartbeat to an
//     AppendObserver, from which the partition leader derives each follower's
//     match index (hashicorp/raft exposes no follower progress);
//   - bounds every call with a deadline, and on Close fails the calls in
//     flight with raft.ErrTransportShutdown, so that raft's Shutdown after it
//     never hangs on the network.
//
// Not provided: AppendEntries pipelining (raft falls back to one request at a
// time) and pre-vote (tapes.raft.v1 has no RequestPreVote RPC, so the
// Transport does not implement raft.WithPreVote and raft v1.7.3 runs without
// pre-vote).
package raftnet
