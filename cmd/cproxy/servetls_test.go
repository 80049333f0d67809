package main

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/cproxy/cproxy/config"
	"github.com/cproxy/cproxy/internal/localca"
	"github.com/cproxy/cproxy/secrets"
)

// The TLS proxy listener speaks TLS 1.2 and later only, with a certificate
// from the local CA for the loopback names and listen.public_url's host,
// and HTTP/2 to a client that offers it, HTTP/1.1 to one that does not.
func TestProxyTLSListener(t *testing.T) {
	cfg := config.Default()
	cfg.Listen.ProxyTLS = "127.0.0.1:0"
	cfg.Listen.PublicURL = "https://cproxy.internal:8443"
	cfg.Listen.CADir = filepath.Join(t.TempDir(), "ca")
	p, err := listenProxyTLS(cfg, new(secrets.Loader), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	addr := p.addr
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Proto) })}
	go hs.Serve(tls.NewListener(p.ln, p.config))
	t.Cleanup(func() { hs.Close() })

	ca, err := localca.Load(cfg.Listen.CADir)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate())
	for _, name := range []string{"127.0.0.1", "localhost", "cproxy.internal"} {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: name})
		if err != nil {
			t.Errorf("TLS to %s: %v", name, err)
			continue
		}
		if v := conn.ConnectionState().Version; v < tls.VersionTLS12 {
			t.Errorf("TLS to %s: version %x", name, v)
		}
		conn.Close()
	}
	if conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: "other.example"}); err == nil {
		conn.Close()
		t.Error("the certificate is good for a name it was not made for")
	}
	if conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}); err == nil {
		conn.Close()
		t.Error("TLS 1.1 was accepted")
	}

	for _, h2 := range []bool{true, false} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: h2}
		resp, err := (&http.Client{Transport: tr}).Get("https://" + addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		tr.CloseIdleConnections()
		if want := map[bool]string{true: "HTTP/2.0", false: "HTTP/1.1"}[h2]; string(body) != want {
			t.Errorf("a client that offers HTTP/2: %t; the server saw %s, want %s", h2, body, want)
		}
	}
}
