// Package doctor checks what a provider needs, in order, and says for
// each check what to do: the repository, the GPUs through NVML, the
// Docker engine, GPUs in a container, disk for images, ports,
// reachability and the clock. It owns nothing and changes nothing; it
// reads what it is handed (the repository, its configuration, the
// running daemon's status and book) and what it asks the machine.
//
// doctor imports attest (to read the GPUs), node/api (the daemon's
// status and offers as the API gives them), node/config, node/executor and
// node/repo; never node itself or p2p.
package doctor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/executor"
	"github.com/idlegrid/idlegrid/node/repo"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
)

// Outcomes of a doctor's check.
const (
	CheckOK   = "ok"
	CheckWarn = "warn" // works, but not as well as it could
	CheckFail = "fail" // a provider cannot sell, or sells badly, until fixed
	CheckSkip = "skip" // cannot be checked now; Detail says why
)

// Check is one finding of Run: what was checked, how it stands, and
// what to do about it.
type Check struct {
	Name   string `json:"check"`
	Status string `json:"status"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// Input is what Run looks at: the repository and its config,
// the running daemon's status and book if one answers (nil otherwise),
// and the GPU source to read (fake, for tests; empty reads NVML).
type Input struct {
	Repo   *repo.Repo
	Config config.Config
	Daemon *api.Status
	Offers []api.OfferView
	Fake   string
	// Docker is the engine to ask; nil makes one from DOCKER_HOST.
	Docker *executor.Docker
	// Now is the time to judge clocks by; zero: time.Now.
	Now time.Time
}

// minImageDisk is the free space below which the engine's disk is a
// warning: one CUDA image is 5 to 20 GiB.
const minImageDisk = 20 << 30

// Run checks what a provider needs, in order: the repository, the
// GPUs through NVML, the Docker engine, GPUs in a container, disk for
// images, ports, reachability and the clock. It never changes anything.
func Run(ctx context.Context, in Input) []Check {
	var out []Check
	add := func(c Check) { out = append(out, c) }
	add(checkRepo(in.Repo))
	provider := in.Config.Provider.Enabled
	gpus := checkNVML(ctx, in.Fake, in.Config)
	add(gpus.Check)

	d := in.Docker
	if d == nil {
		var err error
		if d, err = executor.NewDocker(); err != nil {
			add(Check{Name: "docker", Status: CheckFail, Detail: err.Error()})
		} else {
			defer d.Close()
		}
	}
	var engine *executor.Engine
	if d != nil {
		e, err := d.Engine(ctx)
		switch {
		case err != nil && provider:
			add(Check{Name: "docker", Status: CheckFail, Detail: oneLineErr(err), Fix: "install Docker (apt-get install docker.io) and start it, or set DOCKER_HOST; leased jobs run as containers"})
		case err != nil:
			add(Check{Name: "docker", Status: CheckSkip, Detail: "no engine answers (" + oneLineErr(err) + "); a renter needs none"})
		default:
			engine = &e
			add(Check{Name: "docker", Status: CheckOK, Detail: fmt.Sprintf("engine %s, runtimes %s, data in %s", e.Version, strings.Join(e.Runtimes, ", "), e.RootDir)})
		}
	}
	add(checkGPURuntime(engine, gpus.count))
	add(checkGPUsInContainer(ctx, d, engine, gpus.uuids))
	add(checkImageDisk(engine))
	add(checkPorts(in.Config, in.Daemon))
	add(checkReachability(in.Daemon))
	add(checkClock(in.Daemon, in.Offers, in.Now))
	return out
}

func oneLineErr(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }

// checkRepo: the identity key and API token readable by the owner only,
// and the folder not writable by others.
func checkRepo(r *repo.Repo) Check {
	c := Check{Name: "repository", Status: CheckOK, Detail: r.Path}
	var bad []string
	for _, f := range []string{repo.IdentityFile, repo.SwarmKeyFile, "api.token"} {
		st, err := os.Stat(filepath.Join(r.Path, f))
		if err != nil {
			continue // absent: a public swarm, or no daemon has run yet
		}
		if st.Mode().Perm()&0o077 != 0 {
			bad = append(bad, fmt.Sprintf("%s is mode %04o", f, st.Mode().Perm()))
		}
	}
	if st, err := os.Stat(r.Path); err != nil {
		return Check{Name: "repository", Status: CheckFail, Detail: err.Error(), Fix: "idlegrid init"}
	} else if st.Mode().Perm()&0o022 != 0 {
		bad = append(bad, fmt.Sprintf("the folder is mode %04o (others may write)", st.Mode().Perm()))
	}
	if len(bad) > 0 {
		c.Status = CheckFail
		c.Detail = r.Path + ": " + strings.Join(bad, "; ")
		c.Fix = fmt.Sprintf("chmod 700 %s && chmod 600 %s/*.key %s/api.token", r.Path, r.Path, r.Path)
	}
	return c
}

type gpuFinding struct {
	Check
	count int
	uuids []string
}

func checkNVML(ctx context.Context, fake string, cfg config.Config) gpuFinding {
	if fake == "" {
		if m, ok := strings.CutPrefix(cfg.Provider.GPUSource, "fake:"); ok {
			return checkFakeSource(ctx, m, cfg.Provider.GPUSource)
		}
	}
	inv, err := attest.LocalInventory(ctx, fake)
	needs := cfg.Provider.Enabled && cfg.Provider.GPUSource != "static"
	switch {
	case err != nil || inv.Unavailable != "":
		why := inv.Unavailable
		if err != nil {
			why = oneLineErr(err)
		}
		st := CheckSkip
		if needs {
			st = CheckFail
		}
		return gpuFinding{Check: Check{Name: "nvml", Status: st, Detail: "no GPUs: " + why,
			Fix: "install the NVIDIA driver (nvidia-smi must list the GPUs); a provider on provider.gpu_source = \"nvml\" sells none until then"}}
	}
	f := gpuFinding{Check: Check{Name: "nvml", Status: CheckOK, Detail: fmt.Sprintf("%s: driver %s, CUDA %s, %d GPUs", inv.Source, inv.DriverVersion, inv.CUDAVersion, len(inv.GPUs))}, count: len(inv.GPUs)}
	for _, g := range inv.GPUs {
		f.uuids = append(f.uuids, g.UUID)
	}
	return f
}

// checkFakeSource reads the mock machine a provider sells
// (provider.gpu_source = "fake:…"): it passes as the fake it is, with no
// GPU for a container to attach.
func checkFakeSource(ctx context.Context, machine, source string) gpuFinding {
	inv, err := attest.LocalInventory(ctx, machine)
	if err != nil {
		return gpuFinding{Check: Check{Name: "nvml", Status: CheckFail, Detail: source + ": " + oneLineErr(err), Fix: "idlegrid config set provider.gpu_source nvml"}}
	}
	return gpuFinding{Check: Check{Name: "nvml", Status: CheckOK,
		Detail: fmt.Sprintf("a fake: provider.gpu_source = %q sells go-nvml's mock %s, %d GPUs, attested like real ones; no real GPU is read", source, machine, len(inv.GPUs))}}
}

// checkGPURuntime: the engine can attach GPUs through the NVIDIA runtime
// or CDI.
func checkGPURuntime(e *executor.Engine, gpus int) Check {
	c := Check{Name: "gpu runtime"}
	switch {
	case e == nil:
		c.Status, c.Detail = CheckSkip, "no Docker engine"
	case slices.Contains(e.Runtimes, "nvidia") || slices.ContainsFunc(e.CDIDevices, func(d string) bool { return strings.HasPrefix(d, "nvidia.com/gpu") }):
		c.Status, c.Detail = CheckOK, "the engine attaches GPUs (NVIDIA runtime or CDI)"
	case gpus == 0:
		c.Status, c.Detail = CheckSkip, "no GPUs on this machine, no NVIDIA runtime in the engine"
	default:
		c.Status, c.Detail = CheckFail, "the engine has no NVIDIA runtime and no CDI GPU devices: containers cannot get GPUs"
		c.Fix = "install the NVIDIA Container Toolkit, then: nvidia-ctk runtime configure --runtime=docker && systemctl restart docker"
	}
	return c
}

// checkGPUsInContainer runs the busybox image with every GPU attached and
// nvidia-smi -L (which the NVIDIA runtime mounts into any container).
func checkGPUsInContainer(ctx context.Context, d *executor.Docker, e *executor.Engine, uuids []string) Check {
	c := Check{Name: "gpus in a container"}
	if e == nil || len(uuids) == 0 {
		c.Status, c.Detail = CheckSkip, "needs a Docker engine and GPUs"
		return c
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	image, err := d.EnsureBusybox(ctx)
	if err != nil {
		c.Status, c.Detail = CheckFail, oneLineErr(err)
		return c
	}
	var stdout, stderr lockedBuffer
	job, err := d.Start(ctx, executor.Spec{LeaseID: fmt.Sprintf("doctor-%d", time.Now().UnixNano()), Image: image, Command: []string{"nvidia-smi", "-L"}, GPUs: uuids},
		executor.Output{Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		c.Status, c.Detail = CheckFail, oneLineErr(err)
		if errors.Is(err, executor.ErrNoGPUSupport) {
			c.Fix = "install the NVIDIA Container Toolkit and restart Docker"
		}
		return c
	}
	code, err := job.Wait(ctx)
	job.Stop(context.WithoutCancel(ctx), 0) // removes the container
	seen := strings.Count(stdout.String(), "GPU ")
	switch {
	case err != nil:
		c.Status, c.Detail = CheckFail, oneLineErr(err)
	case code != 0 || seen < len(uuids):
		c.Status, c.Detail = CheckFail, fmt.Sprintf("nvidia-smi -L in a container saw %d of %d GPUs (exit %d): %s", seen, len(uuids), code, strings.TrimSpace(stdout.String()+" "+stderr.String()))
	default:
		c.Status, c.Detail = CheckOK, fmt.Sprintf("a container sees all %d GPUs", len(uuids))
	}
	return c
}

// checkImageDisk: free space where the engine keeps images.
func checkImageDisk(e *executor.Engine) Check {
	c := Check{Name: "disk for images"}
	if e == nil || e.RootDir == "" {
		c.Status, c.Detail = CheckSkip, "no Docker engine"
		return c
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(e.RootDir, &st); err != nil {
		c.Status, c.Detail = CheckSkip, fmt.Sprintf("%s: %v (an engine on another machine?)", e.RootDir, err)
		return c
	}
	free := st.Bavail * uint64(st.Bsize)
	c.Detail = fmt.Sprintf("%.1f GiB free in %s", float64(free)/(1<<30), e.RootDir)
	c.Status = CheckOK
	if free < minImageDisk {
		c.Status, c.Fix = CheckWarn, "free space under "+e.RootDir+": one CUDA image takes 5 to 20 GiB"
	}
	return c
}

// checkPorts: every TCP listen port and the API port can be bound, or
// are the running daemon's.
func checkPorts(cfg config.Config, daemon *api.Status) Check {
	c := Check{Name: "ports", Status: CheckOK}
	if daemon != nil {
		c.Detail = "held by the running daemon: " + strings.Join(daemon.Listen, ", ")
		return c
	}
	var busy, free []string
	try := func(addr string) {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			busy = append(busy, fmt.Sprintf("%s (%v)", addr, errors.Unwrap(err)))
			return
		}
		free = append(free, addr)
		l.Close()
	}
	for _, s := range cfg.Network.Listen {
		a, err := ma.NewMultiaddr(s)
		if err != nil {
			continue
		}
		port, err := a.ValueForProtocol(ma.P_TCP)
		if err != nil || port == "0" {
			continue
		}
		ip, err := manet.ToIP(a)
		if err != nil {
			continue
		}
		try(net.JoinHostPort(ip.String(), port))
	}
	if cfg.API.Port != 0 {
		try(fmt.Sprintf("127.0.0.1:%d", cfg.API.Port))
	}
	c.Detail = "free: " + strings.Join(free, ", ")
	if len(free) == 0 {
		c.Detail = "nothing fixed to bind (port 0 everywhere)"
	}
	if len(busy) > 0 {
		c.Status = CheckFail
		c.Detail = "taken: " + strings.Join(busy, "; ")
		c.Fix = "stop what holds them (ss -ltnp), or change network.listen / api.port"
	}
	return c
}

// checkReachability asks the running daemon how peers reach it.
func checkReachability(daemon *api.Status) Check {
	c := Check{Name: "reachability"}
	switch {
	case daemon == nil:
		c.Status, c.Detail = CheckSkip, "no daemon answers: start `idlegrid daemon` and run doctor again"
	case daemon.Reachability.How == "direct":
		c.Status, c.Detail = CheckOK, "public: peers dial this node directly"
	case daemon.Reachability.How == "relayed":
		c.Status, c.Detail = CheckWarn, "behind a NAT, reached through relays; hole punching makes connections direct where the NATs allow"
		c.Fix = "forward the listen port on the router (or enable UPnP), or set network.announce to the public address"
	case daemon.Reachability.State == "private":
		c.Status, c.Detail = CheckFail, "behind a NAT with no relay reservation: renters cannot reach this node"
		c.Fix = "keep nat.auto_relay on and connect to public daemons of the swarm, or forward the listen port"
	default:
		c.Status, c.Detail = CheckSkip, "not known yet (AutoNAT asks peers to dial back); run doctor again in a minute"
	}
	return c
}

// clockAhead is how far ahead of this clock most offers may be stamped
// before the clock is called behind.
const clockAhead = 30 * time.Second

// checkClock compares this clock with the swarm's: offers are stamped
// when made, so offers made "in the future" mean this clock is behind.
// One that runs far ahead makes every offer look expired: an empty book
// with peers connected.
func checkClock(daemon *api.Status, offers []api.OfferView, now time.Time) Check {
	c := Check{Name: "clock"}
	if now.IsZero() {
		now = time.Now()
	}
	if daemon == nil {
		c.Status, c.Detail = CheckSkip, "no daemon answers: the swarm's clocks are read from its book"
		return c
	}
	if len(offers) == 0 {
		if daemon.Peers > 0 {
			c.Status, c.Detail = CheckWarn, fmt.Sprintf("%d peers and no offer in the book: if this clock runs ahead, every offer looks expired", daemon.Peers)
			c.Fix = "check the time: timedatectl (NTP synchronised: yes)"
		} else {
			c.Status, c.Detail = CheckSkip, "no offers to compare with"
		}
		return c
	}
	var ahead []time.Duration
	for _, o := range offers {
		if d := o.Created.Sub(now); d > clockAhead {
			ahead = append(ahead, d)
		}
	}
	if 2*len(ahead) > len(offers) {
		slices.Sort(ahead)
		c.Status = CheckFail
		c.Detail = fmt.Sprintf("%d of %d offers were made %s or more after this clock's now: this clock is behind", len(ahead), len(offers), ahead[len(ahead)/2].Round(time.Second))
		c.Fix = "synchronise the clock: timedatectl set-ntp true; leases and receipts are timed by it"
		return c
	}
	c.Status, c.Detail = CheckOK, fmt.Sprintf("in step with the makers of %d offers", len(offers)-len(ahead))
	return c
}

// lockedBuffer is a strings.Builder a job's output goroutine writes while
// the doctor reads it afterwards.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
