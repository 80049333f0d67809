package main

import (
	"crypto/tls"
	stdlog "log"
	"log/slog"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cproxy/cproxy/config"
	"github.com/cproxy/cproxy/internal/localca"
	"github.com/cproxy/cproxy/secrets"
)

// proxyTLS is the TLS proxy listener: plain TCP, and the tls.Config serve
// wraps it in after counting its connections. Reload (nil with the local
// CA, whose certificates renew themselves) rereads listen.tls_cert and
// listen.tls_key, on SIGHUP.
type proxyTLS struct {
	ln     net.Listener
	addr   string
	config *tls.Config
	Reload func()
}

// listenProxyTLS opens the TLS proxy listener listen.proxy_tls, or returns
// nil when none is configured. Its certificate is listen.tls_cert's and
// listen.tls_key's, or one the local CA in listen.ca_dir signs (creating
// the CA the first time).
func listenProxyTLS(cfg *config.Config, loader *secrets.Loader, log *slog.Logger) (*proxyTLS, error) {
	l := cfg.Listen
	if l.ProxyTLS == "" {
		return nil, nil
	}
	p := &proxyTLS{}
	var err error
	// HTTP/2 first: go, gh and curl's git multiplex their requests over one
	// connection and one handshake, where HTTP/1.1 makes a handshake for
	// each connection past the few they keep idle.
	p.config = &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	var ca *localca.CA
	if l.LocalCA() {
		if ca, err = localca.LoadOrCreate(l.CADir, time.Now()); err != nil {
			return nil, fail("point listen.ca_dir at a folder of cproxy's own, or remove the broken CA there to have a new one made (sandboxes must then trust the new one: cproxy ca prints it)",
				"%s", cfg.ProblemAt("listen.ca_dir", "local CA: %v", err))
		}
	} else {
		cert, err := loadKeyPair(cfg, loader)
		if err != nil {
			return nil, err
		}
		var current atomic.Pointer[tls.Certificate]
		current.Store(&cert)
		p.config.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return current.Load(), nil }
		p.Reload = func() {
			cert, err := loadKeyPair(cfg, loader)
			if err != nil {
				log.Error("TLS certificate reload failed; the previous certificate stays in force", "err", err)
				return
			}
			current.Store(&cert)
			log.Info("TLS certificate reloaded", "tls_cert", l.TLSCert, "not_after", cert.Leaf.NotAfter)
		}
	}
	if p.ln, err = net.Listen("tcp", l.ProxyTLS); err != nil {
		return nil, fail("choose a free address with --proxy-tls-addr or listen.proxy_tls (port 0 picks one)", "TLS proxy listener: %v", err)
	}
	p.addr = p.ln.Addr().String()
	if ca != nil {
		names := certNames(cfg, p.ln.Addr())
		p.config.GetCertificate = (&localca.Issuer{CA: ca, Names: names}).Certificate
		log.Info("TLS proxy listener: certificates from the local CA", "ca", ca.String(), "ca_dir", l.CADir, "names", strings.Join(names, ","))
	}
	return p, nil
}

// loadKeyPair loads listen.tls_cert and listen.tls_key from their sources.
// The certificate is public, so a file: certificate may be readable by
// others (as certbot's fullchain.pem is); the key's file may not. A key
// that does not parse is reported without the parser's words, which could
// quote it.
func loadKeyPair(cfg *config.Config, loader *secrets.Loader) (tls.Certificate, error) {
	var certPEM []byte
	var err error
	if path, ok := strings.CutPrefix(cfg.Listen.TLSCert, "file:"); ok {
		certPEM, err = os.ReadFile(path)
	} else {
		var c secrets.Secret
		c, err = loader.LoadPEM(secrets.Source(cfg.Listen.TLSCert))
		certPEM = []byte(c.Reveal())
	}
	if err != nil {
		return tls.Certificate{}, credentialError(cfg, "listen.tls_cert", cfg.Listen.TLSCert, err)
	}
	keyPEM, err := loader.LoadPEM(secrets.Source(cfg.Listen.TLSKey))
	if err != nil {
		return tls.Certificate{}, credentialError(cfg, "listen.tls_key", cfg.Listen.TLSKey, err)
	}
	cert, err := tls.X509KeyPair(certPEM, []byte(keyPEM.Reveal()))
	if err != nil {
		return tls.Certificate{}, &userError{code: 1,
			msg:  cfg.ProblemAt("listen.tls_cert", "with listen.tls_key: not a PEM certificate chain and its private key").String(),
			hint: "point listen.tls_cert at the PEM certificate (the server's first, then any intermediates) and listen.tls_key at its PEM private key"}
	}
	return cert, nil
}

// certNames are the names the local CA's server certificate is for: the
// host of listen.public_url, localhost and the loopback addresses, and the
// listener's own address, or every address of this machine when it listens
// on all of them.
func certNames(cfg *config.Config, addr net.Addr) []string {
	var names []string
	add := func(n string) {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	if u, err := url.Parse(cfg.Listen.PublicURL); err == nil && u.Hostname() != "" {
		add(u.Hostname())
	}
	for _, n := range []string{"localhost", "127.0.0.1", "::1"} {
		add(n)
	}
	if a, ok := addr.(*net.TCPAddr); ok {
		if !a.IP.IsUnspecified() {
			add(a.IP.String())
		} else if addrs, err := net.InterfaceAddrs(); err == nil {
			for _, ia := range addrs {
				if n, ok := ia.(*net.IPNet); ok {
					add(n.IP.String())
				}
			}
		}
	}
	return names
}

// tlsErrorLog is the TLS proxy server's error log. A failed handshake is
// the client's doing, most often a sandbox that does not trust the
// certificate: logged at info, with the fix when it is that; anything else
// at warn, as the other servers' errors are.
func tlsErrorLog(log *slog.Logger) *stdlog.Logger { return stdlog.New(handshakeLog{log}, "", 0) }

type handshakeLog struct{ log *slog.Logger }

func (h handshakeLog) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	rest, ok := strings.CutPrefix(msg, "http: TLS handshake error from ")
	if !ok {
		h.log.Warn(msg)
		return len(p), nil
	}
	from, reason, _ := strings.Cut(rest, ": ")
	args := []any{"from", from, "err", reason}
	if strings.Contains(reason, "certificate") {
		args = append(args, "hint", "the client does not trust the TLS listener's certificate: give it cproxy's CA (cproxy ca prints it; see docs/harness.md)")
	}
	h.log.Info("TLS handshake failed", args...)
	return len(p), nil
}
