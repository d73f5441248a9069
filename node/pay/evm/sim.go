package evm

import (
	"github.com/ethereum/go-ethereum/eth/ethconfig"
	"github.com/ethereum/go-ethereum/node"
)

// OsakaRules is a simulated backend's option that runs the chain under
// the rules Ethereum's main network runs (through the Osaka fork), not
// the forks still in development that a dev chain enables too, so gas
// figures are those a real chain charges.
func OsakaRules(_ *node.Config, c *ethconfig.Config) {
	cfg := *c.Genesis.Config
	cfg.BogotaTime = nil
	c.Genesis.Config = &cfg
}
