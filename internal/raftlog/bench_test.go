package raftlog

import (
	"bytes"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/tapes-dev/tapes/internal/storage"
)

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkStoreLogs: 6 groups append 50 KB entries (a 500-record batch
// of 100-byte records) at once, as 6 partitions' leaders do, to the
// shared log and to a raft-boltdb file per group; one op is one append.
// It reports the process's CPU per append and (for the shared log, whose
// fsyncs are counted) fsyncs per append.
// go test -run '^$' -bench StoreLogs -benchtime 2000x ./internal/raftlog/
func BenchmarkStoreLogs(b *testing.B) {
	const groups = 6
	data := bytes.Repeat([]byte("x"), 50_000)
	run := func(b *testing.B, stores []raft.LogStore) {
		var next atomic.Int64
		var wg sync.WaitGroup
		b.SetBytes(int64(len(data)))
		cpu0 := cpuTime()
		syncs0 := storage.Fsyncs(storage.FsyncRaftLog)
		b.ResetTimer()
		for _, s := range stores {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := uint64(1); next.Add(1) <= int64(b.N); i++ {
					if err := s.StoreLogs([]*raft.Log{{Index: i, Term: 1, Type: raft.LogCommand, Data: data}}); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		if n := storage.Fsyncs(storage.FsyncRaftLog) - syncs0; n > 0 {
			b.ReportMetric(float64(n)/float64(b.N), "fsyncs/op")
		}
	}
	b.Run("wal", func(b *testing.B) {
		l, err := Open(b.TempDir(), Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		var stores []raft.LogStore
		for g := range groups {
			s, err := l.Group(fmt.Sprint("g", g))
			if err != nil {
				b.Fatal(err)
			}
			stores = append(stores, s)
		}
		run(b, stores)
	})
	b.Run("bolt", func(b *testing.B) {
		dir := b.TempDir()
		var stores []raft.LogStore
		for g := range groups {
			s, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, fmt.Sprint("g", g, ".db"))})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			stores = append(stores, s)
		}
		run(b, stores)
	})
}
