package kafkawire

import (
	"context"
	"regexp"

	fkerr "github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ApiVersions (key 18), served by the server itself at v0-v4 (Kafka 4.x's
// range; v5 adds fields for brokers talking to controllers).
//
//   - v0-v4: the registered keys and their ranges, exactly, by key.
//   - v1+: throttle time (always 0).
//   - v3+ (KIP-511): flexible request, client software name and version,
//     recorded on the connection (ConnInfo.ClientSoftware); names that break
//     Kafka's pattern get INVALID_REQUEST, as Kafka answers. The response
//     header stays v0 at every version.
//   - A version above v4: UNSUPPORTED_VERSION in a v0 body that lists
//     ApiVersions' own range only, so the client retries at a version both
//     sides know (see conn.dispatch: the body is not decoded).
const (
	apiVersionsKey        = 18
	apiVersionsMaxVersion = 4
)

// clientSoftwarePattern is Kafka's rule for KIP-511 names and versions.
var clientSoftwarePattern = regexp.MustCompile(`^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$`)

func (s *Server) registerAPIVersions() {
	s.Register(apiVersionsKey, 0, apiVersionsMaxVersion, s.handleAPIVersions)
}

func (s *Server) handleAPIVersions(_ context.Context, r *Request) Reply {
	req := r.Msg.(*kmsg.ApiVersionsRequest)
	resp := req.ResponseKind().(*kmsg.ApiVersionsResponse)
	if req.Version >= 3 {
		if !clientSoftwarePattern.MatchString(req.ClientSoftwareName) || !clientSoftwarePattern.MatchString(req.ClientSoftwareVersion) {
			resp.ErrorCode = fkerr.InvalidRequest.Code
			return Respond(resp)
		}
		r.Conn.software.Store(&[2]string{req.ClientSoftwareName, req.ClientSoftwareVersion})
	}
	resp.ApiKeys = s.advertised()
	return Respond(resp)
}

// unsupportedAPIVersions is the v0 answer to an ApiVersions newer than a.
func (s *Server) unsupportedAPIVersions(a api) kmsg.Response {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = 0
	resp.ErrorCode = fkerr.UnsupportedVersion.Code
	k := kmsg.NewApiVersionsResponseApiKey()
	k.ApiKey, k.MinVersion, k.MaxVersion = a.key, a.min, a.max
	resp.ApiKeys = []kmsg.ApiVersionsResponseApiKey{k}
	return resp
}
