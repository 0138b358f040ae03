package compat

import (
	"errors"
	"strings"
	"testing"
)

func recs(spec ...string) []Record {
	var out []Record
	for _, s := range spec {
		rs, err := ParseLines([]byte("X "+s+"\n"), "X")
		if err != nil || len(rs) != 1 {
			panic(s)
		}
		out = append(out, rs[0])
	}
	return out
}

func TestParseLines(t *testing.T) {
	out := []byte("SENT 100\nACK 1 7 k0 k0-000000\nnoise\nACK -1 -1 k1 k1-000001\n")
	got, err := ParseLines(out, "ACK")
	if err != nil {
		t.Fatal(err)
	}
	want := []Record{{1, 7, "k0", "k0-000000"}, {-1, -1, "k1", "k1-000001"}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("got %v, want %v", got, want)
	}
	if _, err := ParseLines([]byte("ACK 1 x k v\n"), "ACK"); !errors.Is(err, ErrBadLine) {
		t.Fatalf("bad offset: %v, want ErrBadLine", err)
	}
	if _, err := ParseLines([]byte("ACK 1 2 k\n"), "ACK"); !errors.Is(err, ErrBadLine) {
		t.Fatalf("missing value: %v, want ErrBadLine", err)
	}
}

func TestCheckProduced(t *testing.T) {
	stored := recs("0 0 k0 k0-000000", "0 1 k0 k0-000002", "1 0 k1 k1-000001", "1 1 k1 k1-000003")
	for _, c := range []struct {
		name   string
		acked  []Record
		stored []Record
		want   string // "" for no error
	}{
		{"all there", recs("0 0 k0 k0-000000", "1 0 k1 k1-000001", "-1 -1 k0 k0-000002"), stored, ""},
		{"unacknowledged extra is fine", recs("0 0 k0 k0-000000"), stored, ""},
		{"lost", recs("0 0 k0 k0-000000", "1 2 k1 k1-000005"), stored, "1 acknowledged records lost: k1/k1-000005"},
		{"duplicated", recs("0 0 k0 k0-000000"), append(recs("0 2 k0 k0-000000"), stored...), "1 records duplicated: k0-000000 (2 times)"},
		{"wrong place", recs("1 1 k0 k0-000000"), stored, "1 acknowledgements name another record's place"},
		{"key order", nil, recs("0 0 k0 k0-000002", "0 1 k0 k0-000000"), "1 records out of their key's order"},
	} {
		err := CheckProduced(c.acked, c.stored)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

func TestCheckConsumed(t *testing.T) {
	stored := recs("0 0 k0 a", "0 1 k0 b", "1 0 k1 c")
	for _, c := range []struct {
		name    string
		members [][]Record
		want    string
	}{
		{"split over two members", [][]Record{recs("0 0 k0 a", "0 1 k0 b"), recs("1 0 k1 c")}, ""},
		{"one missing", [][]Record{recs("0 0 k0 a", "1 0 k1 c")}, "1 of 3 stored records never handled: k0/b at 0:1"},
		{"twice by two members", [][]Record{recs("0 0 k0 a", "0 1 k0 b", "1 0 k1 c"), recs("0 1 k0 b")}, "1 records handled twice"},
		{"not stored", [][]Record{append(recs("0 0 k0 a", "0 1 k0 b", "1 0 k1 c"), recs("1 1 k1 d")...)}, "1 records handled that are not stored so"},
		{"backwards", [][]Record{recs("0 1 k0 b", "0 0 k0 a", "1 0 k1 c")}, "1 records handled out of offset order"},
	} {
		err := CheckConsumed(stored, c.members...)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
