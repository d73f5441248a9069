package main

import (
	"bytes"
	"context"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/crypto"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/node"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/pay/evm"
	"github.com/idlegrid/idlegrid/node/repo"
)

// devSwarm is the name of the private swarm a devstack without Docker runs.
const devSwarm = "devstack"

// chooseJobs decides how the devstack's providers run jobs: containers
// when a Docker engine answers (with the busybox image made locally), else
// plain processes, which only a private swarm may run, so the devstack
// makes its swarm private.
func (s *devstack) chooseJobs(ctx context.Context) error {
	probe, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	img, err := node.DevImage(probe)
	if err == nil {
		s.image, s.executor = img, config.ExecutorDocker
		fmt.Fprintf(s.e.stdout, "devstack: jobs run as Docker containers of %s\n", s.image)
		return nil
	}
	var key bytes.Buffer
	if kerr := repo.WriteNewSwarmKey(&key); kerr != nil {
		return kerr
	}
	s.swarmKey, s.executor, s.image = key.Bytes(), config.ExecutorProcess, "none (plain process)"
	fmt.Fprintf(s.e.stdout, "devstack: no usable Docker engine (%v):\n  jobs run as PLAIN PROCESSES on this machine, in a private devstack swarm\n", err)
	return nil
}

// initOptions are the options of every devstack repository.
func (s *devstack) initOptions(profile string, bootstrap []string) repo.InitOptions {
	o := repo.InitOptions{Profile: profile, ListenPort: 0, APIPort: 0, Bootstrap: bootstrap}
	if s.swarmKey != nil {
		o.Swarm, o.SwarmKey = devSwarm, s.swarmKey
	}
	return o
}

// makeRenter creates the renter repository the printed rent command
// uses; paid by channel, its wallet holds renterFunds of the token.
func (s *devstack) makeRenter(ctx context.Context) error {
	s.renter = filepath.Join(s.dir, "renter")
	r, err := repo.Init(s.renter, s.initOptions(config.ProfileRenter, []string{s.boot}))
	if err != nil || s.chain == nil {
		return err
	}
	cfg, err := r.Config()
	if err != nil {
		return err
	}
	if err := s.settle(ctx, r, &cfg, renterFunds); err != nil {
		return err
	}
	return config.WriteConfig(r.ConfigPath(), cfg)
}

// rentCommand is the command that rents from this devstack.
func (s *devstack) rentCommand() string {
	img := s.image
	if s.executor == config.ExecutorProcess {
		img = "any"
	}
	return fmt.Sprintf(`%s rent --repo %s --bootstrap %s --gpu H100 --count 2 --hours 1 --max-price 3 --image %s -- sh -c 'echo "hello from $IDLEGRID_GPUS"'`,
		selfCommand(), s.renter, s.boot, img)
}

// selfCommand is how a shell beside this process runs this binary again,
// for the commands devstack prints: "idlegrid" when the one on PATH is
// this one, "go run ./cmd/idlegrid" when this is a go run build (which
// is not on PATH, and goes when it exits) started from the module's
// root, else this binary's path.
func selfCommand() string {
	exe, err := os.Executable()
	if err != nil {
		return "idlegrid"
	}
	wd, _ := os.Getwd()
	return selfCommandOf(exe, wd, exec.LookPath)
}

func selfCommandOf(exe, wd string, lookPath func(string) (string, error)) string {
	if onPath, err := lookPath("idlegrid"); err == nil && sameFile(onPath, exe) {
		return "idlegrid"
	}
	if strings.Contains(exe, string(filepath.Separator)+"go-build") {
		if st, err := os.Stat(filepath.Join(wd, "cmd", "idlegrid", "main.go")); err == nil && !st.IsDir() {
			return "go run ./cmd/idlegrid"
		}
	}
	return shellQuote(exe)
}

// sameFile says whether paths a and b name one file.
func sameFile(a, b string) bool {
	sa, err := os.Stat(a)
	if err != nil {
		return false
	}
	sb, err := os.Stat(b)
	return err == nil && os.SameFile(sa, sb)
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r == '/' || r == '.' || r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// demo rents from the devstack as a renter would: two fake H100s, a job
// that prints and exits, its output streamed here, then the receipt.
func (s *devstack) demo(ctx context.Context) error {
	fmt.Fprintf(s.e.stdout, "demo: %s\n", s.rentCommand())
	r, err := repo.Open(s.renter)
	if err != nil {
		return err
	}
	cfg, err := r.Config()
	if err != nil {
		return err
	}
	cfg.API.Port, cfg.Network.Listen = 0, config.ListenAddrs("127.0.0.1", 0, s.swarmKey == nil)
	n, err := node.New(r, cfg, node.Options{Light: true, Version: version, Logger: slogDefault().With("devnode", "renter")})
	if err != nil {
		return err
	}
	if err := n.Start(ctx); err != nil {
		return err
	}
	defer n.Close()
	img := s.image
	if s.executor == config.ExecutorProcess {
		img = "any"
	}
	req := api.RentRequest{
		BidRequest: api.BidRequest{GPUs: []string{"H100"}, Count: 2, Hours: 1, Tier: "silver", MaxPrice: "3", Image: img},
		Command:    []string{"sh", "-c", `echo "hello from $IDLEGRID_GPUS"; for i in 1 2 3; do echo "step $i"; sleep 1; done`},
	}
	progress := func(line string) { fmt.Fprintf(s.e.stdout, "demo: %s\n", line) }
	res, err := n.Rent(ctx, req, node.RentOutput{Stdout: s.e.stdout, Stderr: s.e.stdout, Progress: progress})
	if err != nil {
		return err
	}
	rc := res.Receipt
	fmt.Fprintf(s.e.stdout, "demo: receipt for lease %s: %s, %d s metered, %s %s, %d beats, signed by %s\n",
		rc.LeaseID, rc.Outcome, rc.MeteredSeconds, rc.Amount, rc.Currency, rc.Beats, strings.Join(rc.SignedBy, " and "))
	if rc.Note != "" {
		fmt.Fprintf(s.e.stdout, "demo: %s\n", rc.Note)
	}
	if v := rc.Voucher; v != nil {
		fmt.Fprintf(s.e.stdout, "demo: paid by voucher %d on channel %s: it owes the provider %s token units in all\n", v.Nonce, v.Channel, v.Amount)
	}
	t := res.Timings
	fmt.Fprintf(s.e.stdout, "demo: first output %s after asking (discover %s, match %s, attest %s, negotiate %s, start %s)\n",
		ms(t.FirstOutput), ms(t.Discover), ms(t.Match), ms(t.Attest), ms(t.Negotiate), ms(t.Start))
	return s.redeemDemo(ctx, res.Lease.Provider, res.Lease.ID, rc.Voucher)
}

// redeemDemo has the demo's provider redeem its vouchers now, as it does
// on its schedule, and prints what it was paid on chain.
func (s *devstack) redeemDemo(ctx context.Context, provider, lease string, final *api.VoucherView) error {
	if s.chain == nil || final == nil {
		return nil
	}
	var p *node.Node
	s.mu.Lock()
	for _, n := range s.nodes {
		if n != nil && n.Status().PeerID == provider {
			p = n
		}
	}
	s.mu.Unlock()
	if p == nil {
		return fmt.Errorf("provider %s is not one of the devstack's nodes", provider)
	}
	// The renter's last voucher comes with its countersignature: the
	// provider redeems once it holds the one the receipt names.
	for wait := time.Now().Add(10 * time.Second); !holds(ctx, p, lease, final) && time.Now().Before(wait); {
		time.Sleep(100 * time.Millisecond) // the provider signals nothing
	}
	res, err := p.Redeem(ctx)
	if err != nil {
		return err
	}
	n := res.Redeemed
	addr := p.WalletAddress()
	bal, err := s.chain.TokenBalance(ctx, addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(s.e.stdout, "demo: the provider redeemed its vouchers on %d channel(s): wallet %s now holds %s USD of the test token on chain %d\n",
		n, addr.Hex(), market.FormatPrice(bal.Uint64()), s.chain.ChainID)
	return nil
}

// renterFunds is what the devstack's renter holds of the test token: 100
// of the currency, in base units (a 6-decimal token, one per micro).
var renterFunds = big.NewInt(100_000_000)

// startChain starts the development chain that pays the devstack's
// leases.
func (s *devstack) startChain() error {
	c, err := evm.StartDevChain()
	if err != nil {
		return err
	}
	s.chain = c
	fmt.Fprintf(s.e.stdout, "devstack: leases are paid by channel on a development chain in this process (chain %d at %s, contract %s, token %s)\n", c.ChainID, c.RPCURL, c.Contract.Hex(), c.Token.Hex())
	return nil
}

// settle points cfg at the devstack's chain and funds r's wallet with gas
// and mint of the token (nil: none); with no chain it changes nothing.
func (s *devstack) settle(ctx context.Context, r *repo.Repo, cfg *config.Config, mint *big.Int) error {
	if s.chain == nil {
		return nil
	}
	e := &cfg.Settlement.EVM
	cfg.Settlement.Kind = config.SettleEVM
	e.RPCURL, e.ChainID, e.Contract, e.Token = s.chain.RPCURL, s.chain.ChainID, s.chain.Contract.Hex(), s.chain.Token.Hex()
	key, err := r.Wallet()
	if err != nil {
		return err
	}
	return s.chain.Fund(ctx, mint, crypto.PubkeyToAddress(key.PublicKey))
}

// holds says whether n holds voucher v of lease id.
func holds(ctx context.Context, n *node.Node, id string, v *api.VoucherView) bool {
	l, err := n.Lease(ctx, id)
	return err == nil && l.Voucher != nil && l.Voucher.Nonce == v.Nonce
}
