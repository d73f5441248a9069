package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/inert"
	"github.com/idlegrid/idlegrid/node"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/repo"
	"github.com/idlegrid/idlegrid/node/views"
	"github.com/spf13/cobra"
)

func newRentCmd(e *env) *cobra.Command {
	var rf rentFlags
	c := &cobra.Command{
		Use:   "rent [flags] -- [CMD ARGS...]",
		Short: "Rent GPUs and run a container on them: match, attest, lease, run, pay",
		Long: `Rent GPUs for one job, as a light client: no daemon needed.

rent joins the swarm (network.bootstrap of the repository, or --bootstrap),
gathers offers until some fit (a progress line on stderr), ranks them by
effective price, challenges the best provider to attest its GPUs, proposes a
lease both sides sign, and runs --image with CMD ARGS on the leased GPUs (the
provider pulls the image first, before the lease, if it has not got it;
--image-from-docker sends one of this machine's instead). Each --upload is
sent as a tar before the lease too (not billed; a broken stream resumes
where the provider's copy ends; the provider checks its SHA-256 and its
jobs.max_upload_mib) and unpacked in /workspace before the job starts (the
image needs sh and tar). Each --download is packed by the provider once the
job's command ended, before the container goes, and downloaded after the
receipt (SHA-256 checked, resumed if the stream breaks, unpacked into a
place that must not exist yet); rent exits 1 when one fails and the job
exited 0. The
job's stdout and stderr stream back apart (and are kept under the
repository's logs/ folder for 'idlegrid logs'); its telemetry is verified as
it arrives. At the end both sides sign a receipt for the metered time, which
is printed and settled in the local ledger. A refused lease moves on to the
next candidate by itself, and so does one that cannot be reached or
attested, until --try-for is spent; providers that failed so rank last in
the daemon's later rentals. A provider whose GPUs no attestation backs
(listed by hand in provider.gpus, not read through NVML) is passed by unless
--no-attest, which leases on its word.

Ctrl-C cancels the lease: the provider stops the job and the receipt, for
what ran, is still printed. Without a repository, rent uses a throw-away
identity (and keeps nothing).

With --detach, rent returns once the job runs and prints the lease ID on
stdout: the job runs on with no renter attached, to its end or the lease's
term, and 'idlegrid attach LEASE' follows it again later, from where its
kept output ends, to the receipt (the provider keeps what it has not sent:
the engine's log while the job runs, the last MiB after it ended). It needs
a repository, to keep the lease in.

With --json, stdout holds one JSON object at the end (lease, receipt,
attempts, timings) and nothing else: the job's stdout goes to stderr with
its stderr, and with a repository both are kept for 'idlegrid logs LEASE'.

Exit codes: the job's own (0 to 255) when it ran to its end; 122 when no
offer fitted within --gather; 123 when every candidate refused, failed
attestation or could not be reached; 124 when the job's end was never seen
(the provider vanished; the renter signed the receipt alone); 130 when
Ctrl-C cancelled the lease; 1 for any other error and 2 for a wrong command
line, before anything was rented.`,
		Example: `  idlegrid rent --gpu A100 --count 1 --hours 2 --max-price 2.50 --tier silver \
      --image pytorch/pytorch:2.4 -- python train.py
  idlegrid rent --gpu A100 --count 16 --max-pair-rtt 10ms --hours 1 --max-price 2.00 \
      --image pytorch/pytorch:2.4 -- sh -c 'torchrun --node-rank "$IDLEGRID_POOL_RANK" …'
  idlegrid rent --bootstrap /ip4/127.0.0.1/tcp/4001/p2p/12D3KooW… --gpu H100 \
      --image idlegrid-test/busybox:1 -- sh -c 'nvidia-smi || echo "$IDLEGRID_GPUS"'`,
		RunE: func(cmd *cobra.Command, args []string) error {
			req, err := rf.request(e, args)
			if err != nil {
				return err
			}
			return runRent(e, req, rf.bootstrap)
		},
	}
	bidFlags(c, &rf.req.BidRequest, &rf.gpu)
	f := c.Flags()
	f.BoolVarP(&rf.req.Detach, "detach", "d", false, "return once the job runs, printing the lease ID; 'idlegrid attach LEASE' follows it again")
	f.StringArrayVar(&rf.req.Env, "env", nil, "KEY=VALUE for the job's environment (repeatable)")
	f.StringArrayVar(&rf.downloads, "download", nil, "/workspace/PATH:LOCAL: a file or folder the provider packs once the job's command ended, before the container goes, downloaded after the receipt into LOCAL (which must not exist), checked by SHA-256, resumed if the stream breaks (repeatable, up to 8)")
	f.StringArrayVar(&rf.uploads, "upload", nil, "LOCAL:/workspace/PATH: a file or folder the provider puts in the container before the job starts, uploaded before the lease (not billed), checked by SHA-256, resumed if the stream breaks (repeatable, up to 8)")
	f.StringArrayVar(&rf.datasets, "dataset", nil, "CID:/PATH: a dataset this node keeps (idlegrid dataset add) that the provider stages before the job starts, from this node and the swarm's other holders in parallel, each block checked against the CID, and mounts read-only at PATH, such as /data; staging runs on the lease's clock (repeatable, up to 8)")
	f.StringArrayVar(&rf.bootstrap, "bootstrap", nil, "bootstrap peer multiaddr, replacing network.bootstrap (repeatable)")
	f.DurationVar(&rf.gather, "gather", 15*time.Second, "how long to wait for fitting offers")
	f.IntVar(&rf.req.Candidates, "candidates", 0, "providers to try at most, best first; 0: as many as --try-for allows")
	f.DurationVar(&rf.tryFor, "try-for", time.Minute, "how long to spend reaching, attesting and proposing to providers before giving up")
	f.BoolVar(&rf.req.SkipAttest, "no-attest", false, "also lease from providers no attestation backs (GPUs listed by hand), and challenge none: the risk is yours, since nothing then checks the model, memory or count a provider claims, and telemetry it signs proves only that it signed it")
	f.StringVar(&rf.req.ImageFromDocker, "image-from-docker", "", "instead of --image, an image of this machine's Docker engine (one you built): sent to the provider without the layers it has, before the lease")
	f.DurationVar(&rf.maxPair, "max-pair-rtt", 0, "take --count GPUs from several providers (a micro-pool) whose every pair is estimated within this RTT, a lease each, all or nothing; the job finds its ranks in IDLEGRID_POOL_* (0: one provider)")
	addJSONFlag(c, e)
	return c
}

// rentFlags are rent's flags, read into a request by request.
type rentFlags struct {
	req                     api.RentRequest
	gpu                     string
	bootstrap               []string
	gather, tryFor, maxPair time.Duration
	uploads, downloads      []string
	datasets                []string
}

// request checks the flags and makes the rental's request of them and
// the job's command, args.
func (f *rentFlags) request(e *env, args []string) (api.RentRequest, error) {
	switch {
	case f.req.Image == "" && f.req.ImageFromDocker == "":
		return api.RentRequest{}, usagef("--image: name the container image to run (or --image-from-docker, one of this machine's)")
	case f.req.Image != "" && f.req.ImageFromDocker != "":
		return api.RentRequest{}, usagef("--image %s and --image-from-docker %s: name one", f.req.Image, f.req.ImageFromDocker)
	}
	if f.gather <= 0 || f.gather > 10*time.Minute {
		return api.RentRequest{}, usagef("--gather %s: want more than 0 and at most 10m", f.gather)
	}
	if f.tryFor <= 0 || f.tryFor > 30*time.Minute {
		return api.RentRequest{}, usagef("--try-for %s: want more than 0 and at most 30m", f.tryFor)
	}
	if f.req.Candidates < 0 || f.req.Candidates > 65536 {
		return api.RentRequest{}, usagef("--candidates %d: want 0 (as many as --try-for allows) to 65536", f.req.Candidates)
	}
	if f.maxPair < 0 || f.maxPair > time.Minute {
		return api.RentRequest{}, usagef("--max-pair-rtt %s: want 0 (one provider) to 1m", f.maxPair)
	}
	for _, u := range f.uploads {
		i := strings.LastIndex(u, ":/workspace")
		if i <= 0 {
			return api.RentRequest{}, usagef("--upload %q: want LOCAL:/workspace/PATH, such as ./data:/workspace/data", u)
		}
		f.req.Uploads = append(f.req.Uploads, api.Upload{Local: u[:i], Path: u[i+1:]})
	}
	for _, d := range f.datasets {
		id, at, ok := strings.Cut(d, ":")
		if !ok || id == "" {
			return api.RentRequest{}, usagef("--dataset %q: want CID:/PATH, such as bafybei…:/data", d)
		}
		if err := market.ValidateMountPath(at); err != nil {
			return api.RentRequest{}, usagef("--dataset %q: the path %v", d, err)
		}
		f.req.Datasets = append(f.req.Datasets, api.DatasetMount{CID: id, Path: at})
	}
	for _, d := range f.downloads {
		remote, local, ok := strings.Cut(d, ":")
		if !ok || local == "" || !strings.HasPrefix(remote, "/workspace") {
			return api.RentRequest{}, usagef("--download %q: want /workspace/PATH:LOCAL, such as /workspace/out:./out", d)
		}
		f.req.Downloads = append(f.req.Downloads, api.Download{Path: remote, Local: local})
	}
	if f.req.Detach {
		if f.maxPair > 0 {
			return api.RentRequest{}, usagef("--detach with --max-pair-rtt: a micro-pool is followed to its end; rent it without --detach")
		}
		if _, err := repo.Open(e.repoPath()); errors.Is(err, repo.ErrNoRepo) {
			return api.RentRequest{}, usagef("--detach: no repository at %s to keep the lease in, for 'idlegrid attach' to follow it later; create one with 'idlegrid init --profile renter'", e.repoPath())
		}
	}
	f.req.GPUs, f.req.Command, f.req.GatherMillis, f.req.TryMillis = splitGPUs(f.gpu), args, int(f.gather.Milliseconds()), int(f.tryFor.Milliseconds())
	f.req.MaxPairRTTMillis = int(f.maxPair.Milliseconds())
	return f.req, nil
}

// runRent rents as req asks, joining the swarm through bootstrap (or
// the repository's network.bootstrap), and prints what came of it.
func runRent(e *env, req api.RentRequest, bootstrap []string) error {
	n, done, err := e.lightNode(bootstrap, true)
	if err != nil {
		return err
	}
	defer done()
	lines := newProgressLines(e.stderr)
	progress, status := lines.step, lines.status
	if e.asJSON {
		progress, status = func(string) {}, func(string) {}
	}
	// With --json, stdout holds the result alone: the job's output
	// goes to stderr (and to the repository's logs/, as always).
	jobOut := e.stdout
	if e.asJSON {
		jobOut = e.stderr
	}
	res, err := n.Rent(e.ctx, req, node.RentOutput{Stdout: jobOut, Stderr: e.stderr, Progress: progress, Status: status})
	lines.end()
	if err != nil {
		printTried(progress, res.Tried)
		return rentFailed(err)
	}
	if e.asJSON {
		if err := e.printJSON(res); err != nil || res.Detached {
			return err
		}
		return rentEnded(e.ctx, res)
	}
	if res.Detached {
		fmt.Fprintln(e.stdout, res.Lease.ID)
		fmt.Fprintf(e.stderr, "idlegrid: lease %s runs on, detached; follow it with: idlegrid attach %s\n", res.Lease.ID, res.Lease.ID)
		return nil
	}
	printEnd(e, res)
	t := res.Timings
	path := "direct"
	if res.Relayed {
		path = "through a relay"
	}
	fmt.Fprintf(e.stderr, "idlegrid: first output after %s (discover %s, match %s, attest %s, image %s, negotiate %s, start %s); output came %s\n",
		ms(t.FirstOutput), ms(t.Discover), ms(t.Match), ms(t.Attest), ms(t.Pull), ms(t.Negotiate), ms(t.Start), path)
	return rentEnded(e.ctx, res)
}

func ms(d time.Duration) string { return d.Round(time.Millisecond).String() }

// The exit codes of rent beyond the job's own: it exits with the job's
// code (0 to 255) when the job ran to its end, and with these when it did
// not, in the range shells and docker run leave to the caller (1 and 2
// keep their meaning for every command: an error, a wrong command line).
// triedShown is how many of a failed rental's attempts rent prints.
const triedShown = 16

// printTried says why a failed rental's last triedShown attempts failed,
// and how many came before them: a walk past thousands of made-up offers
// tries thousands, and the last few say why it ended.
func printTried(progress func(string), tried []api.Attempt) {
	shown := tried[max(0, len(tried)-triedShown):]
	if more := len(tried) - len(shown); more > 0 {
		progress(fmt.Sprintf("tried %d more candidates before these", more))
	}
	for _, t := range shown {
		progress(fmt.Sprintf("tried %s (%s): %s", short(t.Provider), t.Stage, t.Reason))
	}
}

const (
	exitNothingFits  = 122 // no offer fitted the request within --gather
	exitNoProvider   = 123 // every candidate refused, failed attestation or could not be reached
	exitProviderLost = 124 // the job's end was never seen: the provider vanished mid-lease
	exitInterrupted  = 130 // Ctrl-C cancelled the lease (128 + SIGINT, as a shell reports it)
)

// exitError ends a command with code, saying err; name is its code in
// errorJSON.
type exitError struct {
	code int
	name string
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }

// rentFailed gives a rental that got no lease its exit code.
func rentFailed(err error) error {
	var np *node.NoProviderError
	switch {
	case !errors.As(err, &np):
		return err
	case len(np.Attempts) == 0:
		return exitError{exitNothingFits, "nothing_fits", err}
	default:
		return exitError{exitNoProvider, "refused", err}
	}
}

// rentReceipts is a rental's receipt, or its pool members' by rank.
func rentReceipts(res api.RentResult) []api.ReceiptView {
	if len(res.Pool) == 0 {
		return []api.ReceiptView{res.Receipt}
	}
	receipts := make([]api.ReceiptView, 0, len(res.Pool))
	for _, m := range res.Pool {
		receipts = append(receipts, m.Receipt)
	}
	return receipts
}

// printEnd prints a rental's receipts (its pool's, by rank) and its
// failed downloads on stderr.
func printEnd(e *env, res api.RentResult) {
	inert.Strings(&res)
	for _, d := range res.Downloads {
		if d.Error != "" {
			fmt.Fprintf(e.stderr, "idlegrid: download of %s to %s failed: %s\n", d.Path, d.Local, d.Error)
		}
	}
	for _, r := range rentReceipts(res) {
		fmt.Fprintf(e.stderr, "idlegrid: lease %s %s: %d s metered, %s %s, exit code %d, signed by %s\n",
			r.LeaseID, r.Outcome, r.MeteredSeconds, r.Amount, r.Currency, r.ExitCode, strings.Join(r.SignedBy, " and "))
		if r.Note != "" {
			fmt.Fprintf(e.stderr, "idlegrid: %s\n", r.Note)
		}
		if v := r.Voucher; v != nil {
			fmt.Fprintf(e.stderr, "idlegrid: paid by voucher %d on channel %s: it owes the provider %s token units in all\n", v.Nonce, v.Channel, v.Amount)
		}
	}
	if l := res.Lease; l.State == views.LeaseSettling {
		fmt.Fprintf(e.stderr, "idlegrid: lease %s is settling: this receipt, the renter's own, stands unless its provider is back by %s ('idlegrid leases' shows when it settled)\n",
			l.ID, l.SettleBy.Local().Format(time.DateTime))
	}
	if s := res.PoolSummary; s != nil {
		fmt.Fprintf(e.stderr, "idlegrid: pool of %d GPUs from %d providers: %s %s in all\n", s.GPUs, s.Providers, s.Amount, s.Currency)
	}
}

// rentEnded gives a rental that got its lease (or its pool's) the exit
// code of how the job ended: the first member's non-zero code, else 1
// when a download failed, else 0.
func rentEnded(ctx context.Context, res api.RentResult) error {
	if ctx.Err() != nil {
		return exitError{exitInterrupted, "interrupted", errors.New("interrupted: the lease was cancelled")}
	}
	for _, r := range rentReceipts(res) {
		switch {
		case r.ExitCode < 0:
			return exitError{exitProviderLost, "provider_lost", fmt.Errorf("lease %s: the job's end was not seen (%s)", r.LeaseID, cmp.Or(r.Note, r.Outcome))}
		case r.ExitCode != 0:
			return exitError{int(min(r.ExitCode, 255)), "job_failed", fmt.Errorf("lease %s: the job exited with code %d", r.LeaseID, r.ExitCode)}
		}
	}
	failed := 0
	for _, d := range res.Downloads {
		if d.Error != "" {
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d downloads failed (the job's output is kept under logs/)", failed, len(res.Downloads))
	}
	return nil
}

// errNoPeers is a command that must ask the swarm, run on a node that
// knows no peer to ask.
var errNoPeers = errors.New("no peers to ask")

// lightNode starts a light client from the repository, or from a throw-away
// one when there is none, with the API and P2P ports left to the system so
// it runs beside a daemon. done closes it (and removes a throw-away one).
// With needPeers it refuses to start with no bootstrap peer, which
// could only wait for peers that cannot learn of it. Its errors name
// what the user can change: --bootstrap, where it gave
// the peers or where no repository keeps any, else network.bootstrap.
func (e *env) lightNode(bootstrap []string, needPeers bool) (*node.Node, func(), error) {
	path, cleanup := e.repoPath(), func() {}
	throwaway := false
	r, err := repo.Open(path)
	if errors.Is(err, repo.ErrNoRepo) {
		tmp, terr := os.MkdirTemp("", "idlegrid-rent-")
		if terr != nil {
			return nil, nil, terr
		}
		cleanup = func() { os.RemoveAll(tmp) }
		if r, err = repo.Init(tmp, repo.InitOptions{Profile: config.ProfileRenter, ListenPort: 0, APIPort: 0, Bootstrap: bootstrap}); err != nil {
			cleanup()
			return nil, nil, err
		}
		fmt.Fprintf(e.stderr, "idlegrid: no repository at %s: renting with a throw-away identity\n", path)
		throwaway = true
	}
	if err != nil {
		return nil, nil, err
	}
	cfg, err := r.Config()
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	cfg.API.Port, cfg.Network.Listen = 0, config.ListenAddrs("0.0.0.0", 0, cfg.Swarm.KeyFile == "")
	if len(bootstrap) > 0 {
		cfg.Network.Bootstrap = bootstrap
	}
	if len(cfg.Network.Bootstrap) == 0 && needPeers {
		cleanup()
		if throwaway {
			return nil, nil, fmt.Errorf("%w: there is no repository at %s and no --bootstrap; name a peer of the swarm with --bootstrap /ip4/…/tcp/4001/p2p/12D3KooW…", errNoPeers, path)
		}
		return nil, nil, fmt.Errorf("%w: network.bootstrap in %s is empty and no --bootstrap was given; name a peer of the swarm with --bootstrap /ip4/…/tcp/4001/p2p/12D3KooW…, or keep some in network.bootstrap: idlegrid config set network.bootstrap '[\"/ip4/…/tcp/4001/p2p/12D3KooW…\"]'", errNoPeers, r.ConfigPath())
	}
	log, err := e.setupLogging(cfg.Log)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	n, err := node.New(r, cfg, node.Options{Light: true, Version: version, Logger: log})
	if err != nil {
		cleanup()
		return nil, nil, usageIfFlag(err, len(bootstrap) > 0)
	}
	if err := n.Start(e.ctx); err != nil {
		cleanup()
		var be *node.BootstrapError
		if errors.As(err, &be) && (len(bootstrap) > 0 || throwaway) {
			return nil, nil, fmt.Errorf("%w; check the --bootstrap addresses and that those peers are running", be.Err)
		}
		return nil, nil, err
	}
	return n, func() { n.Close(); cleanup() }, nil
}

// usageIfFlag reports a bad --bootstrap as a usage error.
func usageIfFlag(err error, fromFlag bool) error {
	if fromFlag && errors.Is(err, config.ErrConfig) {
		return usagef("--bootstrap: %v", err)
	}
	return err
}
