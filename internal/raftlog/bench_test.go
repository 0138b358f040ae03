package raftlog

import (
	"bytes"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// BenchmarkStoreLogs: 6 groups append 50 KB entries (a 500-record batch
// of 100-byte records) at once, as 6 partitions' leaders do, to the
// shared log and to a raft-boltdb file per group; one op is one append.
// go test -run '^$' -bench StoreLogs -benchtime 2000x ./internal/raftlog/
func BenchmarkStoreLogs(b *testing.B) {
	const groups = 6
	data := bytes.Repeat([]byte("x"), 50_000)
	run := func(b *testing.B, stores []raft.LogStore) {
		var next atomic.Int64
		var wg sync.WaitGroup
		b.SetBytes(int64(len(data)))
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
