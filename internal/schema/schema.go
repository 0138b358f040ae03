// Package schema owns the layouts of the record values producerd writes and
// consumerd reads, one per schema version (the schema_version header):
//
//   - version 1: the event id, then '.' up to the value size: one field,
//     id, and filler. A record without a schema_version header is read
//     as version 1 (the records written before the header existed, or by
//     another program), and any value is a version 1 value.
//   - version 2: a JSON object {"event_id":ID,"entity":KEY,"pad":"..."}:
//     v1's id is renamed event_id, entity (the logical key, which version
//     1 carries only in a header) is added, and pad fills the value up to
//     the value size.
//
// Encode is called by producerd for every record, Decode by consumerd for
// every record it processes; both are pure functions, safe from any
// goroutine. A version this program does not know, or a value that does
// not match its version, is an error naming the reason: consumerd sends
// such a record to its dead-letter topic with that reason.
package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Latest is the newest version this program writes and reads; Known lists
// every version Decode reads.
const Latest = 2

// Known are the versions Decode reads, oldest first.
var Known = []int{1, 2}

// Headers consumerd adds to a record it sends to its dead-letter topic,
// beside the record's own.
const (
	// DeadLetterReasonHeader says why the record was not processed (the
	// Decode error).
	DeadLetterReasonHeader = "dead_letter_reason"
	// DeadLetterSourceHeader is where it was read: TOPIC/PARTITION@OFFSET.
	DeadLetterSourceHeader = "dead_letter_source"
)

// Errors of Encode and Decode.
var (
	// ErrUnknownVersion: the schema_version is not one of Known (or not a
	// number).
	ErrUnknownVersion = errors.New("unknown schema version")
	// ErrMalformed: the value does not follow its version's layout.
	ErrMalformed = errors.New("value does not match its schema version")
)

// Order is what a record value holds, whatever its version.
type Order struct {
	// Version is the schema version the value was decoded with.
	Version int
	// EventID is the event id the value carries (version 1: id; version 2:
	// event_id).
	EventID string
	// Entity is the logical key the value carries: "" in version 1.
	Entity string
}

// v2 is version 2's JSON object.
type v2 struct {
	EventID string `json:"event_id"`
	Entity  string `json:"entity"`
	Pad     string `json:"pad"`
}

// Encode returns the value of version for o, padded up to size bytes (a
// value may be longer than size when its fields need it; version 1 is
// then cut to size, as producerd always did). Version 1 ignores o.Entity.
func Encode(version int, o Order, size int) ([]byte, error) {
	switch version {
	case 1:
		v := bytes.Repeat([]byte{'.'}, size)
		copy(v, o.EventID)
		return v, nil
	case 2:
		b, err := json.Marshal(v2{EventID: o.EventID, Entity: o.Entity})
		if err != nil {
			return nil, err
		}
		if pad := size - len(b); pad > 0 {
			b, err = json.Marshal(v2{EventID: o.EventID, Entity: o.Entity, Pad: strings.Repeat(".", pad)})
			if err != nil {
				return nil, err
			}
		}
		return b, nil
	}
	return nil, fmt.Errorf("%w: %d (this program writes %s)", ErrUnknownVersion, version, knownList())
}

// Decode reads value as the version header says ("" is version 1).
func Decode(header string, value []byte) (Order, error) {
	version := 1
	if header != "" {
		n, err := strconv.Atoi(header)
		if err != nil {
			return Order{}, fmt.Errorf("%w: schema_version %q is not a number (this consumer reads %s)", ErrUnknownVersion, header, knownList())
		}
		version = n
	}
	switch version {
	case 1:
		// Any bytes are a version 1 value (records written by other
		// programs, without the header, included); the id may be empty.
		return Order{Version: 1, EventID: strings.TrimRight(string(value), ".")}, nil
	case 2:
		var v v2
		dec := json.NewDecoder(bytes.NewReader(value))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&v); err != nil {
			return Order{}, fmt.Errorf("%w: version 2 value %q: %v", ErrMalformed, clip(value), err)
		}
		if v.EventID == "" {
			return Order{}, fmt.Errorf("%w: version 2 value %q has no event_id", ErrMalformed, clip(value))
		}
		return Order{Version: 2, EventID: v.EventID, Entity: v.Entity}, nil
	}
	return Order{}, fmt.Errorf("%w: schema_version %d (this consumer reads %s)", ErrUnknownVersion, version, knownList())
}

func knownList() string {
	s := make([]string, len(Known))
	for i, v := range Known {
		s[i] = strconv.Itoa(v)
	}
	return "versions " + strings.Join(s, " and ")
}

// clip is the start of a value, for error messages.
func clip(v []byte) string {
	if len(v) > 40 {
		return string(v[:40]) + "..."
	}
	return string(v)
}
