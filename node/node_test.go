package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/attest"
	attestpb "github.com/idlegrid/idlegrid/attest/pb"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/offer"
	"github.com/idlegrid/idlegrid/node/repo"
	"github.com/idlegrid/idlegrid/p2p"
	ds "github.com/ipfs/go-datastore"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// testRepo creates a repository on loopback with free ports; edit adjusts
// the config before it is written.
func testRepo(t testing.TB, name string, edit func(*config.Config)) *repo.Repo {
	t.Helper()
	return testRepoWith(t, name, repo.InitOptions{Profile: config.ProfileProvider}, edit)
}

func testRepoWith(t testing.TB, name string, o repo.InitOptions, edit func(*config.Config)) *repo.Repo {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	o.ListenPort, o.APIPort = 0, 0
	r, err := repo.Init(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := r.Config()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Network.Listen = config.ListenAddrs("127.0.0.1", 0, cfg.Swarm.KeyFile == "")
	cfg.Network.DialTimeout = config.Dur(3 * time.Second)
	cfg.Log.Subsystems["libp2p"] = "error"
	if edit != nil {
		edit(&cfg)
	}
	if err := config.WriteConfig(r.ConfigPath(), cfg); err != nil {
		t.Fatal(err)
	}
	return r
}

func newNode(t testing.TB, r *repo.Repo, o Options) *Node {
	t.Helper()
	cfg, err := r.Config()
	if err != nil {
		t.Fatal(err)
	}
	o.Version = "test"
	if o.Logger == nil {
		quiet := cfg.Log
		quiet.Level = "warn"
		if lvl := os.Getenv("IDLEGRID_TEST_LOG"); lvl != "" {
			quiet.Level = lvl
		}
		o.Logger = slog.New(NewLogHandler(os.Stderr, quiet))
	}
	n, err := New(r, cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// startNode starts a node from r and closes it when the test ends.
func startNode(t testing.TB, r *repo.Repo, o Options) *Node {
	t.Helper()
	n := newNode(t, r, o)
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if !waitUntil(within, cond) {
		t.Fatalf("after %s: %s", within, what)
	}
}

// waitUntil polls cond until it holds or within passes.
func waitUntil(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

func bootstrapFrom(b *Node) func(*config.Config) {
	return func(c *config.Config) { c.Network.Bootstrap = b.Addrs()[:1] }
}

func connectedToAll(all []*Node) func() bool {
	return func() bool {
		for _, a := range all {
			for _, b := range all {
				if a != b && len(a.host.Network().ConnsToPeer(b.id)) == 0 {
					return false
				}
			}
		}
		return true
	}
}

func meshOnEveryTopic(all []*Node) func() bool {
	return func() bool {
		for _, a := range all {
			for _, kind := range p2p.TopicKinds {
				if len(a.gossip.Mesh(kind)) == 0 {
					return false
				}
			}
		}
		return true
	}
}

// A daemon may come up before its bootstrap peer (a rack rebooting, the
// bootstrap host restarting): with RetryBootstrap it starts alone and
// joins once the peer answers.
func TestANodeStartsBeforeItsBootstrapPeer(t *testing.T) {
	t.Parallel()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := free.Addr().(*net.TCPAddr).Port
	free.Close()
	bootRepo := testRepo(t, "boot", func(c *config.Config) { c.Network.Listen = []string{fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", port)} })
	bootID, err := bootRepo.PeerID()
	if err != nil {
		t.Fatal(err)
	}
	r := testRepo(t, "early", func(c *config.Config) {
		c.Network.Bootstrap = []string{fmt.Sprintf("/ip4/127.0.0.1/tcp/%d/p2p/%s", port, bootID)}
	})
	early := startNode(t, r, Options{RetryBootstrap: true})
	if n := len(early.host.Network().Peers()); n != 0 {
		t.Fatalf("started with %d peers and its bootstrap peer down", n)
	}
	boot := startNode(t, bootRepo, Options{})
	// The first redials come 1, 2 and 4 s (±10%) after the start.
	waitFor(t, 30*time.Second, "the early node connected to its bootstrap peer", func() bool {
		return len(early.host.Network().ConnsToPeer(boot.id)) > 0
	})
	waitFor(t, 30*time.Second, "each in the other's routing table", func() bool {
		return early.disc.DHT().RoutingTable().Find(boot.id) != "" && boot.disc.DHT().RoutingTable().Find(early.id) != ""
	})
}

func TestNodesFindEachOtherThroughOneBootstrapPeer(t *testing.T) {
	t.Parallel()
	boot := startNode(t, testRepo(t, "boot", nil), Options{})
	all := []*Node{boot}
	for i := range 5 {
		all = append(all, startNode(t, testRepo(t, fmt.Sprint("n", i), bootstrapFrom(boot)), Options{}))
	}
	waitFor(t, 30*time.Second, "every node connected to every other", connectedToAll(all))
	waitFor(t, 30*time.Second, "every node in a mesh on every topic", meshOnEveryTopic(all))

	// Rendezvous: every node finds every other under the swarm's namespace.
	for _, n := range all {
		waitFor(t, 30*time.Second, "rendezvous lookup returns every other node", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			found, err := n.disc.FindSwarmPeers(ctx)
			if err != nil {
				return false
			}
			seen := map[peer.ID]bool{}
			for _, ai := range found {
				seen[ai.ID] = true
			}
			for _, m := range all {
				if m != n && !seen[m.id] {
					return false
				}
			}
			return true
		})
	}

	// A signed offer from the last node reaches every other node's
	// subscription through the validators.
	prov := config.DefaultConfig(config.ProfileProvider).Provider
	prov.GPUs = []config.GPUConfig{{Model: "A100", Count: 1, VRAMGiB: 80, ComputeCapability: "8.0"}}
	o, err := offer.Build(prov, all[5].id, 1, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	env, err := market.Sign(all[5].key, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := all[5].link.Publish(context.Background(), p2p.TopicOffers, env); err != nil {
		t.Fatal(err)
	}
	for i, n := range all[:5] {
		waitFor(t, 10*time.Second, fmt.Sprintf("node %d receives the offer", i), func() bool {
			return testutil.ToFloat64(n.metrics.GossipReceived.WithLabelValues(p2p.TopicOffers)) == 1
		})
	}
	if st := all[5].Status(); st.Peers != 5 || st.RoutingTable == 0 {
		t.Errorf("status: peers %d, routing table %d", st.Peers, st.RoutingTable)
	}
}

func TestLightClientFindsTheSwarm(t *testing.T) {
	t.Parallel()
	boot := startNode(t, testRepo(t, "boot", nil), Options{})
	a := startNode(t, testRepo(t, "a", bootstrapFrom(boot)), Options{})
	b := startNode(t, testRepo(t, "b", bootstrapFrom(boot)), Options{})
	light := startNode(t, testRepoWith(t, "light", repo.InitOptions{Profile: config.ProfileRenter}, bootstrapFrom(boot)), Options{Light: true})
	if light.Mode() != config.DHTClient || light.Status().Mode != config.DHTClient {
		t.Fatalf("light node runs in %s mode", light.Mode())
	}
	waitFor(t, 30*time.Second, "light client connected to every provider", connectedToAll([]*Node{light, boot, a, b}))
	waitFor(t, 30*time.Second, "light client in the offers mesh", func() bool { return len(light.gossip.Mesh(p2p.TopicOffers)) > 0 })
}

func TestPrivateSwarmNodes(t *testing.T) {
	t.Parallel()
	priv := privateSwarm(t, "lab")
	boot := startNode(t, testRepoWith(t, "boot", priv, nil), Options{})
	a := startNode(t, testRepoWith(t, "a", priv, bootstrapFrom(boot)), Options{})
	b := startNode(t, testRepoWith(t, "b", priv, bootstrapFrom(boot)), Options{})
	all := []*Node{boot, a, b}
	waitFor(t, 30*time.Second, "private nodes connected", connectedToAll(all))
	waitFor(t, 30*time.Second, "private nodes meshed", meshOnEveryTopic(all))
	if topic := a.Swarm().Topic(p2p.TopicOffers); !strings.HasPrefix(topic, "/idlegrid/lab-") {
		t.Errorf("private offers topic %s", topic)
	}

	// A keyless node that knows the private bootstrap peer gets nowhere.
	outsider := newNode(t, testRepo(t, "outsider", bootstrapFrom(boot)), Options{})
	err := outsider.Start(context.Background())
	if !errors.Is(err, p2p.ErrNoBootstrap) {
		outsider.Close()
		t.Fatalf("keyless node start: %v, want ErrNoBootstrap", err)
	}
	for _, n := range all {
		if len(n.host.Network().Peers()) != 2 {
			t.Errorf("private node sees %d peers, want 2", len(n.host.Network().Peers()))
		}
	}

	// With an allow-list, a key holder that is not listed is refused.
	guardedRepo := testRepoWith(t, "guarded", priv, func(c *config.Config) {
		c.Swarm.AllowList = []string{a.id.String()}
	})
	guarded := startNode(t, guardedRepo, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	guardAddr := peer.AddrInfo{ID: guarded.id, Addrs: guarded.host.Addrs()}
	if err := a.host.Connect(ctx, guardAddr); err != nil {
		t.Fatalf("listed peer refused: %v", err)
	}
	b.host.Connect(ctx, guardAddr)
	waitFor(t, 10*time.Second, "unlisted peer dropped", func() bool {
		return len(guarded.host.Network().ConnsToPeer(b.id)) == 0 &&
			len(b.host.Network().ConnsToPeer(guarded.id)) == 0
	})
	if len(guarded.host.Network().ConnsToPeer(a.id)) == 0 {
		t.Error("listed peer not connected")
	}
}

// repoFiles snapshots every regular file's content under dir except the
// lock file, to prove a failed start changed nothing.
func repoFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == repo.LockFile || strings.Contains(p, repo.DatastoreDir) {
			return nil
		}
		b, _ := os.ReadFile(p)
		out[p] = string(b)
		return nil
	})
	return out
}

func TestStartFailsClearlyAndChangesNothing(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyPort := busy.Addr().(*net.TCPAddr).Port
	deadPeer := "/ip4/127.0.0.1/tcp/1/p2p/12D3KooWEyoppNCUx8Yx66oV9fJnriXwCcXwDDUA2kj6vnc6iDEp"

	cases := []struct {
		name string
		edit func(*config.Config)
		want error
		text string
	}{
		{"unreachable bootstrap", func(c *config.Config) { c.Network.Bootstrap = []string{deadPeer} }, p2p.ErrNoBootstrap, "network.bootstrap"},
		{"p2p port in use", func(c *config.Config) { c.Network.Listen = []string{fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", busyPort)} }, p2p.ErrListen, "network.listen"},
		{"api port in use", func(c *config.Config) { c.API.Port = busyPort }, ErrAPIListen, "api.port"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := testRepo(t, "r", tc.edit)
			before := repoFiles(t, r.Path)
			n := newNode(t, r, Options{})
			err := n.Start(context.Background())
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
				n.Close()
				t.Fatalf("Start: %v, want %v naming %s", err, tc.want, tc.text)
			}
			if after := repoFiles(t, r.Path); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Errorf("failed start changed the repository:\nbefore %v\nafter  %v", before, after)
			}
			unlock, err := r.Lock()
			if err != nil {
				t.Fatalf("failed start left the repository locked: %v", err)
			}
			unlock()
		})
	}

	t.Run("repository locked", func(t *testing.T) {
		r := testRepo(t, "r", nil)
		startNode(t, r, Options{})
		second := newNode(t, r, Options{})
		if err := second.Start(context.Background()); !errors.Is(err, repo.ErrRepoLocked) {
			second.Close()
			t.Fatalf("second node on one repository: %v, want ErrRepoLocked", err)
		}
	})
}

func TestCloseIsQuickAndReleasesEverything(t *testing.T) {
	t.Parallel()
	boot := startNode(t, testRepo(t, "boot", nil), Options{})
	r := testRepo(t, "a", bootstrapFrom(boot))
	n := newNode(t, r, Options{})
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "connected", connectedToAll([]*Node{boot, n}))
	key := ds.NewKey("/test/kept")
	if err := n.store.Put(context.Background(), key, []byte("across restarts")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := n.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close took %s, want under 5s", d)
	}
	if _, err := os.Stat(filepath.Join(r.Path, repo.APIFile)); !os.IsNotExist(err) {
		t.Error("api file left behind")
	}
	// The same repository starts again at once: lock, datastore and ports free.
	again := startNode(t, r, Options{})
	if again.id != n.id {
		t.Error("restart changed the peer ID")
	}
	if v, err := again.store.Get(context.Background(), key); err != nil || string(v) != "across restarts" {
		t.Errorf("datastore after restart: %q, %v", v, err)
	}
}

// What is signed in one swarm is refused in another, and every stream
// protocol names its swarm (issue 11, attack 14: an offer signed in a
// private swarm verified in the public one, and the lease, job, quote,
// book and attest protocols were the same in every swarm).
func TestSignedObjectsAndProtocolsAreBoundToTheirSwarm(t *testing.T) {
	t.Parallel()
	priv := privateSwarm(t, "lab")
	labBoot := startNode(t, testRepoWith(t, "labboot", priv, nil), Options{})
	lab := startNode(t, testRepoWith(t, "lab", priv, both(bootstrapFrom(labBoot), func(c *config.Config) {
		asProvider("H100", 8, 80, "1.00", "DE")(c)
		c.Provider.GPUSource = "fake:dgxh100" // GPUs it can attest
	})), Options{})
	pub := startNode(t, testRepo(t, "pub", nil), Options{})
	ctx := context.Background()
	var env []byte
	waitFor(t, 10*time.Second, "the lab provider's offer in its own book", func() bool {
		envs, _ := lab.market.EnvelopesNow(ctx)
		if len(envs) == 1 {
			env = envs[0]
		}
		return env != nil
	})
	o, err := market.Open[*pb.Offer](env)
	if err != nil {
		t.Fatal(err)
	}
	if o.Header.Swarm != lab.Swarm().ID() || !strings.HasPrefix(o.Header.Swarm, "lab-") {
		t.Errorf("the lab's offer names swarm %q, want %q", o.Header.Swarm, lab.Swarm().ID())
	}
	if err := pub.limits.ValidateOffer(o, time.Now()); err == nil || !strings.Contains(err.Error(), "header.swarm") {
		t.Errorf("the lab's offer in the public swarm: %v", err)
	}
	rejected := pub.market.Validator.Rejected.Load()
	if err := pub.link.Publish(ctx, p2p.TopicOffers, env); err == nil {
		t.Error("the public node published the lab's offer")
	}
	if pub.market.Validator.Rejected.Load() != rejected+1 {
		t.Error("the public node's validator did not reject the lab's offer")
	}
	// The lab provider's attestation answers name the lab: a challenger
	// elsewhere refuses them, and evidence made of them.
	nonce := make([]byte, attest.NonceSize)
	fresh, standing, err := lab.provider.AnswerChallenge(ctx, pub.id, nonce)
	if err != nil {
		t.Fatal(err)
	}
	ch := attest.Challenge{Swarm: pub.challenger.Swarm, Challenger: pub.id, Nonce: nonce}
	if v := attest.Judge(lab.id, ch, fresh, standing, o, nil, time.Now(), time.Minute); !errors.Is(v.Err, attest.ErrDocSwarm) {
		t.Errorf("the lab provider's answer judged in the public swarm: %v", v.Err)
	}
	two := attest.NewDocument(attest.Inventory{GPUs: []attest.GPU{{UUID: "GPU-1"}, {UUID: "GPU-2"}}}, lab.id, attest.Challenge{Swarm: lab.Swarm().Tag()}, time.Now(), nil)
	one := attest.NewDocument(attest.Inventory{GPUs: []attest.GPU{{UUID: "GPU-1"}}}, lab.id, attest.Challenge{Swarm: lab.Swarm().Tag()}, time.Now(), nil)
	var docs [][]byte
	for _, d := range []*attestpb.Document{two, one} {
		env, err := attest.SignDocument(lab.key, d)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, env)
	}
	evidence, _ := attest.NewEvidence(docs[0], docs[1])
	if _, err := attest.VerifyEvidence(evidence, lab.Swarm().Tag(), nil); err != nil {
		t.Fatalf("the lab's evidence in the lab: %v", err)
	}
	if err := pub.link.Publish(ctx, p2p.TopicEvidence, evidence); err == nil || pub.market.Validator.Rejected.Load() != rejected+2 {
		t.Errorf("the public node took evidence made in the lab: %v", err)
	}
	for _, n := range []*Node{lab, pub} {
		scoped := "/idlegrid/" + n.Swarm().ID() + "/"
		served := 0
		for _, id := range n.host.Mux().Protocols() {
			if !strings.HasPrefix(string(id), "/idlegrid/") {
				continue // libp2p's own
			}
			if served++; !strings.HasPrefix(string(id), scoped) {
				t.Errorf("%s serves %s, not under %s", n.Swarm().ID(), id, scoped)
			}
		}
		if served < 3 { // kad, book and quote at least
			t.Errorf("%s serves %d idlegrid protocols", n.Swarm().ID(), served)
		}
	}
}

// privateSwarm is how a repository joins a new private swarm of that name.
func privateSwarm(t *testing.T, name string) repo.InitOptions {
	t.Helper()
	key, err := p2p.GenerateSwarmKey()
	if err != nil {
		t.Fatal(err)
	}
	var buf strings.Builder
	p2p.EncodeSwarmKey(&buf, key)
	return repo.InitOptions{Profile: config.ProfileProvider, Swarm: name, SwarmKey: []byte(buf.String())}
}
