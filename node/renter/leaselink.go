package renter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/idlegrid/idlegrid/node/fault"
	"github.com/idlegrid/idlegrid/node/repo"
	"github.com/idlegrid/idlegrid/node/transfer"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// LeaseLink reaches the container of one of a repository's rentals, from
// a process of its own: the rent that follows the job holds the
// repository, so a link takes only the repository's identity, its swarm
// settings and the note the rental keeps beside its output.
type LeaseLink struct {
	h        host.Host
	sw       p2p.Swarm
	key      crypto.PrivKey
	provider peer.ID
	leaseID  string
}

// DialLease connects to the provider of the rental leaseID made from r:
// a fault.ErrInvalid for an ID no lease has, a fault.ErrNotFound for a
// rental r did not make.
func DialLease(ctx context.Context, r *repo.Repo, leaseID string) (*LeaseLink, error) {
	cfg, err := r.Config()
	if err != nil {
		return nil, err
	}
	if err := transfer.CheckLeaseID(leaseID); err != nil {
		return nil, fault.Mark(fault.ErrInvalid, err)
	}
	ai, err := ReadProviderNote(filepath.Join(r.Path, repo.LogsDir), leaseID)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fault.Mark(fault.ErrNotFound, fmt.Errorf("no rental %s made from %s", leaseID, r.Path))
	}
	if err != nil {
		return nil, err
	}
	p, addrs := ai.ID, ai.Addrs
	key, psk, err := r.Keys(cfg)
	if err != nil {
		return nil, err
	}
	sw := p2p.Swarm{Name: cfg.Swarm.Name, PSK: psk}
	h, err := p2p.NewHost(p2p.HostConfig{
		Identity: key, Swarm: sw, // it listens nowhere: it dials
		ConnLow: 4, ConnHigh: 8, ConnGrace: time.Minute, Limits: p2p.DefaultLimits, UserAgent: "idlegrid-link",
	})
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := h.Connect(cctx, peer.AddrInfo{ID: p, Addrs: addrs}); err != nil {
		h.Close()
		return nil, fmt.Errorf("lease %s: provider %s not reachable at %v: %w", leaseID, p, addrs, err)
	}
	return &LeaseLink{h: h, sw: sw, key: key, provider: p, leaseID: leaseID}, nil
}

// Close closes the link's host.
func (l *LeaseLink) Close() error { return l.h.Close() }

// Forward opens a connection to TCP port inside the lease's container.
func (l *LeaseLink) Forward(ctx context.Context, port int) (network.Stream, error) {
	return p2p.OpenSession(ctx, l.h, l.sw, l.provider, &pb.SessionRequest{LeaseId: l.leaseID, Kind: &pb.SessionRequest_ForwardPort{ForwardPort: uint32(port)}})
}

// ForwardConn forwards c to TCP port inside the lease's container, both
// ways, until both directions have ended or ctx ends; it closes c.
func (l *LeaseLink) ForwardConn(ctx context.Context, port int, c io.ReadWriteCloser) error {
	s, err := l.Forward(ctx, port)
	if err != nil {
		c.Close()
		return err
	}
	p2p.Splice(ctx, s, c)
	return nil
}

// Watch returns a stream the provider holds open until the lease's job
// ends: its end (a read's error) says the lease has no job left.
func (l *LeaseLink) Watch(ctx context.Context) (network.Stream, error) {
	return p2p.OpenSession(ctx, l.h, l.sw, l.provider, &pb.SessionRequest{LeaseId: l.leaseID, Kind: &pb.SessionRequest_Watch{Watch: true}})
}

// ExecIO is where a command run in a lease takes its input and puts its
// output; Stdin nil: no input. Resize carries a terminal's new sizes.
type ExecIO struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Resize         <-chan [2]uint
}

// Exec runs req in the lease's container and returns its exit code.
func (l *LeaseLink) Exec(ctx context.Context, req *pb.ExecRequest, eio ExecIO) (int, error) {
	req.Stdin = eio.Stdin != nil
	s, err := p2p.OpenSession(ctx, l.h, l.sw, l.provider, &pb.SessionRequest{LeaseId: l.leaseID, Kind: &pb.SessionRequest_Exec{Exec: req}})
	if err != nil {
		return -1, err
	}
	defer s.Close()
	stop := context.AfterFunc(ctx, func() { s.Reset() })
	defer stop()
	in := p2p.NewExecInput(s)
	if eio.Stdin != nil {
		go in.Copy(eio.Stdin)
	}
	if eio.Resize != nil {
		go func() {
			for rc := range eio.Resize {
				if in.Resize(rc[0], rc[1]) != nil {
					return
				}
			}
		}()
	}
	return p2p.ReadExecOutput(s, eio.Stdout, eio.Stderr)
}

// Extend asks the lease's provider to extend its term by add (whole
// seconds): it asks for the terms as they stand (checking this renter's
// own signatures on them, so a provider cannot pass off other terms),
// signs the next extension, and returns the term once the provider
// countersigned it. The provider's calendar and longest lease decide.
func (l *LeaseLink) Extend(ctx context.Context, add time.Duration) (market.Term, error) {
	me, err := peer.IDFromPrivateKey(l.key)
	if err != nil {
		return market.Term{}, err
	}
	reply, err := l.Request(ctx, &pb.LeaseRequest{Kind: &pb.LeaseRequest_TermsLeaseId{TermsLeaseId: l.leaseID}})
	if err != nil {
		return market.Term{}, err
	}
	if reply.Lease == nil {
		return market.Term{}, fmt.Errorf("lease %s: %w", l.leaseID, market.RejectOf(reply))
	}
	lease, err := market.OpenCoSigned[*pb.Lease](reply.Lease, market.Renter, market.Provider)
	if err != nil || lease.Id != l.leaseID || peer.ID(lease.Renter) != me || peer.ID(lease.Provider) != l.provider {
		return market.Term{}, fmt.Errorf("lease %s: the provider answered with terms this renter did not sign (%v)", l.leaseID, err)
	}
	t := market.LeaseTerm(lease, reply.Lease)
	if reply.Extension != nil {
		if t, err = t.Apply(reply.Extension, market.Renter, market.Provider); err != nil {
			return market.Term{}, fmt.Errorf("lease %s: the provider's last extension: %w", l.leaseID, err)
		}
	}
	cs, err := market.NewCoSigned(l.key, market.Renter, t.NewExtension(add))
	if err != nil {
		return market.Term{}, err
	}
	if reply, err = l.Request(ctx, &pb.LeaseRequest{Kind: &pb.LeaseRequest_Extend{Extend: cs}}); err != nil {
		return market.Term{}, err
	}
	if reply.Extension == nil {
		return market.Term{}, fmt.Errorf("lease %s: extension refused: %w", l.leaseID, market.RejectOf(reply))
	}
	if !market.SameBody(reply.Extension, cs) {
		return market.Term{}, fmt.Errorf("lease %s: the provider countersigned other terms than the extension asked", l.leaseID)
	}
	return t.Extend(reply.Extension, market.Renter, market.Provider)
}

// Request sends a lease request to the lease's provider.
func (l *LeaseLink) Request(ctx context.Context, req *pb.LeaseRequest) (*pb.LeaseReply, error) {
	return p2p.RequestLease(ctx, l.h, l.sw, l.provider, req)
}

// cpWork bounds an unpack or a pack of idlegrid cp in the job.
const cpWork = time.Hour

// CopyIn packs local as a tar for remote (a path in /workspace), uploads
// it to the provider (resuming a stream that breaks, from where its copy
// ends) and has the provider unpack it in the running job. It returns
// the tar as packed: each file's SHA-256, for the caller to check there.
func (l *LeaseLink) CopyIn(ctx context.Context, local, remote string, say func(string, ...any)) (transfer.Packed, error) {
	pk, err := transfer.Pack(local, remote, "")
	if err != nil {
		return pk, err
	}
	defer pk.Remove()
	if _, err := uploadResuming(ctx, clock.Or(nil), pk, func(open func(int64) (io.ReadCloser, error)) (int64, error) {
		return p2p.Upload(ctx, l.h, l.sw, l.provider, pk.Sum, pk.Size, open)
	}, func(string, ...any) {}, say); err != nil {
		return pk, fmt.Errorf("upload %s: %w", remote, err)
	}
	in := &pb.Input{Sha256: pk.Sum, Size: uint64(pk.Size), Path: remote}
	if err := p2p.SessionWork(ctx, l.h, l.sw, l.provider, &pb.SessionRequest{LeaseId: l.leaseID, Kind: &pb.SessionRequest_Unpack{Unpack: in}}, cpWork); err != nil {
		return pk, fmt.Errorf("unpack %s: %w", remote, err)
	}
	return pk, nil
}

// CopyOut has the provider pack remote (a path in /workspace) of the
// running job as a tar and downloads it (resuming a stream that breaks,
// from what arrived), checks the tar's SHA-256 and unpacks it at local,
// noting each file's SHA-256 in sums. It returns the tar's size.
func (l *LeaseLink) CopyOut(ctx context.Context, remote, local string, sums map[string]string, say func(string, ...any)) (int64, error) {
	index := market.MaxOutputs + int(rand.Uint32N(1<<30))
	if err := p2p.SessionWork(ctx, l.h, l.sw, l.provider, &pb.SessionRequest{LeaseId: l.leaseID, Kind: &pb.SessionRequest_Pack{Pack: &pb.PackRequest{Path: remote, Index: uint32(index)}}}, cpWork); err != nil {
		return 0, fmt.Errorf("pack %s: %w", remote, err)
	}
	return downloadResuming(ctx, clock.Or(nil), remote, local, sums, func(offset int64, w io.Writer) (int64, []byte, error) {
		return p2p.Download(ctx, l.h, l.sw, l.provider, l.leaseID, index, offset, w)
	}, say)
}

// noteProvider writes the rental's provider note, for exec and
// port-forward; a note that cannot be written costs those, not the
// rental.
func (f *Follow) noteProvider() {
	p := peer.ID(f.Lease.Provider)
	note := ProviderNote{Provider: p.String(), Addrs: []string{}}
	if f.R.AddrsOf != nil {
		for _, a := range f.R.AddrsOf(p) {
			note.Addrs = append(note.Addrs, a.String())
		}
	}
	path := filepath.Join(f.R.LogsDir, f.Lease.Id+ProviderSuffix)
	if _, err := os.Stat(path); err == nil && len(note.Addrs) == 0 {
		return // a follow resumed before the provider's addresses are known
	}
	b, _ := json.Marshal(note)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		f.R.Log.Warn("provider note not kept: exec and port-forward will not find the lease", "err", err)
		return
	}
	if err := os.Rename(tmp, path); err != nil {
		f.R.Log.Warn("provider note not kept: exec and port-forward will not find the lease", "err", err)
	}
}

// ProviderSuffix names the note a rental keeps beside its output: which
// provider runs the lease, and where it was reached.
const ProviderSuffix = ".provider"

// ProviderNote is that note.
type ProviderNote struct {
	Provider string   `json:"provider"`
	Addrs    []string `json:"addrs"`
}

// ReadProviderNote reads, from the logs folder dir, which provider runs
// lease leaseID and where it was reached (addresses that do not parse are
// left out); fs.ErrNotExist when this repository made no such rental.
func ReadProviderNote(dir, leaseID string) (peer.AddrInfo, error) {
	b, err := os.ReadFile(filepath.Join(dir, leaseID+ProviderSuffix))
	if err != nil {
		return peer.AddrInfo{}, err
	}
	var note ProviderNote
	if err := json.Unmarshal(b, &note); err != nil {
		return peer.AddrInfo{}, fmt.Errorf("lease %s: provider note: %w", leaseID, err)
	}
	p, err := peer.Decode(note.Provider)
	if err != nil {
		return peer.AddrInfo{}, fmt.Errorf("lease %s: provider note: %w", leaseID, err)
	}
	ai := peer.AddrInfo{ID: p}
	for _, s := range note.Addrs {
		if a, err := ma.NewMultiaddr(s); err == nil {
			ai.Addrs = append(ai.Addrs, a)
		}
	}
	return ai, nil
}
