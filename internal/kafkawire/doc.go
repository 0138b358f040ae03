// Package kafkawire is Kafka's binary protocol as a front end: a TCP server
// that reads size-prefixed request frames, decodes request headers (v1, and
// v2 with tagged fields) and bodies through franz-go's kmsg, negotiates
// versions (ApiVersions, KIP-511), calls the handler registered for each API
// key and writes the responses back in request order. Record batches are
// internal/recordbatch's.
//
// The package knows nothing of partitions or groups: the broker registers one
// HandlerFunc per API key it serves (Server.Register), and ApiVersions
// advertises exactly those keys and version ranges. Everything not
// registered is absent from ApiVersions, so clients fall back, and a request
// for it closes the connection, as Apache Kafka does.
//
// Goroutines: Serve runs one accept loop per listener. Each connection has a
// request goroutine (reads frames, decodes them, calls handlers in request
// order) and a response goroutine (writes answers in request order). A
// handler's Later function runs on a goroutine of its own. See HandlerFunc.
package kafkawire
