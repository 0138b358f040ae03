package replication

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tapes-dev/tapes/internal/storage"
)

const (
	snapMetaFile     = "meta.json"     // raft.SnapshotMeta, Size included
	snapManifestFile = "manifest.json" // storage.SnapshotManifest of a linked snapshot
	snapDataFile     = "data"          // the stream of a received snapshot
	snapLegacyFile   = "state.bin"     // the stream, in raft's FileSnapshotStore format
	snapTmpSuffix    = ".tmp"
)

// snapStore is a partition replica's raft.SnapshotStore. It owns the
// directory it is rooted at (REPLICA/snapshots), in which every snapshot is a
// directory <term>-<index>-<unixmillis> holding meta.json (the
// raft.SnapshotMeta, Size being the exact length of the stream Open returns)
// and either
//
//   - hard links to the partition log's segment files and manifest.json
//     (storage.SnapshotManifest: how many bytes of each file, the log start
//     and end, the last Raft index), for a snapshot this replica took: no
//     data is copied, and Open streams what storage.Snapshot.WriteTo would
//     write; or
//   - data, the stream as received, for a snapshot the leader sent by
//     InstallSnapshot.
//
// Directories left by raft's FileSnapshotStore, which used the same root and
// naming (meta.json plus state.bin, the same stream), are listed and opened
// as received snapshots, so a replica upgraded in place keeps its snapshots;
// they are reaped like the others once two newer ones exist. (Their CRC64 is
// not checked: Restore checks every frame of the stream.)
//
// Who calls what: raft's snapshot goroutine calls Create, then
// fsmSnapshot.Persist adopts a storage.Snapshot into the sink and Closes it
// (linking, and a few small fsyncs); raft's InstallSnapshot handling calls
// Create, Writes the received bytes, then Closes (fsyncing the data file);
// raft calls List and Open to send a snapshot to a follower, to restore a
// received one, and at start. Close fsyncs the files and directory, renames
// the .tmp directory into place and removes all but the retain newest
// snapshots. Open blocks only to open files; the stream of a linked snapshot
// is written by a goroutine of its own. A retained snapshot's links keep the
// segments it holds on disk after retention or a Restore removed them from
// the log, until the snapshot is reaped.
type snapStore struct {
	dir    string
	retain int
	logger *slog.Logger

	// mu keeps reaping from removing a snapshot while List reads it or Open
	// opens its files (open files stay readable once removed).
	mu sync.Mutex
}

// newSnapStore opens the store in dir, creating it, and removes the .tmp
// directories of snapshots a crash interrupted.
func newSnapStore(dir string, retain int, logger *slog.Logger) (*snapStore, error) {
	if retain < 1 {
		return nil, fmt.Errorf("snapshot store: retain %d, want at least 1", retain)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("snapshot store: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("snapshot store: %w", err)
	}
	for _, e := range entries {
		if e.IsDir() && strings.HasSuffix(e.Name(), snapTmpSuffix) {
			logger.Warn("removing unfinished raft snapshot", "dir", e.Name())
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return nil, fmt.Errorf("snapshot store: remove unfinished snapshot: %w", err)
			}
		}
	}
	return &snapStore{dir: dir, retain: retain, logger: logger}, nil
}

// Create implements raft.SnapshotStore: it makes the snapshot's .tmp
// directory and returns the sink that fills it.
func (s *snapStore) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, _ raft.Transport) (raft.SnapshotSink, error) {
	if version < raft.SnapshotVersionMin || version > raft.SnapshotVersionMax {
		return nil, fmt.Errorf("create snapshot: unsupported version %d", version)
	}
	id := fmt.Sprintf("%d-%d-%d", term, index, time.Now().UnixMilli())
	tmp := filepath.Join(s.dir, id+snapTmpSuffix)
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("create snapshot: %w", err)
	}
	return &snapSink{store: s, tmp: tmp, meta: raft.SnapshotMeta{
		Version: version, ID: id, Index: index, Term: term,
		Configuration: configuration, ConfigurationIndex: configurationIndex,
	}}, nil
}

// List implements raft.SnapshotStore: the snapshots, newest first.
// Directories without a readable meta.json are skipped (and left alone).
func (s *snapStore) List() ([]*raft.SnapshotMeta, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.list()
}

func (s *snapStore) list() ([]*raft.SnapshotMeta, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	var out []*raft.SnapshotMeta
	for _, e := range entries {
		if !e.IsDir() || strings.HasSuffix(e.Name(), snapTmpSuffix) {
			continue
		}
		meta, err := readSnapMeta(filepath.Join(s.dir, e.Name()))
		if err != nil {
			s.logger.Warn("skipping unreadable raft snapshot", "dir", e.Name(), "err", err)
			continue
		}
		out = append(out, meta)
	}
	slices.SortFunc(out, func(a, b *raft.SnapshotMeta) int {
		return -cmp.Or(cmp.Compare(a.Term, b.Term), cmp.Compare(a.Index, b.Index), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

func readSnapMeta(dir string) (*raft.SnapshotMeta, error) {
	b, err := os.ReadFile(filepath.Join(dir, snapMetaFile))
	if err != nil {
		return nil, err
	}
	// raft's FileSnapshotStore wrote the same fields plus a CRC, ignored here.
	var meta raft.SnapshotMeta
	if err := json.Unmarshal(b, &meta); err != nil {
		return nil, fmt.Errorf("decode %s: %w", snapMetaFile, err)
	}
	if meta.ID != filepath.Base(dir) {
		return nil, fmt.Errorf("%s names snapshot %q", snapMetaFile, meta.ID)
	}
	return &meta, nil
}

// Open implements raft.SnapshotStore. For a linked snapshot the reader is
// the stream storage.Snapshot.WriteTo writes, produced by a goroutine that
// holds the segment files open until the reader is closed; otherwise it is
// the data file.
func (s *snapStore) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	dir := filepath.Join(s.dir, id)
	meta, err := readSnapMeta(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("open snapshot %s: %w", id, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, snapManifestFile))
	switch {
	case err == nil:
		var m storage.SnapshotManifest
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, nil, fmt.Errorf("open snapshot %s: decode %s: %w", id, snapManifestFile, err)
		}
		if size := m.StreamSize(); size != meta.Size {
			return nil, nil, fmt.Errorf("open snapshot %s: manifest makes %d bytes, meta says %d", id, size, meta.Size)
		}
		snap, err := storage.OpenSnapshotDir(dir, m)
		if err != nil {
			return nil, nil, fmt.Errorf("open snapshot %s: %w", id, err)
		}
		return meta, s.stream(id, snap), nil
	case !errors.Is(err, os.ErrNotExist):
		return nil, nil, fmt.Errorf("open snapshot %s: %w", id, err)
	}
	for _, name := range []string{snapDataFile, snapLegacyFile} {
		f, err := os.Open(filepath.Join(dir, name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("open snapshot %s: %w", id, err)
		}
		return meta, f, nil
	}
	return nil, nil, fmt.Errorf("open snapshot %s: no %s, %s or %s", id, snapManifestFile, snapDataFile, snapLegacyFile)
}

// stream returns a reader of snap's stream, written by a goroutine that
// releases snap when it is done or the reader is closed.
func (s *snapStore) stream(id string, snap *storage.Snapshot) io.ReadCloser {
	pr, pw := io.Pipe()
	r := &snapReader{PipeReader: pr, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		_, err := snap.WriteTo(pw)
		if rerr := snap.Release(); rerr != nil {
			s.logger.Warn("releasing raft snapshot files", "id", id, "err", rerr)
		}
		pw.CloseWithError(err) // nil: the reader sees io.EOF
	}()
	return r
}

// snapReader is the reader of a linked snapshot's stream.
type snapReader struct {
	*io.PipeReader
	done chan struct{} // closed when the writing goroutine has released the files
}

// Close stops the writer, if it is still writing, and waits until it has
// closed the segment files.
func (r *snapReader) Close() error {
	err := r.PipeReader.Close()
	<-r.done
	return err
}

// reap removes all but the retain newest snapshots.
func (s *snapStore) reap() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	snaps, err := s.list()
	if err != nil {
		return err
	}
	var errs []error
	for _, meta := range snaps[min(s.retain, len(snaps)):] {
		if err := os.RemoveAll(filepath.Join(s.dir, meta.ID)); err != nil {
			errs = append(errs, fmt.Errorf("remove snapshot %s: %w", meta.ID, err))
		}
	}
	return errors.Join(errs...)
}

// snapSink is a snapshot being written: by adopt (fsmSnapshot.Persist, on
// raft's snapshot goroutine) or by Write (InstallSnapshot), never both. It
// is used by one goroutine at a time.
type snapSink struct {
	store *snapStore
	tmp   string // the .tmp directory being filled
	meta  raft.SnapshotMeta

	data    *os.File // the Write path's data file, nil until the first Write
	buf     *bufio.Writer
	adopted bool // the adopt path's links and manifest are in tmp
	done    bool // Closed or Cancelled
}

// ID implements raft.SnapshotSink.
func (k *snapSink) ID() string { return k.meta.ID }

// Write implements raft.SnapshotSink (io.Writer): it appends p to the data
// file.
func (k *snapSink) Write(p []byte) (int, error) {
	switch {
	case k.done:
		return 0, fmt.Errorf("write snapshot %s: sink closed", k.meta.ID)
	case k.adopted:
		return 0, fmt.Errorf("write snapshot %s: sink holds a linked snapshot", k.meta.ID)
	}
	if k.data == nil {
		if err := k.createData(); err != nil {
			return 0, err
		}
	}
	n, err := k.buf.Write(p)
	k.meta.Size += int64(n)
	if err != nil {
		return n, fmt.Errorf("write snapshot %s: %w", k.meta.ID, err)
	}
	return n, nil
}

func (k *snapSink) createData() error {
	f, err := os.OpenFile(filepath.Join(k.tmp, snapDataFile), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("write snapshot %s: %w", k.meta.ID, err)
	}
	k.data, k.buf = f, bufio.NewWriterSize(f, 1<<20)
	return nil
}

// adopt makes the sink hold snap as hard links to its segment files plus a
// manifest, instead of a copy of its stream. The caller still Closes the
// sink (or Cancels it) and Releases snap.
func (k *snapSink) adopt(snap *storage.Snapshot) error {
	switch {
	case k.done:
		return fmt.Errorf("adopt snapshot %s: sink closed", k.meta.ID)
	case k.adopted || k.data != nil:
		return fmt.Errorf("adopt snapshot %s: sink already written", k.meta.ID)
	}
	if err := snap.LinkInto(k.tmp); err != nil {
		return fmt.Errorf("adopt snapshot %s: %w", k.meta.ID, err)
	}
	m := snap.Manifest()
	if err := writeJSONFile(filepath.Join(k.tmp, snapManifestFile), m); err != nil {
		return fmt.Errorf("adopt snapshot %s: %w", k.meta.ID, err)
	}
	k.meta.Size = m.StreamSize()
	k.adopted = true
	return nil
}

// Close implements raft.SnapshotSink: it fsyncs the snapshot's files and
// directory, renames it into place and reaps old snapshots. A sink nothing
// was written to becomes an empty data snapshot. Closing again, or after
// Cancel, does nothing (raft closes after Persist has).
func (k *snapSink) Close() error {
	if k.done {
		return nil
	}
	k.done = true
	if err := k.finish(); err != nil {
		if k.data != nil {
			k.data.Close()
		}
		os.RemoveAll(k.tmp)
		return fmt.Errorf("close snapshot %s: %w", k.meta.ID, err)
	}
	if err := k.store.reap(); err != nil {
		return fmt.Errorf("close snapshot %s: %w", k.meta.ID, err)
	}
	return nil
}

func (k *snapSink) finish() error {
	if !k.adopted {
		if k.data == nil {
			if err := k.createData(); err != nil {
				return err
			}
		}
		if err := k.buf.Flush(); err != nil {
			return err
		}
		if err := storage.SyncFile(k.data, storage.FsyncSnapshot); err != nil {
			return err
		}
		err := k.data.Close()
		k.data = nil
		if err != nil {
			return err
		}
	}
	if err := writeJSONFile(filepath.Join(k.tmp, snapMetaFile), k.meta); err != nil {
		return err
	}
	if err := storage.SyncDir(k.tmp); err != nil {
		return err
	}
	if err := os.Rename(k.tmp, filepath.Join(k.store.dir, k.meta.ID)); err != nil {
		return err
	}
	return storage.SyncDir(k.store.dir)
}

// Cancel implements raft.SnapshotSink: it removes what was written.
func (k *snapSink) Cancel() error {
	if k.done {
		return nil
	}
	k.done = true
	var errs []error
	if k.data != nil {
		errs = append(errs, k.data.Close())
		k.data = nil
	}
	errs = append(errs, os.RemoveAll(k.tmp))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cancel snapshot %s: %w", k.meta.ID, err)
	}
	return nil
}

// writeJSONFile writes v to a new file at path and fsyncs it.
func writeJSONFile(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", filepath.Base(path), err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = storage.SyncFile(f, storage.FsyncSnapshot)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	return nil
}
