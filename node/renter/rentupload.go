package renter

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sync/atomic"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/idlegrid/idlegrid/node/fault"
	"github.com/idlegrid/idlegrid/node/records"
	"github.com/idlegrid/idlegrid/node/transfer"
	"github.com/idlegrid/idlegrid/node/views"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
)

// uploadTries bounds the streams one upload may take: a stream that
// breaks is resumed where the provider's copy ends.
const uploadTries = 5

// uploadPause is the wait before an upload resumes.
const uploadPause = 500 * time.Millisecond

// packUploads writes each upload as a tar for its path; the caller
// removes them.
func packUploads(ups []api.Upload) ([]transfer.Packed, error) {
	var packed []transfer.Packed
	fail := func(err error) ([]transfer.Packed, error) {
		for _, p := range packed {
			p.Remove()
		}
		return nil, fault.Invalid(err)
	}
	if len(ups) > market.MaxInputs {
		return fail(fmt.Errorf("uploads: %d; at most %d", len(ups), market.MaxInputs))
	}
	if len(ups) > 0 {
		transfer.SweepPacked("") // what killed rents left
	}
	for i, up := range ups {
		if !market.InWorkspace(up.Path) {
			return fail(fmt.Errorf("uploads[%d]: path %q: want a clean path in /workspace, such as /workspace/data", i, up.Path))
		}
		if _, err := os.Stat(up.Local); err != nil {
			return fail(fmt.Errorf("uploads[%d]: %w", i, err))
		}
		p, err := transfer.Pack(up.Local, up.Path, "")
		if err != nil {
			return fail(fmt.Errorf("uploads[%d]: %w", i, err))
		}
		packed = append(packed, p)
	}
	return packed, nil
}

// inputsOf names the packed uploads in a lease.
func inputsOf(packed []transfer.Packed) []*pb.Input {
	var ins []*pb.Input
	for _, p := range packed {
		ins = append(ins, &pb.Input{Sha256: p.Sum, Size: uint64(p.Size), Path: p.Dest})
	}
	return ins
}

// upload stages the packed uploads at provider p, before a lease: each
// resumed where a broken stream left the provider's copy, up to
// uploadTries streams. A provider's refusal is an *p2p.UploadRefusedError.
func (r *Renter) upload(ctx context.Context, p peer.ID, packed []transfer.Packed, out RentOutput, t *api.RentTimings) error {
	begin := r.Clock.Now()
	defer func() { t.Upload += r.Clock.Since(begin) }()
	for _, pk := range packed {
		had, err := uploadResuming(ctx, r.Clock, pk, func(open func(int64) (io.ReadCloser, error)) (int64, error) {
			return r.Net.Upload(ctx, p, pk.Sum, pk.Size, open)
		}, func(format string, a ...any) { out.status("%s: %s", Short(p), fmt.Sprintf(format, a...)) }, out.say)
		switch {
		case err != nil:
			return fmt.Errorf("upload %s: %w", pk.Dest, err)
		case had == pk.Size:
			out.say("%s: %s was there already (%s)", Short(p), pk.Dest, views.FormatBytes(uint64(pk.Size)))
		default:
			out.say("%s: uploaded %s (%s, from byte %d); the upload is not billed", Short(p), pk.Dest, views.FormatBytes(uint64(pk.Size)), had)
		}
	}
	return nil
}

// uploadResuming sends the packed tar with send, which makes one stream
// of it from where the provider's copy ends; a stream that breaks is
// resumed, up to uploadTries, and a refusal ends it. It returns how much
// of the tar the provider held before the last stream. status gets the
// bytes sent now and then, say each resume.
func uploadResuming(ctx context.Context, clk clock.Clock, pk transfer.Packed, send func(open func(int64) (io.ReadCloser, error)) (int64, error), status, say func(string, ...any)) (int64, error) {
	var sent atomic.Int64
	open := func(offset int64) (io.ReadCloser, error) {
		f, err := pk.Open(offset)
		if err != nil {
			return nil, err
		}
		sent.Store(offset)
		return &countingReader{ReadCloser: f, n: &sent, each: func(n int64) {
			status("uploading %s: %s of %s", pk.Dest, views.FormatBytes(uint64(n)), views.FormatBytes(uint64(pk.Size)))
		}}, nil
	}
	for try := 1; ; try++ {
		had, err := send(open)
		var refused *p2p.UploadRefusedError
		if err == nil || errors.As(err, &refused) || ctx.Err() != nil || try == uploadTries {
			return had, err
		}
		say("upload of %s broke off at %s of %s (%v); resuming", pk.Dest, views.FormatBytes(uint64(sent.Load())), views.FormatBytes(uint64(pk.Size)), err)
		select {
		case <-clk.After(uploadPause):
		case <-ctx.Done():
			return had, ctx.Err()
		}
	}
}

// countingReader counts what is read through it, calling each every 16 MiB.
type countingReader struct {
	io.ReadCloser
	n    *atomic.Int64
	each func(n int64)
}

func (c *countingReader) Read(b []byte) (int, error) {
	k, err := c.ReadCloser.Read(b)
	before := c.n.Load()
	after := c.n.Add(int64(k))
	if before>>24 != after>>24 {
		c.each(after)
	}
	return k, err
}

// outputsOf is the paths of a rental's downloads, for its lease.
func outputsOf(ds []api.Download) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Path)
	}
	return out
}

// checkDownloads refuses downloads to paths outside /workspace, or to a
// local place that exists already.
func checkDownloads(ds []api.Download) error {
	if err := market.ValidateOutputs(outputsOf(ds)); err != nil {
		return fault.Invalidf("downloads: %w", err)
	}
	for i, d := range ds {
		if _, err := os.Lstat(d.Local); err == nil {
			return fault.Invalidf("downloads[%d]: %s exists already; name a place that does not", i, d.Local)
		}
	}
	return nil
}

// downloadAll fetches each of a rental's downloads from provider p once
// its job ended; one that fails says why in its view.
func (r *Renter) downloadAll(ctx context.Context, p peer.ID, lease string, ds []records.Download, out RentOutput) []api.DownloadView {
	var got []api.DownloadView
	for i, d := range ds {
		n, err := r.download(ctx, p, lease, i, d, out)
		v := api.DownloadView{Path: d.Path, Local: d.Local, Bytes: n}
		if err != nil {
			v.Error = err.Error()
			out.say("download of %s failed: %v", d.Path, err)
		} else {
			out.say("downloaded %s to %s (%s, SHA-256 checked)", d.Path, d.Local, views.FormatBytes(uint64(n)))
		}
		got = append(got, v)
	}
	return got
}

// download fetches output i of lease from provider p into d.Local.
func (r *Renter) download(ctx context.Context, p peer.ID, lease string, i int, d records.Download, out RentOutput) (int64, error) {
	return downloadResuming(ctx, r.Clock, d.Path, d.Local, nil, func(offset int64, w io.Writer) (int64, []byte, error) {
		return r.Net.Download(ctx, p, lease, i, offset, w)
	}, out.say)
}

// downloadResuming fetches the tar of remote with fetch, which makes one
// stream of it from an offset, into a part file beside local, resuming a
// stream that broke (up to uploadTries) and ending at a refusal. It
// checks the whole tar's SHA-256 against the provider's and unpacks it at
// local (refusing entries that would leave it), noting each file's
// SHA-256 in sums (nil: not noted). It returns the tar's size.
func downloadResuming(ctx context.Context, clk clock.Clock, remote, local string, sums map[string]string, fetch func(offset int64, w io.Writer) (int64, []byte, error), say func(string, ...any)) (int64, error) {
	part := local + ".idlegrid-download.tar"
	defer os.Remove(part)
	var size int64
	var sum []byte
	for try := 1; ; try++ {
		f, err := os.OpenFile(part, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return 0, err
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return 0, err
		}
		size, sum, err = fetch(fi.Size(), f)
		f.Close()
		var refused *p2p.DownloadRefusedError
		if err == nil {
			break
		}
		if errors.As(err, &refused) || ctx.Err() != nil || try == uploadTries {
			return 0, err
		}
		say("download of %s broke off (%v); resuming", remote, err)
		select {
		case <-clk.After(uploadPause):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	f, err := os.Open(part)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return 0, err
	}
	if got := h.Sum(nil); !bytes.Equal(got, sum) {
		return 0, fmt.Errorf("the tar arrived with SHA-256 %x; the provider's is %x", got, sum)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	if sums == nil {
		sums = map[string]string{}
	}
	var n int64
	if err := transfer.UntarTree(f, path.Base(remote), local, sums, &n); err != nil {
		return 0, fmt.Errorf("unpack %s: %w", local, err)
	}
	return size, nil
}
