package raftnet

import (
	"fmt"
	"sync"
	"testing"

	"github.com/hashicorp/raft"
)

// benchPair opens group "bench" on two brokers; the receiving side answers
// heartbeats through a heartbeat handler and other requests from a
// goroutine standing in for raft. Heartbeats do not linger: a heartbeat to
// an idle peer leaves at once.
func benchPair(b *testing.B) (from, to *Transport) {
	c := newCluster(b, 2, Config{HeartbeatLinger: -1})
	from, err := c.brokers[0].mux.Group("bench")
	if err != nil {
		b.Fatal(err)
	}
	to, err = c.brokers[1].mux.Group("bench")
	if err != nil {
		b.Fatal(err)
	}
	ok := &raft.AppendEntriesResponse{Term: 1, Success: true}
	to.SetHeartbeatHandler(func(rpc raft.RPC) { rpc.Respond(ok, nil) })
	stop := make(chan struct{})
	b.Cleanup(func() { close(stop) })
	go func() {
		for {
			select {
			case rpc := <-to.Consumer():
				rpc.Respond(ok, nil)
			case <-stop:
				return
			}
		}
	}()
	return from, to
}

// BenchmarkHeartbeat is one heartbeat round trip over loopback gRPC (a
// message of the heartbeat stream carrying one heartbeat, and its answer).
func BenchmarkHeartbeat(b *testing.B) {
	from, _ := benchPair(b)
	req := &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: 3, ID: []byte("1"), Addr: []byte("1")},
		Term:      1,
	}
	var resp raft.AppendEntriesResponse
	b.ReportAllocs()
	for b.Loop() {
		if err := from.AppendEntries("2", "2", req, &resp); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendEntries64x1KiB is one AppendEntries of 64 entries of
// 1 KiB (raft's default MaxAppendEntries) over loopback gRPC.
func BenchmarkAppendEntries64x1KiB(b *testing.B) {
	from, _ := benchPair(b)
	req := &raft.AppendEntriesRequest{
		RPCHeader:    raft.RPCHeader{ProtocolVersion: 3, ID: []byte("1"), Addr: []byte("1")},
		Term:         1,
		PrevLogEntry: 10,
		PrevLogTerm:  1,
	}
	data := make([]byte, 1024)
	for i := range 64 {
		req.Entries = append(req.Entries, &raft.Log{Index: uint64(11 + i), Term: 1, Type: raft.LogCommand, Data: data})
	}
	var resp raft.AppendEntriesResponse
	b.SetBytes(64 * 1024)
	b.ReportAllocs()
	for b.Loop() {
		if err := from.AppendEntries("2", "2", req, &resp); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHeartbeat64Groups is one heartbeat from each of 64 groups to the
// same peer, sent at once: they share a few messages of the heartbeat
// stream (calls/op).
func BenchmarkHeartbeat64Groups(b *testing.B) {
	const groups = 64
	c := newCluster(b, 2, Config{HeartbeatLinger: -1})
	var from []*Transport
	ok := &raft.AppendEntriesResponse{Term: 1, Success: true}
	for i := range groups {
		name := fmt.Sprintf("bench%02d", i)
		f, err := c.brokers[0].mux.Group(name)
		if err != nil {
			b.Fatal(err)
		}
		to, err := c.brokers[1].mux.Group(name)
		if err != nil {
			b.Fatal(err)
		}
		to.SetHeartbeatHandler(func(rpc raft.RPC) { rpc.Respond(ok, nil) })
		from = append(from, f)
	}
	req := &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: 3, ID: []byte("1"), Addr: []byte("1")},
		Term:      1,
	}
	calls0 := c.brokers[1].batchCalls.Load()
	b.ReportAllocs()
	for b.Loop() {
		var wg sync.WaitGroup
		for _, f := range from {
			wg.Go(func() {
				var resp raft.AppendEntriesResponse
				if err := f.AppendEntries("2", "2", req, &resp); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
	}
	b.ReportMetric(float64(c.brokers[1].batchCalls.Load()-calls0)/float64(b.N), "calls/op")
}
