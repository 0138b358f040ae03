package kafkawire

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Header is a request header (v1, or v2 with tagged fields: kmsg's
// IsFlexible of the request's key and version decides which).
type Header struct {
	Key           int16
	Version       int16
	CorrelationID int32
	ClientID      string // a null client id reads as "", as in Kafka
}

// headerSize is the smallest frame: key, version, correlation id.
const headerSize = 8

// decodeHeader reads the header of a frame's body (the frame without its size
// prefix) and returns the request of its key, versioned, and the body bytes
// after the header. An API key kmsg does not know gives ErrUnknownAPIKey with
// the header read so far (the connection is closed either way). Called on a
// connection's request goroutine.
func decodeHeader(frame []byte) (Header, kmsg.Request, []byte, error) {
	if len(frame) < headerSize {
		return Header{}, nil, nil, fmt.Errorf("%w: %d-byte frame, shorter than a request header", ErrMalformedRequest, len(frame))
	}
	r := kbin.Reader{Src: frame}
	h := Header{Key: r.Int16(), Version: r.Int16(), CorrelationID: r.Int32()}
	req := kmsg.RequestForKey(h.Key)
	if req == nil {
		return h, nil, nil, fmt.Errorf("%w: %d", ErrUnknownAPIKey, h.Key)
	}
	if h.Version < 0 {
		return h, nil, nil, fmt.Errorf("%w: %s version %d", ErrUnsupportedVersion, kmsg.NameForKey(h.Key), h.Version)
	}
	req.SetVersion(h.Version)
	// Header v1 and v2 both carry the client id as a plain nullable string
	// (never compact, so that a first ApiVersions is readable by any broker).
	if id := r.NullableString(); id != nil {
		h.ClientID = *id
	}
	if req.IsFlexible() {
		kmsg.SkipTags(&r)
	}
	if err := r.Complete(); err != nil {
		return h, nil, nil, fmt.Errorf("%w: %s v%d header: %v", ErrMalformedRequest, kmsg.NameForKey(h.Key), h.Version, err)
	}
	return h, req, r.Src, nil
}

// decodeBody decodes body into req (versioned by decodeHeader) and checks
// that it encodes back to the same bytes. kmsg reads a negative length of a
// non-nullable array or string as empty, and any negative length of a
// nullable one as null, where Kafka refuses the request; re-encoding finds
// both, and trailing bytes too. Called on a connection's request goroutine.
func decodeBody(h Header, req kmsg.Request, body []byte) error {
	if err := req.ReadFrom(body); err != nil {
		return fmt.Errorf("%w: %s v%d: %v", ErrMalformedRequest, kmsg.NameForKey(h.Key), h.Version, err)
	}
	bp := reencodeBufs.Get().(*[]byte)
	again := req.AppendTo((*bp)[:0])
	defer func() {
		if cap(again) <= maxPooledReencode {
			*bp = again
			reencodeBufs.Put(bp)
		}
	}()
	if !bytes.Equal(again, body) {
		at := 0
		for at < len(again) && at < len(body) && again[at] == body[at] {
			at++
		}
		return fmt.Errorf("%w: %s v%d: %d-byte body does not encode back to itself (it differs from byte %d: a negative length, a length below -1 or trailing bytes)",
			ErrMalformedRequest, kmsg.NameForKey(h.Key), h.Version, len(body), at)
	}
	return nil
}

// reencodeBufs holds the buffers decodeBody encodes into, so that checking
// a large Produce allocates nothing.
var reencodeBufs = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledReencode: larger buffers are left to the GC rather than kept.
const maxPooledReencode = 8 << 20

// DecodeRequest decodes one request frame (without its 4-byte size prefix):
// header, then body as decodeBody checks it. It is the decoder the server
// uses, whole, apart from the registry's version check; the fuzz target
// drives it. Safe for concurrent use.
func DecodeRequest(frame []byte) (Header, kmsg.Request, error) {
	h, req, body, err := decodeHeader(frame)
	if err != nil {
		return h, nil, err
	}
	if h.Version > req.MaxVersion() {
		return h, nil, fmt.Errorf("%w: %s version %d, kmsg knows up to %d", ErrUnsupportedVersion, kmsg.NameForKey(h.Key), h.Version, req.MaxVersion())
	}
	if err := decodeBody(h, req, body); err != nil {
		return h, nil, err
	}
	return h, req, nil
}
