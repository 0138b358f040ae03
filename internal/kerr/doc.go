// Package kerr owns tapes' error vocabulary: Kafka's error names as a Go type,
// and their round trip through gRPC (a google.rpc.Status carrying one
// tapes.v1.ErrorDetail). Brokers return *Error from handlers and convert with
// ToStatus; clients convert with FromStatus and match with Is or CodeOf, never
// on message text.
package kerr
