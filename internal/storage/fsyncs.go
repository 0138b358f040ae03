package storage

import (
	"os"
	"sync/atomic"
)

// FsyncKind names what an fsync made durable (the label of the broker's
// tapes_fsyncs_total).
type FsyncKind int

// The kinds of fsync a broker issues.
const (
	// FsyncRaftLog: a commit of a Raft log store (bbolt fdatasyncs its data
	// pages, then its meta page: two per commit; see replication's counted
	// store).
	FsyncRaftLog FsyncKind = iota
	// FsyncSegment: a partition log's segment file (Log.Sync, before a
	// snapshot and at Close; a restored snapshot's segments).
	FsyncSegment
	// FsyncCheckpoint: a partition log's checkpoint file.
	FsyncCheckpoint
	// FsyncDir: a directory whose entries were created, renamed or removed.
	FsyncDir
	// FsyncSnapshot: a Raft snapshot's files (manifest, received data).
	FsyncSnapshot
	numFsyncKinds
)

var fsyncKindNames = [numFsyncKinds]string{"raft_log", "segment", "checkpoint", "dir", "snapshot"}

func (k FsyncKind) String() string { return fsyncKindNames[k] }

// FsyncKinds lists every kind, in order.
func FsyncKinds() []FsyncKind {
	out := make([]FsyncKind, numFsyncKinds)
	for i := range out {
		out[i] = FsyncKind(i)
	}
	return out
}

// fsyncs counts the fsyncs this process issued, by kind. It is process-wide
// because a broker is one process: every replica, the controller and the
// snapshot stores add to it from whatever goroutine syncs.
var fsyncs [numFsyncKinds]atomic.Uint64

// CountFsyncs adds n fsyncs of kind k. Callers whose fsyncs happen inside a
// library (bbolt's commits) call it beside the call that syncs; SyncFile
// counts itself.
func CountFsyncs(k FsyncKind, n uint64) { fsyncs[k].Add(n) }

// Fsyncs returns how many fsyncs of kind k this process has issued (counted
// whether or not they succeeded).
func Fsyncs(k FsyncKind) uint64 { return fsyncs[k].Load() }

// SyncFile fsyncs f and counts it as kind k. Every fsync of this package
// and of replication's snapshot store goes through it.
func SyncFile(f *os.File, k FsyncKind) error {
	fsyncs[k].Add(1)
	return f.Sync()
}
