package main

import (
	"maps"
	"slices"
	"strconv"
	"testing"

	"github.com/tapes-dev/tapes/internal/partitioner"
	"github.com/tapes-dev/tapes/internal/producer"
)

// hotRecords makes n records of a run whose every record is the hot key's,
// salted over salts suffixes, with the generator of seed.
func hotRecords(t *testing.T, salts int, seed uint64, n int) []*producer.Record {
	t.Helper()
	d := &daemon{o: &daemonOpts{keys: "on", keySpace: 10, hotShare: 1, saltHotKey: salts, valueSize: 8}, idPrefix: "p-1-"}
	rng := newRecordRand(seed)
	out := make([]*producer.Record, n)
	for i := range out {
		out[i] = d.record(int64(i), rng)
	}
	return out
}

func header(r *producer.Record, name string) string {
	for _, h := range r.Headers {
		if h.Key == name {
			return string(h.Value)
		}
	}
	return ""
}

func TestSaltedHotKeyReachesThePartitionsOfItsSuffixes(t *testing.T) {
	const partitions = 6
	// Murmur2 of key-0#0 ... key-0#5 over 6 partitions: suffixes can
	// collide, so 6 suffixes reach 4 partitions here.
	pinned := map[int][]int32{1: {1}, 3: {1, 2, 4}, 6: {0, 1, 2, 4}}
	for _, salts := range []int{1, 3, 6} {
		recs := hotRecords(t, salts, 42, 600)
		// The partitions the N suffixes hash to, and those the records reach.
		want := map[int32]bool{}
		for s := range salts {
			want[partitioner.ForKey([]byte("key-0#"+strconv.Itoa(s)), partitions)] = true
		}
		got := map[int32]bool{}
		saltsSeen := map[string]bool{}
		for i, r := range recs {
			salt := header(r, producer.SaltHeader)
			if string(r.Key) != "key-0#"+salt || header(r, producer.EntityHeader) != "key-0" {
				t.Fatalf("N=%d record %d: key %q, salt %q, entity %q", salts, i, r.Key, salt, header(r, producer.EntityHeader))
			}
			if seq := header(r, producer.KeySeqHeader); seq != strconv.Itoa(i) {
				t.Fatalf("N=%d record %d: key_seq %q, want %d", salts, i, seq, i)
			}
			saltsSeen[salt] = true
			got[partitioner.ForKey(r.Key, partitions)] = true
		}
		if len(saltsSeen) != salts {
			t.Errorf("N=%d: 600 records used %d suffixes %v", salts, len(saltsSeen), slices.Sorted(maps.Keys(saltsSeen)))
		}
		if !maps.Equal(got, want) {
			t.Errorf("N=%d: the hot key reached partitions %v, want those of its suffixes %v", salts, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
		}
		if p := slices.Sorted(maps.Keys(got)); !slices.Equal(p, pinned[salts]) {
			t.Errorf("N=%d: the hot key reaches partitions %v of %d, want %v", salts, p, partitions, pinned[salts])
		}
		switch {
		case salts == 1 && len(got) != 1:
			t.Errorf("N=1: %d partitions, want 1", len(got))
		case salts > 1 && len(got) < 2:
			t.Errorf("N=%d: the hot key stays on %v, not spread", salts, slices.Sorted(maps.Keys(got)))
		}
	}
}

func TestSaltsAreDeterministicBySeed(t *testing.T) {
	salts := func(seed uint64) []string {
		var out []string
		for _, r := range hotRecords(t, 6, seed, 200) {
			out = append(out, header(r, producer.SaltHeader))
		}
		return out
	}
	a, b, c := salts(7), salts(7), salts(8)
	if !slices.Equal(a, b) {
		t.Errorf("seed 7 twice: different salts\n%v\n%v", a, b)
	}
	if slices.Equal(a, c) {
		t.Errorf("seeds 7 and 8 made the same 200 salts")
	}
}

func TestUnsaltedKeysAreUnchanged(t *testing.T) {
	d := &daemon{o: &daemonOpts{keys: "on", keySpace: 10, hotShare: 0.5, saltHotKey: 3, valueSize: 8}, idPrefix: "p-1-"}
	rng := newRecordRand(3)
	cold := 0
	for i := range 200 {
		r := d.record(int64(i), rng)
		entity := header(r, producer.EntityHeader)
		if entity == "key-0" {
			continue
		}
		cold++
		if string(r.Key) != entity || header(r, producer.SaltHeader) != "" || header(r, producer.KeySeqHeader) != "" {
			t.Fatalf("record %d of %s: key %q, salt %q, key_seq %q; want the entity, no salt", i, entity, r.Key, header(r, producer.SaltHeader), header(r, producer.KeySeqHeader))
		}
	}
	if cold == 0 {
		t.Fatal("no record of another key than the hot one")
	}
}
