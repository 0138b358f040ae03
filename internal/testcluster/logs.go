package testcluster

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"sort"

	"github.com/tapes-dev/tapes/internal/clusterfile"
	"github.com/tapes-dev/tapes/internal/storage"
)

// brokers returns the cluster's broker processes.
func (e *Env) Brokers() []clusterfile.Process {
	var out []clusterfile.Process
	for _, n := range e.C.Names() {
		if p, ok := e.C.Process(n); ok && p.Kind == "broker" {
			out = append(out, p)
		}
	}
	return out
}

// partitionLogDir is where broker b keeps topic/p's log.
func partitionLogDir(b clusterfile.Process, topic string, p int32) (string, bool) {
	m, _ := filepath.Glob(filepath.Join(b.DataDir, "partitions", fmt.Sprintf("%s-%d@*", topic, p), "log"))
	if len(m) != 1 {
		return "", false
	}
	return m[0], true
}

// compareLogFiles stops every running broker cleanly, then checks that the
// replicas of topic/p (except skip) hold the same records in [start, hw) and
// byte-identical segment files over their common length.
func (e *Env) CompareLogFiles(topic string, p int32, skip int32, hw int64) {
	e.T.Helper()
	type replica struct {
		name string
		recs []storage.Record
		raw  []byte
	}
	var reps []replica
	for _, b := range e.Brokers() {
		if b.ID == skip {
			continue
		}
		if e.C.Running(b.Name) {
			if err := e.C.Stop(b.Name); err != nil {
				e.T.Fatalf("stop %s: %v", b.Name, err)
			}
		}
		dir, ok := partitionLogDir(b, topic, p)
		if !ok {
			e.T.Fatalf("%s has no log dir for %s-%d", b.Name, topic, p)
		}
		l, err := storage.Open(dir, storage.Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			e.T.Fatalf("open %s's log: %v", b.Name, err)
		}
		if l.EndOffset() < hw {
			e.T.Fatalf("%s's log ends at %d, below the high watermark %d", b.Name, l.EndOffset(), hw)
		}
		var recs []storage.Record
		for off := l.StartOffset(); off < hw; {
			batch, err := l.Read(off, 1<<20, hw)
			if err != nil || len(batch) == 0 {
				e.T.Fatalf("read %s's log at %d: %v", b.Name, off, err)
			}
			recs = append(recs, batch...)
			off = batch[len(batch)-1].Offset + 1
		}
		var raw []byte
		segs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
		sort.Strings(segs)
		for _, s := range segs {
			b, err := os.ReadFile(s)
			if err != nil {
				e.T.Fatal(err)
			}
			raw = append(raw, b...)
		}
		l.Close()
		reps = append(reps, replica{b.Name, recs, raw})
	}
	for _, r := range reps[1:] {
		if !reflect.DeepEqual(r.recs, reps[0].recs) {
			e.T.Fatalf("%s and %s hold different records below the high watermark %d", reps[0].name, r.name, hw)
		}
		n := min(len(r.raw), len(reps[0].raw))
		if !bytes.Equal(r.raw[:n], reps[0].raw[:n]) {
			e.T.Fatalf("%s and %s: segment files differ within their common %d bytes", reps[0].name, r.name, n)
		}
	}
	e.T.Logf("%d replicas of %s-%d hold identical logs up to offset %d", len(reps), topic, p, hw)
}

// SegmentCount is how many segment files broker b keeps for topic/p (0
// when it hosts no replica of it).
func (e *Env) SegmentCount(b clusterfile.Process, topic string, p int32) int {
	e.T.Helper()
	dir, ok := partitionLogDir(b, topic, p)
	if !ok {
		return 0
	}
	m, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		e.T.Fatalf("segments of %s-%d on %s: %v", topic, p, b.Name, err)
	}
	return len(m)
}
