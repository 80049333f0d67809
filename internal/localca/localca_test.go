package localca

import (
	"bytes"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCreatedOnceWithPrivateKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ca, err := LoadOrCreate(dir, now)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]os.FileMode{dir: 0o700, filepath.Join(dir, KeyFile): 0o600, filepath.Join(dir, CertFile): 0o644} {
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %04o, want %04o", name, got, want)
		}
	}
	if c := ca.Certificate(); !c.IsCA || !c.NotAfter.Equal(now.Add(CALifetime).Truncate(time.Second)) {
		t.Errorf("CA: IsCA %v, NotAfter %v; want a CA until %v", c.IsCA, c.NotAfter, now.Add(CALifetime))
	}
	if bytes.Contains(ca.CertPEM(), []byte("PRIVATE")) || strings.Contains(ca.String(), "PRIVATE") {
		t.Error("the CA's public faces show its key")
	}

	// A restart, years later, loads the same CA: sandboxes that trust it
	// keep trusting cproxy.
	again, err := LoadOrCreate(dir, now.Add(3*365*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.CertPEM(), ca.CertPEM()) {
		t.Error("a second start made a new CA instead of loading the one in its folder")
	}
}

func TestKeyOthersCanReadIsRefused(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadOrCreate(dir, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, KeyFile), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadOrCreate(dir, time.Now())
	if err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("a CA key of mode 0644 loaded: %v", err)
	}
}

func TestLeafRenewedBeforeExpiry(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ca, err := LoadOrCreate(t.TempDir(), start)
	if err != nil {
		t.Fatal(err)
	}
	now := start
	is := &Issuer{CA: ca, Names: []string{"cproxy.internal", "localhost", "127.0.0.1"}, Now: func() time.Time { return now }}
	first, err := is.Certificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate())
	for _, name := range is.Names {
		if _, err := first.Leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, CurrentTime: now}); err != nil {
			t.Errorf("the leaf does not verify for %s: %v", name, err)
		}
	}
	if got := first.Leaf.NotAfter.Sub(start); got != LeafLifetime {
		t.Errorf("leaf lifetime %v, want %v", got, LeafLifetime)
	}

	// With more than a third of its life left, the same certificate.
	now = start.Add(LeafLifetime - LeafRenewAt - time.Minute)
	if c, _ := is.Certificate(nil); c != first {
		t.Error("a leaf with more than a third of its life left was replaced")
	}
	// Under a third left: a new one, good for another LeafLifetime.
	now = start.Add(LeafLifetime - LeafRenewAt + time.Minute)
	renewed, err := is.Certificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	if renewed == first || renewed.Leaf.SerialNumber.Cmp(first.Leaf.SerialNumber) == 0 {
		t.Fatal("a leaf with under a third of its life left was not replaced")
	}
	if !renewed.Leaf.NotAfter.Equal(now.Add(LeafLifetime)) {
		t.Errorf("renewed leaf ends %v, want %v", renewed.Leaf.NotAfter, now.Add(LeafLifetime))
	}
	if _, err := renewed.Leaf.Verify(x509.VerifyOptions{DNSName: "cproxy.internal", Roots: roots, CurrentTime: start.Add(LeafLifetime + time.Hour)}); err != nil {
		t.Errorf("the renewed leaf does not verify after the first one expired: %v", err)
	}
}

// Several cproxy processes starting at once on one folder end up with one
// CA between them.
func TestCreatedOnceByConcurrentStarts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	pems := make(chan []byte, 8)
	for range cap(pems) {
		go func() {
			ca, err := LoadOrCreate(dir, time.Now())
			if err != nil {
				t.Error(err)
				pems <- nil
				return
			}
			pems <- ca.CertPEM()
		}()
	}
	first := <-pems
	for range cap(pems) - 1 {
		if p := <-pems; !bytes.Equal(p, first) {
			t.Fatal("concurrent starts made more than one CA")
		}
	}
	if first == nil {
		t.Fatal("no CA")
	}
}
