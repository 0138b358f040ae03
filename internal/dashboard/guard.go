package dashboard

import (
	"crypto/rand"
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// The page's defences against other web sites (a page in the same browser
// must not drive the cluster):
//
//   - Host: every request must name the page's own address (hostGuard). A
//     page served from a rebinding domain (attacker.example resolving to
//     127.0.0.1) reaches this server with Host: attacker.example:PORT and is
//     refused, for every path, before anything is read or done.
//   - Token: an action needs the launch's random token (Server.Token), from
//     the URL that `cluster up` prints. GET with ?token=T sets it as an
//     HttpOnly, SameSite=Strict cookie (named after the port: cookies are
//     not kept apart by port) and redirects to the page without it;
//     the page's fetches then carry the cookie. A script sends it in the
//     X-Tapes-Token header instead.
//   - Origin and Content-Type (sameOrigin): an action is JSON and, when the
//     browser names the page it comes from, comes from this page.

// TokenParam is the query parameter of the page URL that carries the token.
const TokenParam = "token"

// TokenHeader is the request header a script puts the token in.
const TokenHeader = "X-Tapes-Token"

// newToken returns a fresh random token (128 bits).
func newToken() string { return rand.Text() }

// tokenCookie is the name of the cookie that carries the token of the page
// on port.
func tokenCookie(port string) string { return "tapes_token_" + port }

// PageURL is the address to open the page served on addr with token: an
// unspecified listen address (0.0.0.0, ::) is shown as 127.0.0.1.
func PageURL(addr net.Addr, token string) string {
	host := addr.String()
	if ta, ok := addr.(*net.TCPAddr); ok && (ta.IP == nil || ta.IP.IsUnspecified()) {
		host = net.JoinHostPort("127.0.0.1", strconv.Itoa(ta.Port))
	}
	return "http://" + host + "/?" + TokenParam + "=" + url.QueryEscape(token)
}

// hostGuard is the set of Host headers the page answers: one of the
// loopback names, the listener's own IP or the configured host name, with
// the listener's port (none for port 80); with a listener on every
// address, any IP literal (a rebinding attack needs a name it controls).
type hostGuard struct {
	port  string
	names map[string]bool // lower case, IPs in netip's canonical form
	anyIP bool
}

// newHostGuard returns the guard of a page listening on addr, also called
// by the host name extra ("" : none).
func newHostGuard(addr net.Addr, extra string) hostGuard {
	g := hostGuard{names: map[string]bool{"localhost": true, "127.0.0.1": true, "::1": true}}
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		host = addr.String()
	}
	g.port = port
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.IsUnspecified() {
			g.anyIP = true
		}
		g.names[ip.Unmap().String()] = true
	} else if host != "" {
		g.names[canonicalHost(host)] = true
	}
	if extra = strings.Trim(extra, "[]"); extra != "" {
		g.names[canonicalHost(extra)] = true
	}
	return g
}

// canonicalHost is a host name (or IP) in the form names holds.
func canonicalHost(h string) string {
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	if ip, err := netip.ParseAddr(h); err == nil {
		return ip.Unmap().String()
	}
	return h
}

// allows reports whether a request with this Host header is for the page.
func (g hostGuard) allows(hostHeader string) bool {
	host, port, err := net.SplitHostPort(hostHeader)
	if err != nil { // no port
		host, port = strings.Trim(hostHeader, "[]"), "80"
	}
	if host == "" || port != g.port {
		return false
	}
	host = canonicalHost(host)
	if g.names[host] {
		return true
	}
	_, err = netip.ParseAddr(host)
	return g.anyIP && err == nil
}

// expected names the addresses the guard accepts, for the refusal.
func (g hostGuard) expected() string {
	s := fmt.Sprintf("127.0.0.1:%s, localhost:%s or [::1]:%s", g.port, g.port, g.port)
	var more []string
	for n := range g.names {
		if n != "localhost" && n != "127.0.0.1" && n != "::1" {
			more = append(more, net.JoinHostPort(n, g.port))
		}
	}
	if len(more) > 0 {
		s += " or " + strings.Join(more, ", ")
	}
	if g.anyIP {
		s += " or any IP address of this machine"
	}
	return s
}

// guard refuses requests that do not name the page's address (403, with
// the reason, whatever the path), and turns a GET with the token in its
// query into the token cookie and a redirect to the page without it.
func (s *Server) guard(g hostGuard, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.allows(r.Host) {
			http.Error(w, fmt.Sprintf("Host %q is not the address of this live page (%s): refused, so that a web site whose name resolves here (DNS rebinding) cannot use the page",
				r.Host, g.expected()), http.StatusForbidden)
			return
		}
		q := r.URL.Query()
		if r.Method != http.MethodGet || !q.Has(TokenParam) {
			h.ServeHTTP(w, r)
			return
		}
		if !s.tokenIs(q.Get(TokenParam)) {
			http.Error(w, "wrong token: this is not the token of this launch; open the live page URL that `cluster up` printed last", http.StatusForbidden)
			return
		}
		http.SetCookie(w, &http.Cookie{Name: tokenCookie(g.port), Value: s.token, Path: "/",
			HttpOnly: true, SameSite: http.SameSiteStrictMode})
		w.Header().Set("Cache-Control", "no-store")
		http.Redirect(w, r, "/", http.StatusSeeOther) // the page, not a path of the request's choosing
	})
}

// tokenIs reports whether t is the launch's token (in constant time).
func (s *Server) tokenIs(t string) bool {
	return subtle.ConstantTimeCompare([]byte(t), []byte(s.token)) == 1
}

// authorized refuses an action without the launch's token (403): from the
// X-Tapes-Token header, else the token cookie of the page on port.
func (s *Server) authorized(r *http.Request, port string) error {
	t, from := r.Header.Get(TokenHeader), TokenHeader
	if t == "" {
		if c, err := r.Cookie(tokenCookie(port)); err == nil {
			t, from = c.Value, "the page's cookie"
		}
	}
	switch {
	case t == "":
		return httpErrorf(http.StatusForbidden, "no token: actions need the token of this launch; open the live page URL that `cluster up` printed (…/?%s=…)", TokenParam)
	case !s.tokenIs(t):
		return httpErrorf(http.StatusForbidden, "wrong token (from %s): not the token of this launch; open the live page URL that `cluster up` printed last", from)
	}
	return nil
}
