package dashboard

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
)

// tailChunk bounds what one read of a tailed file takes.
const tailChunk = 4 << 20

// tailer reads the lines appended to a file since its last read. A line
// is returned once its newline is written (a writer's torn last line
// waits). A file that shrank was truncated (a producer that restarted
// rewrote its history): it is read again from its start.
type tailer struct {
	path    string
	off     int64
	partial []byte
}

// newTailer tails path from its start, or (fromEnd) from its current end.
func newTailer(path string, fromEnd bool) *tailer {
	t := &tailer{path: path}
	if fromEnd {
		if fi, err := os.Stat(path); err == nil {
			t.off = fi.Size()
		}
	}
	return t
}

// lines returns the complete lines appended since the last call, without
// their newlines; reset tells that the file was truncated and read again
// from its start. A missing file has no lines.
func (t *tailer) lines() (lines [][]byte, reset bool, err error) {
	f, err := os.Open(t.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, false, err
	}
	if fi.Size() < t.off {
		t.off, t.partial, reset = 0, nil, true
	}
	if fi.Size() == t.off {
		return nil, reset, nil
	}
	buf := make([]byte, min(fi.Size()-t.off, tailChunk))
	n, err := f.ReadAt(buf, t.off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, reset, err
	}
	buf = buf[:n]
	t.off += int64(n)
	data := append(t.partial, buf...)
	last := bytes.LastIndexByte(data, '\n')
	if last < 0 {
		t.partial = data
		return nil, reset, nil
	}
	t.partial = append([]byte(nil), data[last+1:]...)
	for _, l := range bytes.Split(data[:last], []byte{'\n'}) {
		if len(bytes.TrimSpace(l)) > 0 {
			lines = append(lines, l)
		}
	}
	return lines, reset, nil
}
