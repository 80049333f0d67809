// Package localca is the certificate authority cproxy makes for its TLS
// proxy listener when the config names no certificate: a CA created once in
// a folder of cproxy's state (its key mode 0600, the folder 0700), and server
// certificates it signs in memory for the names the sandboxes dial, renewed
// before they expire. Sandboxes trust the CA's certificate (CertFile), which
// is public; the key never leaves its file and is never logged.
package localca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Lifetimes. The CA lives long, since every sandbox image that trusts it
// would have to be rebuilt with a new one; a server certificate lives a
// month and is replaced once less than a third of that is left, so a
// cproxy that runs for weeks never serves an expired one.
const (
	CALifetime   = 10 * 365 * 24 * time.Hour
	LeafLifetime = 30 * 24 * time.Hour
	LeafRenewAt  = LeafLifetime / 3 // renewed when less than this is left
	// backdate is how far before now a certificate starts, for sandboxes
	// whose clock is a little behind cproxy's.
	backdate = time.Hour
)

// The CA's files in its folder.
const (
	CertFile = "ca.pem"     // the CA certificate, PEM: public, for sandboxes to trust
	KeyFile  = "ca-key.pem" // its private key, PEM, mode 0600
)

// CA is a loaded local certificate authority.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

// String names the CA without its key.
func (ca *CA) String() string { return ca.cert.Subject.CommonName }

// CertPEM is the CA certificate, PEM-encoded: what a sandbox installs.
func (ca *CA) CertPEM() []byte { return ca.pem }

// Certificate is the CA certificate.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// LoadOrCreate loads the CA in dir, or creates it there (dir mode 0700, the
// key 0600) when dir holds none, as of now. Several cproxy processes may
// start at once on one folder: one creates the CA, the others load it.
func LoadOrCreate(dir string, now time.Time) (*CA, error) {
	ca, err := Load(dir)
	if !errors.Is(err, fs.ErrNotExist) {
		return ca, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := create(dir, now); err != nil {
		return nil, err
	}
	return Load(dir)
}

// Load loads the CA in dir; an error wrapping fs.ErrNotExist when there is
// none yet. A key file others may read is refused.
func Load(dir string) (*CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CertFile))
	if err != nil {
		return nil, err
	}
	keyPath := filepath.Join(dir, KeyFile)
	fi, err := os.Stat(keyPath)
	if err != nil {
		return nil, fmt.Errorf("%s has no key beside it: %w", filepath.Join(dir, CertFile), err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s: mode %04o lets others read the local CA's key (chmod 600 it)", keyPath, fi.Mode().Perm())
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, err
	}
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s: not a PEM certificate", filepath.Join(dir, CertFile))
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, CertFile), err)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		// No detail: the parser's words could quote the key.
		return nil, fmt.Errorf("%s: not a PEM private key", keyPath)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil || !key.PublicKey.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("%s: not the private key of %s", keyPath, CertFile)
	}
	return &CA{cert: cert, key: key, pem: certPEM}, nil
}

// create writes a new CA into dir. The key is linked into place first and
// the certificate last, so a CA whose certificate exists is whole; a
// process that loses the race to link the key leaves the winner's.
func create(dir string, now time.Time) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "cproxy local CA " + host, Organization: []string{"cproxy"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(CALifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := linkNew(filepath.Join(dir, KeyFile), keyPEM, 0o600); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return waitForCert(dir)
		}
		return err
	}
	return linkNew(filepath.Join(dir, CertFile), certPEM, 0o644)
}

// waitForCert waits, a few seconds at most, for the process that linked
// the key to link its certificate.
func waitForCert(dir string) error {
	for range 50 {
		if _, err := os.Stat(filepath.Join(dir, CertFile)); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s has a key but no %s (a cproxy stopped while creating the CA: remove the folder and start again)", dir, CertFile)
}

// linkNew writes data to path with mode, failing with fs.ErrExist if path
// exists, and never leaving half a file there.
func linkNew(path string, data []byte, mode fs.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".new-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Link(tmp.Name(), path)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}

// Issue signs a server certificate for names (host names and IP
// addresses) valid from now for LeafLifetime, with a key of its own.
func (ca *CA) Issue(names []string, now time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "cproxy"},
		NotBefore:    now.Add(-backdate),
		NotAfter:     now.Add(LeafLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if len(names) > 0 {
		tmpl.Subject.CommonName = names[0]
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// Issuer hands out the server certificate for a TLS listener, issuing a
// new one when less than LeafRenewAt of the current one is left.
type Issuer struct {
	CA    *CA
	Names []string         // what the certificate names: host names and IP addresses
	Now   func() time.Time // the clock; nil is time.Now

	mu   sync.Mutex
	leaf *tls.Certificate
}

// Certificate is the certificate to serve now, renewed if due. It fits
// tls.Config.GetCertificate.
func (is *Issuer) Certificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	now := time.Now()
	if is.Now != nil {
		now = is.Now()
	}
	is.mu.Lock()
	defer is.mu.Unlock()
	if is.leaf == nil || is.leaf.Leaf.NotAfter.Sub(now) < LeafRenewAt {
		leaf, err := is.CA.Issue(is.Names, now)
		if err != nil {
			return nil, err
		}
		is.leaf = leaf
	}
	return is.leaf, nil
}
