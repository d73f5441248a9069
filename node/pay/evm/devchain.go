package evm

import (
	"context"
	"crypto/ecdsa"
	"fmt"
	"math/big"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/accounts/abi/bind"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/eth/ethconfig"
	"github.com/ethereum/go-ethereum/ethclient/simulated"
	"github.com/ethereum/go-ethereum/node"
)

// DevChain is a development chain in this process: go-ethereum's
// simulated backend (a real EVM) serving JSON-RPC on loopback, mining a
// block every BlockEvery, with the channel contract and a test token
// deployed. Nothing leaves the machine. The devstack and process-level
// tests run on it.
type DevChain struct {
	RPCURL   string
	ChainID  uint64
	Contract common.Address
	Token    common.Address

	sim      *simulated.Backend
	deployer *ecdsa.PrivateKey
	token    *TestToken
	mu       sync.Mutex // one transaction of the deployer's at a time
	stop     chan struct{}
	done     chan struct{}
}

// BlockEvery is how often a DevChain mines.
const BlockEvery = 250 * time.Millisecond

// DevChallenge is a DevChain contract's challenge period: short, so a
// renter's close in the devstack ends within a demo.
const DevChallenge = 60 // seconds

// StartDevChain starts a development chain whose accounts fund holds
// gas money from the start.
func StartDevChain(fund ...common.Address) (*DevChain, error) {
	deployer, err := crypto.GenerateKey()
	if err != nil {
		return nil, err
	}
	alloc := types.GenesisAlloc{crypto.PubkeyToAddress(deployer.PublicKey): {Balance: ether(1_000_000)}}
	for _, a := range fund {
		alloc[a] = types.Account{Balance: ether(1000)}
	}
	// The node takes a port number, not a listener: a free one is picked
	// and, should another process take it first, another.
	var sim *simulated.Backend
	var port int
	for try := 0; sim == nil; try++ {
		if sim, port, err = serveSim(alloc); err != nil && try == 2 {
			return nil, fmt.Errorf("development chain: %w", err)
		}
	}
	d := &DevChain{RPCURL: "http://127.0.0.1:" + strconv.Itoa(port), ChainID: 1337, sim: sim, deployer: deployer, stop: make(chan struct{}), done: make(chan struct{})}
	client := sim.Client()
	o, _ := bind.NewKeyedTransactorWithChainID(deployer, big.NewInt(1337))
	// The deployer's nonces are set, not asked of the pool: the pool takes
	// a sent transaction in on a goroutine of its own, and a second
	// deployment that asks before it has would reuse the first's nonce
	// ("replacement transaction underpriced", seen on a loaded machine).
	var tx1, tx2 *types.Transaction
	o.Nonce = big.NewInt(0)
	if d.Token, tx1, d.token, err = DeployTestToken(o, client); err == nil {
		o.Nonce = big.NewInt(1)
		d.Contract, tx2, _, err = DeployPaymentChannels(o, client, DevChallenge)
	}
	if err != nil {
		sim.Close()
		return nil, fmt.Errorf("deploy on the development chain: %w", err)
	}
	// Mine from here on: the pool promotes a sent transaction in a
	// goroutine of its own, so one block committed now may hold neither
	// deployment, and a wait for it with nothing mining after waits for
	// ever (a loaded machine hung a test run so).
	go d.mine()
	ctx, cancel := context.WithTimeout(context.Background(), deployWait)
	defer cancel()
	for _, tx := range []*types.Transaction{tx1, tx2} {
		if _, err := bind.WaitDeployed(ctx, client, tx); err != nil {
			d.Close()
			return nil, fmt.Errorf("deploy on the development chain: %w", err)
		}
	}
	return d, nil
}

// deployWait bounds how long StartDevChain waits for its contracts to be
// mined: a block comes every BlockEvery, so a minute is a chain that
// does not mine.
const deployWait = time.Minute

// serveSim starts a simulated chain serving JSON-RPC on a free loopback
// port (the backend panics where its node does not start).
func serveSim(alloc types.GenesisAlloc) (sim *simulated.Backend, port int, err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, 0, err
	}
	port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	defer func() {
		if r := recover(); r != nil {
			sim, err = nil, fmt.Errorf("port %d: %v", port, r)
		}
	}()
	return simulated.NewBackend(alloc, OsakaRules, func(n *node.Config, _ *ethconfig.Config) {
		n.HTTPHost, n.HTTPPort, n.HTTPModules = "127.0.0.1", port, []string{"eth", "net", "web3"}
	}), port, nil
}

func (d *DevChain) mine() {
	defer close(d.done)
	t := time.NewTicker(BlockEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			d.sim.Commit()
		case <-d.stop:
			return
		}
	}
}

// Mint gives to amount of the test token (base units).
func (d *DevChain) Mint(ctx context.Context, to common.Address, amount *big.Int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	o, _ := bind.NewKeyedTransactorWithChainID(d.deployer, big.NewInt(int64(d.ChainID)))
	o.Context = ctx
	tx, err := d.token.Mint(o, to, amount)
	if err != nil {
		return err
	}
	r, err := waitMined(ctx, d.sim.Client(), tx.Hash())
	if err != nil {
		return err
	}
	if r.Status != types.ReceiptStatusSuccessful {
		return fmt.Errorf("mint to %s reverted", to)
	}
	return nil
}

// Fund gives each of to 10 of the chain's coin, for gas, and mint of
// the test token (base units; nil: none), and waits until they hold it.
func (d *DevChain) Fund(ctx context.Context, mint *big.Int, to ...common.Address) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	client := d.sim.Client()
	from := crypto.PubkeyToAddress(d.deployer.PublicKey)
	nonce, err := client.PendingNonceAt(ctx, from)
	if err != nil {
		return err
	}
	tip, err := client.SuggestGasTipCap(ctx)
	if err != nil {
		return err
	}
	head, err := client.HeaderByNumber(ctx, nil)
	if err != nil {
		return err
	}
	feeCap := new(big.Int).Add(tip, new(big.Int).Mul(head.BaseFee, big.NewInt(2)))
	signer := types.LatestSignerForChainID(new(big.Int).SetUint64(d.ChainID))
	var sent []common.Hash
	for _, a := range to {
		tx, err := types.SignNewTx(d.deployer, signer, &types.DynamicFeeTx{ChainID: new(big.Int).SetUint64(d.ChainID), Nonce: nonce, GasTipCap: tip, GasFeeCap: feeCap, Gas: 21_000, To: &a, Value: ether(10)})
		if err != nil {
			return err
		}
		if err := client.SendTransaction(ctx, tx); err != nil {
			return fmt.Errorf("fund %s: %w", a, err)
		}
		nonce++
		sent = append(sent, tx.Hash())
		if mint == nil {
			continue
		}
		o, _ := bind.NewKeyedTransactorWithChainID(d.deployer, new(big.Int).SetUint64(d.ChainID))
		o.Context, o.Nonce = ctx, new(big.Int).SetUint64(nonce)
		mtx, err := d.token.Mint(o, a, mint)
		if err != nil {
			return fmt.Errorf("mint to %s: %w", a, err)
		}
		nonce++
		sent = append(sent, mtx.Hash())
	}
	for _, h := range sent {
		r, err := waitMined(ctx, client, h)
		if err != nil {
			return err
		}
		if r.Status != types.ReceiptStatusSuccessful {
			return fmt.Errorf("funding transaction %s reverted", h)
		}
	}
	return nil
}

// Close stops mining and the chain.
func (d *DevChain) Close() error {
	close(d.stop)
	<-d.done
	return d.sim.Close()
}

func ether(n int64) *big.Int {
	return new(big.Int).Mul(big.NewInt(n), new(big.Int).Exp(big.NewInt(10), big.NewInt(18), nil))
}

// TokenBalance is what a holds of the test token, in base units.
func (d *DevChain) TokenBalance(ctx context.Context, a common.Address) (*big.Int, error) {
	return d.token.BalanceOf(&bind.CallOpts{Context: ctx}, a)
}
