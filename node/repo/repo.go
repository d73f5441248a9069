package repo

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	ethcrypto "github.com/ethereum/go-ethereum/crypto"
	"github.com/idlegrid/idlegrid/internal/atomicfile"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/p2p"
	pebbleds "github.com/ipfs/go-ds-pebble"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"
)

// Files and folders of a repository.
const (
	ConfigFile   = "config.toml"
	IdentityFile = "identity.key"
	// WalletFile is the node's secp256k1 wallet key (hex), which signs
	// vouchers and chain transactions: never the libp2p identity.
	WalletFile   = "wallet.key"
	SwarmKeyFile = "swarm.key"
	DatastoreDir = "datastore"
	LockFile     = "repo.lock"
	APIFile      = "api"
	// StagingDir keeps, on a provider, the tars renters upload for their
	// leases, a folder per renter, until the job takes them in (an hour
	// at most).
	StagingDir = "staging"
	// MountsDir keeps, on a provider, the copies of the datasets its
	// leases' jobs read, a folder per lease, until the lease ends.
	MountsDir = "mounts"
	// LogsDir keeps, on a renter, its jobs' output, <lease>.stdout and
	// <lease>.stderr, and the note of where each lease runs.
	LogsDir       = "logs"
	defaultFolder = ".idlegrid"
	// EnvRepo names the repository when --repo is not given.
	EnvRepo = "IDLEGRID_PATH"
)

// DefaultRepoPath is $IDLEGRID_PATH, else ~/.idlegrid. getenv is passed in
// so callers (and tests) control the environment.
func DefaultRepoPath(getenv func(string) string) string {
	if p := getenv(EnvRepo); p != "" {
		return p
	}
	home := getenv("HOME")
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	return filepath.Join(home, defaultFolder)
}

// Repo is one node's directory: identity key, config, swarm key, datastore.
type Repo struct {
	Path string
}

// InitOptions say how Init lays out a new repository.
type InitOptions struct {
	Profile string
	Swarm   string
	// SwarmKey is the content of a PSK file for a private swarm; Init
	// checks it and stores it as swarm.key (mode 0600).
	SwarmKey []byte
	// ListenPort, when >= 0, replaces the profile's P2P port (0: any free port).
	ListenPort int
	// APIPort, when >= 0, replaces the default API port (0: any free port).
	APIPort int
	// Bootstrap peers to write into the config.
	Bootstrap []string
	// Force moves an existing repository's files aside into a backup
	// folder inside it instead of refusing.
	Force bool
	// GPUSource, for a provider, is where the GPUs it sells come from
	// (provider.gpu_source). Any source but "static" also enables the
	// provider, since it has something to sell; "nvml" hands the leased
	// GPUs to containers (jobs.pass_gpus). Empty keeps the profile's
	// default: static, with no GPUs, and not selling.
	GPUSource string
}

// Init creates a repository at path: an Ed25519 identity key (0600),
// config.toml with every setting and its default, the swarm key if any, and
// the pebble datastore. It refuses an existing repository unless Force, and
// leaves nothing behind when it fails.
func Init(path string, o InitOptions) (*Repo, error) {
	r := &Repo{Path: path}
	cfg := config.DefaultConfig(o.Profile)
	if o.Swarm != "" {
		cfg.Swarm.Name = o.Swarm
	}
	if o.ListenPort >= 0 {
		cfg.Network.Listen = config.ListenAddrs("0.0.0.0", o.ListenPort, len(o.SwarmKey) == 0)
	}
	if o.APIPort >= 0 {
		cfg.API.Port = o.APIPort
	}
	if len(o.SwarmKey) > 0 {
		if _, err := p2p.ParseSwarmKey(strings.NewReader(string(o.SwarmKey))); err != nil {
			return nil, err
		}
		cfg.Swarm.KeyFile = SwarmKeyFile
		cfg.Network.Listen = tcpOnly(cfg.Network.Listen)
	}
	cfg.Network.Bootstrap = append(cfg.Network.Bootstrap, o.Bootstrap...)
	if o.GPUSource != "" {
		cfg.Provider.GPUSource = o.GPUSource
		cfg.Provider.Enabled = o.GPUSource != "static"
		cfg.Jobs.PassGPUs = o.GPUSource == "nvml"
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}

	if r.Exists() {
		if !o.Force {
			return nil, fmt.Errorf("%w at %s: use --force to start afresh (the old files are kept in a backup folder inside it)", ErrRepoExists, path)
		}
		unlock, err := r.Lock()
		if err != nil {
			return nil, err
		}
		err = r.backup()
		unlock()
		if err != nil {
			return nil, err
		}
	}
	created, err := mkdirNew(path)
	if err != nil {
		return nil, fmt.Errorf("create repository %s: %w", path, err)
	}
	if err := r.populate(cfg, o.SwarmKey); err != nil {
		if created {
			os.RemoveAll(path)
		} else {
			for _, f := range []string{ConfigFile, IdentityFile, WalletFile, SwarmKeyFile, DatastoreDir} {
				os.RemoveAll(r.File(f))
			}
		}
		return nil, fmt.Errorf("create repository %s: %w", path, err)
	}
	return r, nil
}

func tcpOnly(addrs []string) []string {
	var out []string
	for _, a := range addrs {
		if !strings.Contains(a, "/quic") {
			out = append(out, a)
		}
	}
	return out
}

func mkdirNew(path string) (created bool, err error) {
	if _, err := os.Stat(path); err == nil {
		return false, nil
	}
	return true, os.MkdirAll(path, 0o700)
}

func (r *Repo) populate(cfg config.Config, swarmKey []byte) error {
	key, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		return fmt.Errorf("generate identity: %w", err)
	}
	raw, err := crypto.MarshalPrivateKey(key)
	if err != nil {
		return fmt.Errorf("encode identity: %w", err)
	}
	if err := atomicfile.Write(r.File(IdentityFile), raw, 0o600); err != nil {
		return err
	}
	if _, err := r.Wallet(); err != nil {
		return err
	}
	if len(swarmKey) > 0 {
		if err := atomicfile.Write(r.File(SwarmKeyFile), swarmKey, 0o600); err != nil {
			return err
		}
	}
	ds, err := pebbleds.NewDatastore(r.File(DatastoreDir))
	if err != nil {
		return fmt.Errorf("create datastore: %w", err)
	}
	if err := ds.Close(); err != nil {
		return fmt.Errorf("create datastore: %w", err)
	}
	lock, err := os.OpenFile(r.File(LockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	lock.Close()
	// config.toml last: its presence marks a complete repository.
	return config.WriteConfig(r.File(ConfigFile), cfg)
}

// backup moves the repository's files into backup-<time>/ inside it.
func (r *Repo) backup() error {
	dir := r.File("backup-" + time.Now().UTC().Format("20060102T150405.000000000Z"))
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("back up repository: %w", err)
	}
	for _, f := range []string{ConfigFile, IdentityFile, SwarmKeyFile, DatastoreDir} {
		err := os.Rename(r.File(f), filepath.Join(dir, f))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("back up repository: %w", err)
		}
	}
	return nil
}

// Open returns the repository at path, or ErrNoRepo naming the fix.
func Open(path string) (*Repo, error) {
	r := &Repo{Path: path}
	if _, err := os.Stat(r.File(ConfigFile)); err != nil {
		return nil, fmt.Errorf("%w at %s: create one with `idlegrid init --repo %s`", ErrNoRepo, path, path)
	}
	return r, nil
}

// Exists reports whether a repository (or part of one) is at r.Path.
func (r *Repo) Exists() bool {
	for _, f := range []string{ConfigFile, IdentityFile, DatastoreDir} {
		if _, err := os.Stat(r.File(f)); err == nil {
			return true
		}
	}
	return false
}

func (r *Repo) File(name string) string { return filepath.Join(r.Path, name) }

// ConfigPath is the path of config.toml.
func (r *Repo) ConfigPath() string { return r.File(ConfigFile) }

// DatastorePath is the path of the pebble datastore.
func (r *Repo) DatastorePath() string { return r.File(DatastoreDir) }

// Config loads and validates config.toml.
func (r *Repo) Config() (config.Config, error) { return config.LoadConfig(r.ConfigPath()) }

// Identity reads the node's private key. A key file that others can read
// is refused, as ssh refuses one.
func (r *Repo) Identity() (crypto.PrivKey, error) {
	p := r.File(IdentityFile)
	fi, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrIdentity, err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s has mode %04o and may be read by others: run `chmod 600 %s`", ErrIdentity, p, fi.Mode().Perm(), p)
	}
	raw, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrIdentity, err)
	}
	return ParseIdentity(raw, p)
}

// ParseIdentity decodes a libp2p private key file's bytes; name is used in
// the error.
func ParseIdentity(raw []byte, name string) (crypto.PrivKey, error) {
	key, err := crypto.UnmarshalPrivateKey(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %s is not a libp2p private key (%v); restore it from a backup or create a new identity with `idlegrid init --force`", ErrIdentity, name, err)
	}
	return key, nil
}

// APIToken is the secret the local API asks of every call that changes
// something, kept in the repository's api.token (mode 0600): read, or
// made the first time. A token file others may read is refused, as an
// identity key would be.
func (r *Repo) APIToken() (string, error) {
	p := r.File(api.TokenFile)
	fi, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		buf := make([]byte, 32)
		if _, err := rand.Read(buf); err != nil {
			return "", err
		}
		token := hex.EncodeToString(buf)
		if err := atomicfile.Write(p, []byte(token+"\n"), 0o600); err != nil {
			return "", fmt.Errorf("api token: %w", err)
		}
		return token, nil
	case err != nil:
		return "", fmt.Errorf("api token: %w", err)
	case fi.Mode().Perm()&0o077 != 0:
		return "", fmt.Errorf("api token: %s has mode %04o and may be read by others: run `chmod 600 %s`", p, fi.Mode().Perm(), p)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return "", fmt.Errorf("api token: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if len(token) < 32 {
		return "", fmt.Errorf("api token: %s holds %d characters, want at least 32; delete it and a new one is made", p, len(token))
	}
	return token, nil
}

// Wallet is the node's wallet key, from wallet.key (mode 0600), made
// the first time it is asked for (init makes it; a repository from
// before wallets gets one on first use). A key file others may read is
// refused, as the identity would be.
func (r *Repo) Wallet() (*ecdsa.PrivateKey, error) {
	p := r.File(WalletFile)
	fi, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		key, err := ethcrypto.GenerateKey()
		if err != nil {
			return nil, fmt.Errorf("wallet: %w", err)
		}
		if err := atomicfile.Write(p, []byte(hex.EncodeToString(ethcrypto.FromECDSA(key))+"\n"), 0o600); err != nil {
			return nil, fmt.Errorf("wallet: %w", err)
		}
		return key, nil
	case err != nil:
		return nil, fmt.Errorf("wallet: %w", err)
	case fi.Mode().Perm()&0o077 != 0:
		return nil, fmt.Errorf("wallet: %s has mode %04o and may be read by others: run `chmod 600 %s`", p, fi.Mode().Perm(), p)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("wallet: %w", err)
	}
	key, err := ethcrypto.HexToECDSA(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("wallet: %s is not a hex secp256k1 private key (%v); restore it from a backup: the channels it opened pay only to it", p, err)
	}
	return key, nil
}

// PeerID is the peer ID of the repository's identity key.
func (r *Repo) PeerID() (peer.ID, error) {
	key, err := r.Identity()
	if err != nil {
		return "", err
	}
	return peer.IDFromPrivateKey(key)
}

// WriteNewSwarmKey writes a fresh pre-shared key for a private swarm in
// the standard libp2p PSK file format.
func WriteNewSwarmKey(w io.Writer) error {
	key, err := p2p.GenerateSwarmKey()
	if err != nil {
		return err
	}
	return p2p.EncodeSwarmKey(w, key)
}

// CheckSwarmKey reports what is wrong with a PSK file's content, if anything.
func CheckSwarmKey(data []byte) error {
	_, err := p2p.ParseSwarmKey(bytes.NewReader(data))
	return err
}

// CheckSwarmName reports what is wrong with a swarm name, if anything.
func CheckSwarmName(name string) error { return p2p.ValidateSwarmName(name) }

// IsPublicSwarm reports whether name is the open swarm's.
func IsPublicSwarm(name string) bool { return name == p2p.PublicSwarm }

// Keys reads the node's identity key and, for a private swarm, the
// swarm's key (nil for the public swarm).
func (r *Repo) Keys(cfg config.Config) (crypto.PrivKey, pnet.PSK, error) {
	key, err := r.Identity()
	if err != nil {
		return nil, nil, err
	}
	psk, err := r.SwarmKey(cfg)
	if err != nil {
		return nil, nil, err
	}
	return key, psk, nil
}

// SwarmKey reads the PSK named by the config, or nil for the public swarm.
func (r *Repo) SwarmKey(cfg config.Config) (pnet.PSK, error) {
	if cfg.Swarm.KeyFile == "" {
		return nil, nil
	}
	p := cfg.Swarm.KeyFile
	if !filepath.IsAbs(p) {
		p = r.File(p)
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("swarm.key_file: %w; put the swarm's key there or correct swarm.key_file in %s", err, r.ConfigPath())
	}
	defer f.Close()
	key, err := p2p.ParseSwarmKey(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return key, nil
}

// Lock takes the repository for this process with an exclusive flock on
// repo.lock, recording the pid; it fails with ErrRepoLocked, naming the
// holder, when another process has it. The lock dies with the process.
func (r *Repo) Lock() (unlock func(), err error) {
	p := r.File(LockFile)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock repository: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(p)
		f.Close()
		pid := strings.TrimSpace(string(holder))
		if pid == "" {
			pid = "unknown"
		}
		return nil, fmt.Errorf("%w: %s is held by a running daemon (pid %s); stop it first, or use another --repo", ErrRepoLocked, r.Path, pid)
	}
	f.Truncate(0)
	f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() {
		f.Truncate(0)
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// Errors of a repository.
var (
	// ErrRepoExists is returned by Init for an existing repository.
	ErrRepoExists = errors.New("repository already exists")
	// ErrNoRepo is returned when a repository has not been initialised.
	ErrNoRepo = errors.New("no repository")
	// ErrRepoLocked is returned when another process holds the repository.
	ErrRepoLocked = errors.New("repository is in use")
	// ErrIdentity is returned for an unusable identity key file.
	ErrIdentity = errors.New("invalid identity key")
)
