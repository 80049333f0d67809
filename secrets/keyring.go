package secrets

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/99designs/keyring"

	"github.com/cproxy/cproxy/secrets/internal/nodbuslaunch"
)

func init() {
	// The keyring's package init has run by now (this package imports it):
	// give DBUS_SESSION_BUS_ADDRESS back to the commands cproxy starts.
	nodbuslaunch.Restore()
}

// Keyring backends, as the config's keyring.backend names them.
const (
	BackendAuto          = "auto"
	BackendKeychain      = "keychain"
	BackendSecretService = "secret-service"
	BackendKWallet       = "kwallet"
	BackendPass          = "pass"
	BackendFile          = "file"
)

// autoOrder is what BackendAuto tries, first to last: the OS's own keyring,
// then pass, then the encrypted files, which always work. The kernel keyring
// (keyctl) is left out: it forgets everything at reboot.
var autoOrder = []string{BackendKeychain, BackendSecretService, BackendKWallet, BackendPass, BackendFile}

// PassphraseEnv is the environment variable the file backend takes its
// passphrase from.
const PassphraseEnv = "CPROXY_KEYRING_PASSWORD"

// DefaultService is the keyring service name when none is configured.
const DefaultService = "cproxy"

// maxNameLen bounds a keyring entry name.
const maxNameLen = 128

// nameRE is what an entry name may be: it becomes a file name, a pass path
// and a keychain account, so no separators, no "." or "..", nothing a shell
// or a path would read twice.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// Keyring errors; each comes wrapped with the entry and the keyring it is about.
var (
	ErrNotFound        = errors.New("no such entry")
	ErrWrongPassphrase = errors.New("wrong passphrase")
	ErrNoPassphrase    = errors.New("needs a passphrase")
)

// CheckName reports whether name can name a keyring entry: 1 to 128 letters,
// digits, '.', '_' and '-', starting with a letter or digit. The error does
// not repeat the name, which may be a mistyped secret.
func CheckName(name string) error {
	if len(name) == 0 || len(name) > maxNameLen || !nameRE.MatchString(name) {
		return fmt.Errorf("a keyring entry name is 1 to %d letters, digits, '.', '_' and '-', starting with a letter or digit (e.g. anthropic-key)", maxNameLen)
	}
	return nil
}

// KeyringConfig says which keyring to open. The zero value means the
// defaults: BackendAuto, DefaultService, DefaultKeyringDir, and no prompt.
type KeyringConfig struct {
	// Backend is one of the Backend constants. Empty means BackendAuto.
	Backend string
	// Service names cproxy's entries in the keyring: the Keychain service,
	// the Secret Service collection, the KWallet folder, the directory in the
	// password store. Empty means DefaultService.
	Service string
	// FileDir is the file backend's directory. Empty means DefaultKeyringDir().
	FileDir string
	// Prompt asks for the file backend's passphrase when PassphraseEnv is not
	// set; confirm is true when the passphrase is new and should be asked
	// twice. Nil means there is no one to ask (not a terminal).
	Prompt func(prompt string, confirm bool) (string, error)
}

// DefaultKeyringDir is where the file backend keeps its encrypted files:
// $XDG_DATA_HOME/cproxy/keyring, or $HOME/.local/share/cproxy/keyring; ""
// when neither variable is an absolute path.
func DefaultKeyringDir() string {
	if dir := os.Getenv("XDG_DATA_HOME"); filepath.IsAbs(dir) {
		return filepath.Join(dir, "cproxy", "keyring")
	}
	if home := os.Getenv("HOME"); filepath.IsAbs(home) {
		return filepath.Join(home, ".local", "share", "cproxy", "keyring")
	}
	return ""
}

// Keyring is an opened keyring holding cproxy's entries.
type Keyring struct {
	ring    keyring.Keyring
	backend string
	where   string // the keyring, as messages name it
	file    *fileState
}

// fileState is the file backend's passphrase handling.
type fileState struct {
	dir      string
	prompt   func(string, bool) (string, error)
	creating bool  // the keyring holds no entry yet: a new passphrase
	err      error // why passphrase failed, to tell it from a decryption error
}

// passphrase is the file backend's keyring.PromptFunc. The library calls it
// once and keeps the answer.
func (f *fileState) passphrase(string) (string, error) {
	if p := os.Getenv(PassphraseEnv); p != "" {
		return p, nil
	}
	if f.prompt == nil {
		f.err = fmt.Errorf("the file keyring at %s %w: set %s (there is no terminal to ask on)", f.dir, ErrNoPassphrase, PassphraseEnv)
		return "", f.err
	}
	p, err := f.prompt(fmt.Sprintf("passphrase for the file keyring at %s", f.dir), f.creating)
	switch {
	case err != nil:
		f.err = fmt.Errorf("the file keyring at %s: reading the passphrase: %w", f.dir, err)
	case p == "":
		f.err = fmt.Errorf("the file keyring at %s %w: an empty one is refused", f.dir, ErrNoPassphrase)
	default:
		return p, nil
	}
	return "", f.err
}

// OpenKeyring opens the configured backend. With BackendAuto it takes the
// first of the Keychain, the Secret Service, KWallet, pass (when its store
// is set up) and the file backend that opens.
func OpenKeyring(cfg KeyringConfig) (*Keyring, error) {
	if cfg.Backend == "" {
		cfg.Backend = BackendAuto
	}
	if cfg.Service == "" {
		cfg.Service = DefaultService
	}
	if cfg.FileDir == "" {
		cfg.FileDir = DefaultKeyringDir()
	}
	if cfg.Backend != BackendAuto {
		if !slices.Contains(autoOrder, cfg.Backend) {
			return nil, fmt.Errorf("keyring backend %q: not a backend (use auto, keychain, secret-service, kwallet, pass or file)", cfg.Backend)
		}
		return openBackend(cfg, cfg.Backend)
	}
	var errs []string
	for _, b := range autoOrder {
		if b == BackendPass && !passStoreExists() {
			continue
		}
		k, err := openBackend(cfg, b)
		if err == nil {
			return k, nil
		}
		errs = append(errs, err.Error())
	}
	return nil, fmt.Errorf("no keyring backend works here: %s", strings.Join(errs, "; "))
}

// passStoreExists reports whether pass has been set up (pass init), so that
// BackendAuto does not pick a pass that cannot store anything.
func passStoreExists() bool {
	dir := os.Getenv("PASSWORD_STORE_DIR")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return false
		}
		dir = filepath.Join(home, ".password-store")
	}
	_, err := os.Stat(filepath.Join(dir, ".gpg-id"))
	return err == nil
}

func openBackend(cfg KeyringConfig, backend string) (*Keyring, error) {
	kc := keyring.Config{
		AllowedBackends: []keyring.BackendType{keyring.BackendType(backend)},
		ServiceName:     cfg.Service,
		// The Secret Service: a collection of cproxy's own.
		LibSecretCollectionName: cfg.Service,
		// KWallet: the user's usual wallet, in a folder of cproxy's own.
		KWalletAppID:  "cproxy",
		KWalletFolder: cfg.Service,
		// pass: a directory of cproxy's own in the password store.
		PassPrefix: cfg.Service,
	}
	k := &Keyring{backend: backend}
	switch backend {
	case BackendKeychain:
		k.where = fmt.Sprintf("the macOS Keychain (service %s)", cfg.Service)
	case BackendSecretService:
		k.where = fmt.Sprintf("the Secret Service keyring (collection %s)", cfg.Service)
	case BackendKWallet:
		kc.ServiceName = "kdewallet"
		k.where = fmt.Sprintf("KWallet (folder %s)", cfg.Service)
	case BackendPass:
		k.where = fmt.Sprintf("the pass store (%s/)", cfg.Service)
	case BackendFile:
		if cfg.FileDir == "" {
			return nil, errors.New("the file keyring has no directory: set keyring.file_dir (there is no default without $XDG_DATA_HOME or $HOME)")
		}
		dir, err := filepath.Abs(cfg.FileDir)
		if err != nil {
			return nil, fmt.Errorf("the file keyring at %s: %w", cfg.FileDir, err)
		}
		k.file = &fileState{dir: dir, prompt: cfg.Prompt}
		kc.FileDir = dir
		kc.FilePasswordFunc = k.file.passphrase
		k.where = "the file keyring at " + dir
	}
	ring, err := keyring.Open(kc)
	if err != nil {
		why := err.Error()
		if errors.Is(err, keyring.ErrNoAvailImpl) {
			why = "not available on this system"
			if nodbuslaunch.Active() && (backend == BackendSecretService || backend == BackendKWallet) {
				why = "no D-Bus session bus (DBUS_SESSION_BUS_ADDRESS is not set)"
			}
		}
		return nil, fmt.Errorf("keyring backend %s: %s", backend, why)
	}
	k.ring = ring
	return k, nil
}

// Backend is the backend that was opened, one of the Backend constants.
func (k *Keyring) Backend() string { return k.backend }

// String names the keyring for messages: "the file keyring at DIR", ….
func (k *Keyring) String() string { return k.where }

// Get reads the entry name. A missing entry is ErrNotFound; a file keyring
// that cannot decrypt it, ErrWrongPassphrase.
func (k *Keyring) Get(name string) (Secret, error) {
	if err := CheckName(name); err != nil {
		return Secret{}, err
	}
	item, err := k.ring.Get(name)
	if err != nil {
		return Secret{}, k.wrap(name, err)
	}
	// Never include the data in an error: it is a credential.
	v := strings.TrimSpace(string(item.Data))
	if v == "" {
		return Secret{}, fmt.Errorf("%s in %s: %w: the entry is empty", name, k.where, ErrUnset)
	}
	return Secret{v: v}, nil
}

// Set stores s as the entry name, replacing any entry of that name. A file
// keyring that holds entries must decrypt one with the passphrase first, so
// that one keyring never holds entries under two passphrases.
func (k *Keyring) Set(name string, s Secret) error {
	if err := CheckName(name); err != nil {
		return err
	}
	if s.IsZero() {
		return fmt.Errorf("%s: %w: the value is empty", name, ErrUnset)
	}
	if k.file != nil {
		names, err := k.Names()
		if err != nil {
			return err
		}
		if len(names) == 0 {
			k.file.creating = true
		} else if _, err := k.Get(names[0]); err != nil && !errors.Is(err, ErrUnset) {
			return err
		}
	}
	item := keyring.Item{Key: name, Data: []byte(s.v), Label: "cproxy: " + name, Description: "cproxy upstream credential"}
	if err := k.ring.Set(item); err != nil {
		return k.wrap(name, err)
	}
	return nil
}

// Remove deletes the entry name; ErrNotFound if there is none.
func (k *Keyring) Remove(name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	if k.file != nil {
		// The file backend removes without asking for the passphrase, and
		// reports a missing entry as an os error.
		if _, err := os.Stat(filepath.Join(k.file.dir, name)); errors.Is(err, fs.ErrNotExist) {
			return k.wrap(name, keyring.ErrKeyNotFound)
		}
	}
	if err := k.ring.Remove(name); err != nil {
		return k.wrap(name, err)
	}
	return nil
}

// Names lists cproxy's entries, sorted. It reads no value; the file backend
// needs no passphrase for it. Anything in the keyring that is not a valid
// entry name (a stray file) is left out.
func (k *Keyring) Names() ([]string, error) {
	keys, err := k.ring.Keys()
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", k.where, err)
	}
	var names []string
	for _, key := range keys {
		if CheckName(key) == nil {
			names = append(names, key)
		}
	}
	slices.Sort(names)
	return names, nil
}

// wrap words a backend error about the entry name.
func (k *Keyring) wrap(name string, err error) error {
	switch {
	case errors.Is(err, keyring.ErrKeyNotFound):
		return fmt.Errorf("%s: %w in %s", name, ErrNotFound, k.where)
	case k.file != nil && k.file.err != nil && errors.Is(err, k.file.err):
		return err
	case k.file != nil && !isPathError(err):
		// jose2go's decryption errors say nothing useful; the cause is
		// nearly always the passphrase.
		return fmt.Errorf("%s: cannot decrypt it in %s: %w (%s), or the entry is damaged", name, k.where, ErrWrongPassphrase, PassphraseEnv)
	}
	return fmt.Errorf("%s in %s: %w", name, k.where, err)
}

func isPathError(err error) bool {
	var pe *fs.PathError
	return errors.As(err, &pe)
}
