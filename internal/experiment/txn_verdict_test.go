package experiment

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/check"
)

// hist builds transactional history lines by hand.
type hist struct {
	at    time.Time
	lines []check.TxnLine
}

func (h *hist) add(l check.TxnLine) *hist {
	h.at = h.at.Add(100 * time.Millisecond)
	if l.At.IsZero() {
		l.At = h.at
	}
	h.lines = append(h.lines, l)
	return h
}

func (h *hist) begin(proc, txn, tid string, pid int64, epoch int16) *hist {
	return h.add(check.TxnLine{Type: check.TxnBegin, Process: proc, Txn: txn, TransactionalID: tid, ProducerID: &pid, Epoch: &epoch})
}

func (h *hist) send(proc, txn, id string, p int32, off int64, errName string) *hist {
	st := check.SendOK
	if errName != "" {
		st, off = check.SendError, -1
	}
	return h.add(check.TxnLine{Type: check.TxnSend, Process: proc, Txn: txn, EventID: id, Topic: "t", Partition: &p, Offset: &off, Status: st, Error: errName})
}

func (h *hist) commit(proc, txn string) *hist {
	h.add(check.TxnLine{Type: check.TxnEnd, Process: proc, Txn: txn, Outcome: check.OutcomeCommit, Status: check.EndRequested})
	return h.add(check.TxnLine{Type: check.TxnEnd, Process: proc, Txn: txn, Outcome: check.OutcomeCommit, Status: check.EndOK})
}

func (h *hist) isolation(proc, level string) *hist {
	return h.add(check.TxnLine{Type: check.TxnIsolation, Process: proc, Isolation: level})
}

func (h *hist) read(proc, id string, p int32, off int64) *hist {
	return h.add(check.TxnLine{Type: check.TxnRead, Process: proc, EventID: id, Topic: "t", Partition: &p, Offset: &off})
}

func (h *hist) lso(proc string, lso, hw int64, at time.Time) *hist {
	p := int32(0)
	return h.add(check.TxnLine{Type: check.TxnLSO, Process: proc, Topic: "t", Partition: &p, LSO: &lso, HW: &hw, At: at})
}

func (h *hist) write(t *testing.T, path string) string {
	t.Helper()
	w, err := check.CreateTxnHistory(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range h.lines {
		if err := w.Write(l); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// zombieCase is one hand-written zombie-fencing run.
type zombieCase struct {
	zombie, successor, readers *hist
	exit                       string
}

// fencedRun is what zombie-fencing must find: the zombie's open
// transaction (z-0, z-1 at epoch 0), the successor at epoch 2 committing
// s-0, s-1, the resumed zombie refused INVALID_PRODUCER_EPOCH, exit 1;
// read_committed reads s-0 and s-1 only, read_uncommitted all four.
func fencedRun(t0 time.Time) zombieCase {
	z := (&hist{at: t0}).begin("z", "w/0/0", "w", 7, 0).send("z", "w/0/0", "z-0", 0, 0, "").send("z", "w/0/0", "z-1", 0, 1, "")
	s := (&hist{at: t0.Add(time.Second)}).begin("s", "w/2/0", "w", 7, 2).send("s", "w/2/0", "s-0", 0, 3, "").send("s", "w/2/0", "s-1", 0, 4, "").commit("s", "w/2/0")
	z.at = t0.Add(3 * time.Second)
	z.send("z", "w/0/0", "z-2", 0, -1, "INVALID_PRODUCER_EPOCH")
	r := (&hist{at: t0.Add(4 * time.Second)}).isolation("rc", check.ReadCommitted).read("rc", "s-0", 0, 3).read("rc", "s-1", 0, 4).
		isolation("ru", check.ReadUncommitted).read("ru", "z-0", 0, 0).read("ru", "z-1", 0, 1).read("ru", "s-0", 0, 3).read("ru", "s-1", 0, 4)
	return zombieCase{z, s, r, "exit status 1"}
}

// TestFencingVerdict: the fenced run passes the verdict and the checker
// (exactly-once); each way the property can fail is caught, by the
// verdict and, where the histories show an anomaly, by the checker too.
func TestFencingVerdict(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		mut  func(c *zombieCase)
		// want: a substring of a verdict reason ("" for none); kind: an
		// anomaly the checker must count.
		want, kind string
	}{
		{name: "fenced", mut: func(*zombieCase) {}},
		{
			// The successor's InitProducerId skipped: no successor fenced
			// the zombie, which resumed, went on and committed.
			name: "no InitProducerId of a successor",
			mut: func(c *zombieCase) {
				c.successor = &hist{}
				z := (&hist{at: t0}).begin("z", "w/0/0", "w", 7, 0).send("z", "w/0/0", "z-0", 0, 0, "").send("z", "w/0/0", "z-1", 0, 1, "").commit("z", "w/0/0")
				c.zombie, c.exit = z, "exit status 0"
				c.readers = (&hist{at: t0.Add(4 * time.Second)}).isolation("rc", check.ReadCommitted).read("rc", "z-0", 0, 0).read("rc", "z-1", 0, 1).
					isolation("ru", check.ReadUncommitted).read("ru", "z-0", 0, 0).read("ru", "z-1", 0, 1)
			},
			want: "the successor began no transaction",
		},
		{
			// A successor that did not bump the epoch: the zombie's commit,
			// asked after the successor began, went through.
			name: "successor at the zombie's epoch, zombie committed",
			mut: func(c *zombieCase) {
				s := (&hist{at: t0.Add(time.Second)}).begin("s", "w/0/9", "w", 7, 0).send("s", "w/0/9", "s-0", 0, 3, "").send("s", "w/0/9", "s-1", 0, 4, "").commit("s", "w/0/9")
				z := (&hist{at: t0}).begin("z", "w/0/0", "w", 7, 0).send("z", "w/0/0", "z-0", 0, 0, "").send("z", "w/0/0", "z-1", 0, 1, "")
				z.at = t0.Add(3 * time.Second)
				z.commit("z", "w/0/0")
				c.zombie, c.successor, c.exit = z, s, "exit status 0"
				c.readers.isolation("rc2", check.ReadCommitted).read("rc2", "z-0", 0, 0)
			},
			want: "is not above the zombie's",
		},
		{
			// The committed check read read_uncommitted while its history
			// says read_committed: the zombie's aborted records show.
			name: "committed check read read_uncommitted",
			mut: func(c *zombieCase) {
				c.readers.isolation("rc", check.ReadCommitted).read("rc", "z-0", 0, 0).read("rc", "z-1", 0, 1)
			},
			want: "records of the zombie visible to read_committed", kind: check.AbortedRead,
		},
		{
			// The committed check done at read_uncommitted and said so: no
			// read_committed read at all.
			name: "no read_committed read",
			mut: func(c *zombieCase) {
				c.readers = (&hist{at: t0.Add(4 * time.Second)}).isolation("ru", check.ReadUncommitted).read("ru", "z-0", 0, 0).read("ru", "s-0", 0, 3).read("ru", "s-1", 0, 4)
			},
			want: "committed records missing",
		},
		{
			name: "zombie not refused",
			mut: func(c *zombieCase) {
				c.zombie = (&hist{at: t0}).begin("z", "w/0/0", "w", 7, 0).send("z", "w/0/0", "z-0", 0, 0, "").send("z", "w/0/0", "z-1", 0, 1, "")
				c.exit = "signal: killed"
			},
			want: "it was not refused as fenced",
		},
		{
			name: "zombie wrote nothing before the pause",
			mut: func(c *zombieCase) {
				c.zombie = (&hist{at: t0}).begin("z", "w/0/0", "w", 7, 0)
				c.zombie.at = t0.Add(3 * time.Second)
				c.zombie.send("z", "w/0/0", "z-2", 0, -1, "PRODUCER_FENCED")
				c.readers = (&hist{at: t0.Add(4 * time.Second)}).isolation("rc", check.ReadCommitted).read("rc", "s-0", 0, 3).read("rc", "s-1", 0, 4)
			},
			want: "the run proves nothing",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := fencedRun(t0)
			tc.mut(&c)
			dir := t.TempDir()
			zp, sp, rp := c.zombie.write(t, filepath.Join(dir, "txn-zombie.jsonl")), c.successor.write(t, filepath.Join(dir, "txn-successor.jsonl")), c.readers.write(t, filepath.Join(dir, "txn-readers.jsonl"))
			why := fencingVerdict(zp, sp, rp, c.exit)
			res, err := check.Check(t.Context(), check.Input{TxnHistories: []string{zp, sp, rp}, Expect: check.ExactlyOnce})
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if len(why) > 0 || !res.Valid {
					t.Fatalf("verdict %q, checker %v %v: want both to pass", why, res.Valid, res.Why)
				}
				return
			}
			if !slices.ContainsFunc(why, func(w string) bool { return strings.Contains(w, tc.want) }) {
				t.Fatalf("verdict %q: want a reason with %q", why, tc.want)
			}
			if tc.kind != "" && (res.Counts[tc.kind] == 0 || res.Valid) {
				t.Fatalf("checker counts %v valid %v: want %s", res.Counts, res.Valid, tc.kind)
			}
		})
	}
}

// TestJudgeHang: a dead transaction at offset 5 begun at t0 with a 4 s
// timeout. The LSO stuck at 5 from t0+0.2 s until t0+4.5 s, then moved,
// and the follower read offsets above 5: it passes. The LSO moving before
// the timeout, never moving, and no read above the dead transaction after
// the move each fail.
func TestJudgeHang(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	const timeout = 4 * time.Second
	dead := func() txnSummary {
		return summarize((&hist{at: t0.Add(-100 * time.Millisecond)}).begin("d", "d/0/2", "d", 3, 0).send("d", "d/0/2", "d-0", 0, 5, "").send("d", "d/0/2", "d-1", 0, 6, "").lines)
	}
	readers := func(movedAt time.Time, readAbove bool) []check.TxnLine {
		h := &hist{at: t0}
		h.isolation("f", check.ReadCommitted).read("f", "l-0", 0, 4)
		for at := t0.Add(200 * time.Millisecond); at.Before(movedAt); at = at.Add(500 * time.Millisecond) {
			h.lso("f", 5, 9, at)
		}
		h.lso("f", 12, 12, movedAt)
		if readAbove {
			h.at = movedAt
			h.read("f", "l-1", 0, 8).read("f", "l-2", 0, 11)
		}
		h.isolation("ru", check.ReadUncommitted).read("ru", "d-0", 0, 5)
		return h.lines
	}
	stats := func(lines []check.TxnLine) *check.TxnStats {
		path := (&hist{lines: lines}).write(t, filepath.Join(t.TempDir(), "txn-readers.jsonl"))
		res, err := check.Check(t.Context(), check.Input{TxnHistories: []string{path}, HungLSOAfter: timeout / 2})
		if err != nil {
			t.Fatal(err)
		}
		return res.Txn
	}
	cases := []struct {
		name    string
		movedAt time.Duration
		above   bool
		want    string
	}{
		{"aborted by the timeout", 4500 * time.Millisecond, true, ""},
		{"moved before the timeout", 2 * time.Second, true, "before its timeout"},
		{"no later reads", 4500 * time.Millisecond, false, "did not get the later committed records"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lines := readers(t0.Add(tc.movedAt), tc.above)
			why, figures := judgeHang(dead(), lines, "f", stats(lines), timeout)
			if tc.want == "" && len(why) > 0 || tc.want != "" && !slices.ContainsFunc(why, func(w string) bool { return strings.Contains(w, tc.want) }) {
				t.Fatalf("verdict %q: want %q", why, tc.want)
			}
			t.Logf("figures %v", figures)
		})
	}
	t.Run("never moved", func(t *testing.T) {
		h := &hist{at: t0}
		h.isolation("f", check.ReadCommitted)
		for at := t0.Add(200 * time.Millisecond); at.Before(t0.Add(6 * time.Second)); at = at.Add(500 * time.Millisecond) {
			h.lso("f", 5, 9, at)
		}
		why, _ := judgeHang(dead(), h.lines, "f", stats(h.lines), timeout)
		if !slices.ContainsFunc(why, func(w string) bool { return strings.Contains(w, "did not move on") }) {
			t.Fatalf("verdict %q: want the LSO not moving", why)
		}
	})
}
