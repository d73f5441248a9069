package config

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestDefaultConfigsAreValid(t *testing.T) {
	for _, p := range Profiles {
		c := DefaultConfig(p)
		if err := c.Validate(); err != nil {
			t.Errorf("profile %s: %v", p, err)
		}
	}
	if DefaultConfig(ProfileRenter).DHT.Mode != DHTClient {
		t.Error("a renter's DHT is not in client mode")
	}
	if DefaultConfig(ProfileProvider).DHT.Mode != DHTServer {
		t.Error("a provider's DHT is not in server mode")
	}
	if c := DefaultConfig(ProfileProvider); c.Gossip.OutboundQueue < 1024 || !c.Gossip.PeerScoring {
		t.Errorf("gossip defaults too weak: %+v", c.Gossip)
	}
}

func TestMarshalWritesEverySettingWithAComment(t *testing.T) {
	c := DefaultConfig(ProfileProvider)
	data, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	inMap := false
	for i, l := range lines {
		if strings.HasPrefix(l, "[") {
			inMap = l == "[log.subsystems]" // map entries share the table's comment
		}
		if l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, "[") || inMap {
			continue
		}
		if i == 0 || !strings.HasPrefix(lines[i-1], "#") {
			t.Errorf("line %d %q has no comment above it", i+1, l)
		}
	}
	back, err := ParseConfig(data)
	if err != nil {
		t.Fatalf("written config does not parse: %v", err)
	}
	again, _ := back.Marshal()
	if string(again) != string(data) {
		t.Error("config changes on a round trip")
	}
	for _, k := range c.Keys() {
		if _, err := c.Get(k); err != nil {
			t.Errorf("Get(%s): %v", k, err)
		}
	}
}

func TestValidateNamesTheField(t *testing.T) {
	cases := []struct {
		field string
		edit  func(*Config)
	}{
		{"profile", func(c *Config) { c.Profile = "miner" }},
		{"swarm.name", func(c *Config) { c.Swarm.Name = "Bad Name" }},
		{"swarm.name", func(c *Config) { c.Swarm.KeyFile = "swarm.key" }},
		{"swarm.allow_list[0]", func(c *Config) { c.Swarm.AllowList = []string{"nope"} }},
		{"reputation.seeds[0]", func(c *Config) { c.Reputation.Seeds = []string{"nope"} }},
		{"network.listen[1]", func(c *Config) { c.Network.Listen = []string{"/ip4/0.0.0.0/tcp/1", "tcp:4001"} }},
		{"network.listen[1]", func(c *Config) { c.Swarm.Name, c.Swarm.KeyFile = "lab", "swarm.key" }},
		{"network.announce[0]", func(c *Config) { c.Network.Announce = []string{"x"} }},
		{"network.bootstrap[0]", func(c *Config) { c.Network.Bootstrap = []string{"/ip4/1.2.3.4/tcp/4001"} }},
		{"network.conn_low", func(c *Config) { c.Network.ConnLow = 0 }},
		{"network.conn_high", func(c *Config) { c.Network.ConnHigh = c.Network.ConnLow - 1 }},
		{"network.conn_grace", func(c *Config) { c.Network.ConnGrace = Dur(time.Hour) }},
		{"network.dial_timeout", func(c *Config) { c.Network.DialTimeout = Dur(0) }},
		{"jobs.user", func(c *Config) { c.Jobs.User = "root" }},
		{"jobs.workspace_mib", func(c *Config) { c.Jobs.WorkspaceMiB = 0 }},
		{"jobs.log_mib", func(c *Config) { c.Jobs.LogMiB = 0 }},
		{"jobs.max_stage_gib", func(c *Config) { c.Jobs.MaxStageGiB = 3 }},
		{"datasets.cache_gib", func(c *Config) { c.Datasets.CacheGiB = 0 }},
		{"network.ping_interval", func(c *Config) { c.Network.PingInterval = Dur(time.Millisecond) }},
		{"nat.reachability", func(c *Config) { c.NAT.Reachability = "maybe" }},
		{"nat.relay_reservations", func(c *Config) { c.NAT.RelayReserve = 0 }},
		{"nat.relay_circuits", func(c *Config) { c.NAT.RelayCircuits = 5000 }},
		{"nat.relay_duration", func(c *Config) { c.NAT.RelayDuration = Dur(time.Second) }},
		{"nat.relay_mib", func(c *Config) { c.NAT.RelayMiB = 0 }},
		{"dht.mode", func(c *Config) { c.DHT.Mode = "auto" }},
		{"dht.rebootstrap_interval", func(c *Config) { c.DHT.RebootstrapInterval = Dur(time.Second) }},
		{"dht.find_interval", func(c *Config) { c.DHT.FindInterval = Dur(0) }},
		{"dht.max_peers", func(c *Config) { c.DHT.MaxPeers = 0 }},
		{"gossip.outbound_queue", func(c *Config) { c.Gossip.OutboundQueue = 8 }},
		{"gossip.max_message_size", func(c *Config) { c.Gossip.MaxMessageSize = 1 << 30 }},
		{"gossip.validator_timeout", func(c *Config) { c.Gossip.ValidatorTimeout = Dur(0) }},
		{"resources.max_memory_mib", func(c *Config) { c.Resources.MaxMemoryMiB = 1 }},
		{"resources.max_fds", func(c *Config) { c.Resources.MaxFDs = -1 }},
		{"resources.max_conns", func(c *Config) { c.Resources.MaxConns = 0 }},
		{"resources.max_conns_inbound", func(c *Config) { c.Resources.MaxConnsInbound = c.Resources.MaxConns + 1 }},
		{"resources.max_streams", func(c *Config) { c.Resources.MaxStreams = 1 }},
		{"api.port", func(c *Config) { c.API.Port = 70000 }},
		{"log.level", func(c *Config) { c.Log.Level = "loud" }},
		{"log.format", func(c *Config) { c.Log.Format = "xml" }},
		{"log.subsystems.dht", func(c *Config) { c.Log.Subsystems["dht"] = "verbose" }},
		{"log.subsystems", func(c *Config) { c.Log.Subsystems["Bad Name"] = "info" }},
	}
	for _, tc := range cases {
		t.Run(tc.field, func(t *testing.T) {
			c := DefaultConfig(ProfileProvider).Clone()
			tc.edit(&c)
			err := c.Validate()
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("got %v, want a FieldError", err)
			}
			if fe.Field != tc.field {
				t.Errorf("error names %s, want %s: %v", fe.Field, tc.field, err)
			}
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "want ") {
				t.Errorf("error does not say what is allowed: %v", err)
			}
		})
	}
}

func TestParseConfigRejects(t *testing.T) {
	good, _ := DefaultConfig(ProfileProvider).Marshal()
	cases := []struct {
		name, doc, want string
	}{
		{"unknown key", "[network]\nlisten_on = []\n", `unknown key "network.listen_on"`},
		{"unknown table", "[gpu]\nx = 1\n", `unknown key "gpu`},
		{"wrong type", "[network]\nconn_low = \"many\"\n", "network.conn_low: want an integer"},
		{"bad duration", "[network]\nconn_grace = \"soon\"\n", `network.conn_grace: "soon" is not a duration`},
		{"unitless duration", "[network]\nconn_grace = 20\n", `network.conn_grace = 20: want a quoted duration such as "30s"`},
		{"out of range", "[api]\nport = 99999\n", "api.port = 99999: want 0 to 65535"},
		{"not toml", "profile = \n", "line 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			doc := tc.doc
			if tc.name == "out of range" {
				doc = strings.Replace(string(good), "port = 5080", "port = 99999", 1)
			}
			_, err := ParseConfig([]byte(doc))
			if err == nil || !errors.Is(err, ErrConfig) {
				t.Fatalf("got %v, want ErrConfig", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestConfigSet(t *testing.T) {
	c := DefaultConfig(ProfileProvider)
	for _, tc := range []struct{ key, value, want string }{
		{"log.level", "debug", "debug"},
		{"network.conn_low", "50", "50"},
		{"gossip.peer_scoring", "false", "false"},
		{"network.conn_grace", "1m", "1m0s"},
		{"network.listen", `["/ip4/0.0.0.0/tcp/4010"]`, "[/ip4/0.0.0.0/tcp/4010]"},
		{"log.subsystems.dht", "debug", "debug"},
	} {
		out, err := c.Set(tc.key, tc.value)
		if err != nil {
			t.Errorf("Set(%s, %s): %v", tc.key, tc.value, err)
			continue
		}
		v, _ := out.Get(tc.key)
		if got := fmt.Sprint(v); got != tc.want {
			t.Errorf("after Set(%s, %s) Get = %s, want %s", tc.key, tc.value, got, tc.want)
		}
	}
	if c.Log.Level != "info" || c.Log.Subsystems["dht"] != "" {
		t.Error("Set changed the original config")
	}
	for _, tc := range []struct{ key, value, want string }{
		{"network.nope", "1", "unknown key"},
		{"nope", "1", "unknown key"},
		{"network", "1", "network"},
		{"network.conn_low", "abc", "want an integer"},
		{"network.conn_grace", "5", `network.conn_grace = 5: "5" is not a duration`},
		{"network.conn_low", "0", "network.conn_low = 0"},
		{"api.port", "-1", "api.port = -1"},
		{"swarm.allow_list", `["x"]`, "swarm.allow_list[0]"},
	} {
		if _, err := c.Set(tc.key, tc.value); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Set(%s, %s) = %v, want an error containing %q", tc.key, tc.value, err, tc.want)
		}
	}
}

func TestSettlementDefaultsAndChecks(t *testing.T) {
	c := DefaultConfig(ProfileProvider)
	if c.Settlement.Kind != SettleLedger {
		t.Fatalf("default settlement %q, want ledger", c.Settlement.Kind)
	}
	data, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	// A config written before [settlement] existed still loads, as the ledger.
	old := regexp.MustCompile(`(?s)\n# how leases are paid\n\[settlement\].*`).ReplaceAll(data, nil)
	if bytes.Contains(old, []byte("[settlement")) {
		t.Fatalf("the test did not cut [settlement] out:\n%s", old)
	}
	got, err := ParseConfig(old)
	if err != nil || got.Settlement.Kind != SettleLedger {
		t.Fatalf("a config without [settlement]: %v, kind %q", err, got.Settlement.Kind)
	}
	// Nor [datasets], cut out with it: its bound is the default.
	if bytes.Contains(old, []byte("[datasets")) || got.Datasets.CacheGiB != DefaultDatasetsCacheGiB {
		t.Errorf("a config without [datasets]: datasets.cache_gib %d, want %d", got.Datasets.CacheGiB, DefaultDatasetsCacheGiB)
	}
	evm := func(f func(*EVMConfig)) Config {
		c := DefaultConfig(ProfileRenter)
		c.Settlement.Kind = SettleEVM
		c.Settlement.EVM.RPCURL, c.Settlement.EVM.ChainID = "http://127.0.0.1:8545", 1337
		c.Settlement.EVM.Contract, c.Settlement.EVM.Token = "0x5FbDB2315678afecb367f032d93F642f64180aa3", "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512"
		if f != nil {
			f(&c.Settlement.EVM)
		}
		return c
	}
	if c := evm(nil); c.Validate() != nil {
		t.Fatalf("a good evm settlement: %v", c.Validate())
	}
	for _, tc := range []struct {
		f    func(*EVMConfig)
		want string
	}{
		{func(e *EVMConfig) { e.RPCURL = "127.0.0.1:8545" }, "settlement.evm.rpc_url"},
		{func(e *EVMConfig) { e.ChainID = 0 }, "settlement.evm.chain_id"},
		{func(e *EVMConfig) { e.Contract = "0x5FbDB" }, "settlement.evm.contract"},
		{func(e *EVMConfig) { e.Token = "" }, "settlement.evm.token"},
		{func(e *EVMConfig) { e.UnitsPerMicro = 0 }, "settlement.evm.units_per_micro"},
		{func(e *EVMConfig) { e.Deposit = -1 }, "settlement.evm.deposit"},
		{func(e *EVMConfig) { e.RedeemAt = 0 }, "settlement.evm.redeem_at_percent"},
	} {
		c := evm(tc.f)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want an error naming %s", err, tc.want)
		}
	}
	c.Settlement.Kind = "paypal"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "settlement.kind") {
		t.Errorf("kind paypal: %v", err)
	}
}
