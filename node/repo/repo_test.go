package repo

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ethcrypto "github.com/ethereum/go-ethereum/crypto"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/crypto"
)

func TestInitCreatesARepository(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "repo")
	r, err := Init(dir, InitOptions{Profile: config.ProfileRenter, ListenPort: -1, APIPort: -1})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, IdentityFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("identity key mode %04o, want 0600", fi.Mode().Perm())
	}
	key, err := r.Identity()
	if err != nil {
		t.Fatal(err)
	}
	if key.Type() != crypto.Ed25519 {
		t.Errorf("identity key type %v, want Ed25519", key.Type())
	}
	cfg, err := r.Config()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Profile != config.ProfileRenter || cfg.DHT.Mode != config.DHTClient {
		t.Errorf("renter config has profile %s, dht %s", cfg.Profile, cfg.DHT.Mode)
	}
	if _, err := os.Stat(filepath.Join(dir, DatastoreDir)); err != nil {
		t.Errorf("no datastore: %v", err)
	}
}

func TestInitRefusesAnExistingRepositoryWithoutForce(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "repo")
	r, err := Init(dir, InitOptions{Profile: config.ProfileProvider, ListenPort: -1, APIPort: -1})
	if err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(dir, IdentityFile))
	cfgBefore, _ := os.ReadFile(r.ConfigPath())
	_, err = Init(dir, InitOptions{Profile: config.ProfileRenter, ListenPort: -1, APIPort: -1})
	if !errors.Is(err, ErrRepoExists) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("second init: %v, want ErrRepoExists mentioning --force", err)
	}
	after, _ := os.ReadFile(filepath.Join(dir, IdentityFile))
	cfgAfter, _ := os.ReadFile(r.ConfigPath())
	if string(before) != string(after) || string(cfgBefore) != string(cfgAfter) {
		t.Fatal("refused init changed the repository")
	}

	if _, err := Init(dir, InitOptions{Profile: config.ProfileRenter, ListenPort: -1, APIPort: -1, Force: true}); err != nil {
		t.Fatalf("init --force: %v", err)
	}
	backups, _ := filepath.Glob(filepath.Join(dir, "backup-*", IdentityFile))
	if len(backups) != 1 {
		t.Fatalf("found %d backed-up identity keys, want 1", len(backups))
	}
	kept, _ := os.ReadFile(backups[0])
	if string(kept) != string(before) {
		t.Error("the backup does not hold the old identity key")
	}
	fresh, _ := os.ReadFile(filepath.Join(dir, IdentityFile))
	if string(fresh) == string(before) {
		t.Error("init --force kept the old identity")
	}
}

func TestInitWithSwarmKey(t *testing.T) {
	key, _ := p2p.GenerateSwarmKey()
	var buf strings.Builder
	p2p.EncodeSwarmKey(&buf, key)
	dir := filepath.Join(t.TempDir(), "repo")
	r, err := Init(dir, InitOptions{Profile: config.ProfileProvider, Swarm: "lab", SwarmKey: []byte(buf.String()), ListenPort: -1, APIPort: -1})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := r.Config()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cfg.Network.Listen {
		if strings.Contains(a, "quic") {
			t.Errorf("private swarm config listens on QUIC: %s", a)
		}
	}
	got, err := r.SwarmKey(cfg)
	if err != nil || string(got) != string(key) {
		t.Fatalf("SwarmKey = %x, %v", got, err)
	}
	fi, _ := os.Stat(filepath.Join(dir, SwarmKeyFile))
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("swarm key mode %04o, want 0600", fi.Mode().Perm())
	}

	bad := filepath.Join(t.TempDir(), "bad")
	_, err = Init(bad, InitOptions{Profile: config.ProfileProvider, Swarm: "lab", SwarmKey: []byte("not a key"), ListenPort: -1, APIPort: -1})
	if !errors.Is(err, p2p.ErrSwarmKey) {
		t.Errorf("init with a bad key: %v, want ErrSwarmKey", err)
	}
	if _, err := os.Stat(bad); !os.IsNotExist(err) {
		t.Error("failed init left a folder behind")
	}
}

func TestIdentityRefusesUnsafeOrCorruptKeys(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "repo")
	r, err := Init(dir, InitOptions{Profile: config.ProfileProvider, ListenPort: -1, APIPort: -1})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, IdentityFile)
	os.Chmod(p, 0o644)
	if _, err := r.Identity(); !errors.Is(err, ErrIdentity) || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("world-readable key: %v", err)
	}
	os.Chmod(p, 0o600)
	os.WriteFile(p, []byte("garbage"), 0o600)
	if _, err := r.Identity(); !errors.Is(err, ErrIdentity) || !strings.Contains(err.Error(), "not a libp2p private key") {
		t.Errorf("corrupt key: %v", err)
	}
}

func TestLockIsExclusive(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "repo")
	r, err := Init(dir, InitOptions{Profile: config.ProfileProvider, ListenPort: -1, APIPort: -1})
	if err != nil {
		t.Fatal(err)
	}
	unlock, err := r.Lock()
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Lock()
	if !errors.Is(err, ErrRepoLocked) || !strings.Contains(err.Error(), "pid ") {
		t.Fatalf("second lock: %v, want ErrRepoLocked naming the pid", err)
	}
	if _, err := Init(dir, InitOptions{Profile: config.ProfileProvider, ListenPort: -1, APIPort: -1, Force: true}); !errors.Is(err, ErrRepoLocked) {
		t.Errorf("init --force on a locked repository: %v, want ErrRepoLocked", err)
	}
	unlock()
	unlock2, err := r.Lock()
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	unlock2()
}

func TestOpenWithoutRepository(t *testing.T) {
	_, err := Open(filepath.Join(t.TempDir(), "none"))
	if !errors.Is(err, ErrNoRepo) || !strings.Contains(err.Error(), "idlegrid init") {
		t.Errorf("Open: %v", err)
	}
}

func TestDefaultRepoPath(t *testing.T) {
	env := map[string]string{"HOME": "/home/u"}
	if got := DefaultRepoPath(func(k string) string { return env[k] }); got != "/home/u/.idlegrid" {
		t.Errorf("default = %s", got)
	}
	env[EnvRepo] = "/srv/ig"
	if got := DefaultRepoPath(func(k string) string { return env[k] }); got != "/srv/ig" {
		t.Errorf("with $IDLEGRID_PATH = %s", got)
	}
}

func TestInitMakesAWalletKeyOnlyItsOwnerReads(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "repo")
	r, err := Init(dir, InitOptions{Profile: config.ProfileRenter})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(r.File(WalletFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("wallet.key mode %04o, want 0600", fi.Mode().Perm())
	}
	a, err := r.Wallet()
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.Wallet()
	if err != nil || !a.Equal(b) {
		t.Fatalf("the wallet changed between reads (%v)", err)
	}
	id, _ := r.Identity()
	if raw, _ := id.Raw(); bytes.Contains(raw, ethcrypto.FromECDSA(a)) {
		t.Fatal("the wallet key is the identity key")
	}
	if err := os.Chmod(r.File(WalletFile), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Wallet(); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("a wallet others may read: %v", err)
	}
	os.Chmod(r.File(WalletFile), 0o600)
	if err := os.WriteFile(r.File(WalletFile), []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Wallet(); err == nil || !strings.Contains(err.Error(), "not a hex secp256k1 private key") {
		t.Fatalf("a broken wallet file: %v", err)
	}
}
