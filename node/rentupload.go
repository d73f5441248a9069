package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/transfer"
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
		return nil, api.BadRequest{Err: err}
	}
	if len(ups) > market.MaxInputs {
		return fail(fmt.Errorf("uploads: %d; at most %d", len(ups), market.MaxInputs))
	}
	for i, up := range ups {
		if err := market.ValidateInputs([]*pb.Input{{Sha256: make([]byte, 32), Size: 1, Path: up.Path}}); err != nil {
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
func (r *renter) upload(ctx context.Context, p peer.ID, packed []transfer.Packed, out RentOutput, t *api.RentTimings) error {
	begin := r.clock.Now()
	defer func() { t.Upload += r.clock.Since(begin) }()
	for _, pk := range packed {
		var sent atomic.Int64
		open := func(offset int64) (io.ReadCloser, error) {
			f, err := pk.Open(offset)
			if err != nil {
				return nil, err
			}
			sent.Store(offset)
			return &countingReader{ReadCloser: f, n: &sent, each: func(n int64) {
				out.status("%s: uploading %s: %s of %s", short(p), pk.Dest, FormatBytes(uint64(n)), FormatBytes(uint64(pk.Size)))
			}}, nil
		}
		for try := 1; ; try++ {
			had, err := r.net.Upload(ctx, p, pk.Sum, pk.Size, open)
			var refused *p2p.UploadRefusedError
			switch {
			case err == nil && had == pk.Size:
				out.say("%s: %s was there already (%s)", short(p), pk.Dest, FormatBytes(uint64(pk.Size)))
			case err == nil:
				out.say("%s: uploaded %s (%s, from byte %d); the upload is not billed", short(p), pk.Dest, FormatBytes(uint64(pk.Size)), had)
			case errors.As(err, &refused) || ctx.Err() != nil || try == uploadTries:
				return fmt.Errorf("upload %s: %w", pk.Dest, err)
			default:
				out.say("%s: upload of %s broke off at %s of %s (%v); resuming", short(p), pk.Dest, FormatBytes(uint64(sent.Load())), FormatBytes(uint64(pk.Size)), err)
				select {
				case <-r.clock.After(uploadPause):
				case <-ctx.Done():
					return ctx.Err()
				}
				continue
			}
			break
		}
	}
	return nil
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
