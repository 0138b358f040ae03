package kafkawire

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// FuzzRequestDecode drives the server's request decoder with any frame. It
// must not panic; a frame it accepts is of the key its header names, and its
// body encodes back to the bytes sent (decodeBody's check, so a request the
// server hands a handler is exactly what the client wrote); a frame it
// refuses is refused with one of the sentinel errors the server closes
// connections on. The seed corpus (testdata/fuzz/FuzzRequestDecode) holds
// requests of the APIs tapes plans to serve, as kmsg encodes them, and the
// bad frames of TestBadInputClosesOnlyItsConnection; plain go test runs it.
func FuzzRequestDecode(f *testing.F) {
	f.Fuzz(func(t *testing.T, frame []byte) {
		h, req, err := DecodeRequest(frame)
		if err != nil {
			if !errors.Is(err, ErrMalformedRequest) && !errors.Is(err, ErrUnknownAPIKey) && !errors.Is(err, ErrUnsupportedVersion) {
				t.Fatalf("error outside the sentinels: %v", err)
			}
			return
		}
		if req.Key() != h.Key || req.GetVersion() != h.Version {
			t.Fatalf("header %+v decoded as %s v%d", h, kmsg.NameForKey(req.Key()), req.GetVersion())
		}
		// Decoding the re-encoded body gives the same bytes again.
		body := req.AppendTo(nil)
		again := kmsg.RequestForKey(h.Key)
		again.SetVersion(h.Version)
		if err := again.ReadFrom(body); err != nil {
			t.Fatalf("re-encoded %s v%d does not decode: %v", kmsg.NameForKey(h.Key), h.Version, err)
		}
		if string(again.AppendTo(nil)) != string(body) {
			t.Fatalf("%s v%d does not round-trip", kmsg.NameForKey(h.Key), h.Version)
		}
	})
}
