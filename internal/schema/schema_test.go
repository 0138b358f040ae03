package schema

import (
	"errors"
	"testing"
)

func TestEncodeDecodeEveryKnownVersion(t *testing.T) {
	o := Order{EventID: "p-1a2b-7", Entity: "key-3"}
	for _, v := range Known {
		for _, size := range []int{0, 10, 100} {
			b, err := Encode(v, o, size)
			if err != nil {
				t.Fatal(err)
			}
			if size >= 80 && len(b) != size {
				t.Errorf("version %d, size %d: value of %d bytes", v, size, len(b))
			}
			got, err := Decode(string(rune('0'+v)), b)
			if err != nil {
				t.Fatalf("version %d, size %d: %v", v, size, err)
			}
			want := Order{Version: v, EventID: o.EventID}
			if v == 2 {
				want.Entity = o.Entity
			}
			if size == 0 && v == 1 {
				want.EventID = "" // cut to the value size, as always
			}
			if got != want {
				t.Errorf("version %d, size %d: decoded %+v, want %+v", v, size, got, want)
			}
		}
	}
}

func TestDecodeVersion1WithoutHeader(t *testing.T) {
	for value, id := range map[string]string{"p-1-3.....": "p-1-3", "hello": "hello", "": "", "...": ""} {
		got, err := Decode("", []byte(value))
		if err != nil || got != (Order{Version: 1, EventID: id}) {
			t.Errorf("Decode(no header, %q) = %+v, %v; want version 1, id %q", value, got, err, id)
		}
	}
}

func TestDecodeRefusesWithAReason(t *testing.T) {
	for _, c := range []struct {
		header, value string
		want          error
	}{
		{"3", `{"event_id":"x"}`, ErrUnknownVersion},
		{"two", "x", ErrUnknownVersion},
		{"0", "x", ErrUnknownVersion},
		{"2", "x.....", ErrMalformed},
		{"2", `{"id":"x"}`, ErrMalformed},     // v1's field name in a v2 value
		{"2", `{"entity":"k"}`, ErrMalformed}, // no event_id
	} {
		_, err := Decode(c.header, []byte(c.value))
		if !errors.Is(err, c.want) {
			t.Errorf("Decode(%q, %q) = %v, want %v", c.header, c.value, err, c.want)
		}
	}
	if _, err := Encode(3, Order{EventID: "x"}, 10); !errors.Is(err, ErrUnknownVersion) {
		t.Errorf("Encode(3) = %v, want ErrUnknownVersion", err)
	}
}
