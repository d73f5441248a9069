package p2p

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// UploadProtocol stages a renter's data at a provider before a lease: the
// renter sends an UploadRequest (a tar's SHA-256 and size); the provider
// answers with an UploadReply saying how much of that tar it holds
// already, the renter sends the rest as raw bytes, and the provider
// answers again once it has checked the whole tar's hash. A dropped
// upload resumes where the provider's copy ends. The lease then names the
// tar, and the provider unpacks it in the container before the job
// starts: the upload is before the lease, so no lease pays for it.
const UploadProtocol protocol.ID = "/idlegrid/upload/1.0.0"

// Bounds of the upload protocol.
const (
	maxUploadMessage = 256
	// UploadStall is the longest an upload may send nothing.
	UploadStall = 30 * time.Second
	// MaxUploadDeadline bounds one upload stream, however large.
	MaxUploadDeadline = 6 * time.Hour
	uploadBuffer      = 256 << 10
)

// UploadLimits bound the upload server: a peer sends two tars at a time,
// one new stream a second after a burst of ten (resumes included).
var UploadLimits = StreamLimits{
	Service: "idlegrid.upload", Memory: uploadBuffer,
	Request: requestDeadline, Deadline: MaxUploadDeadline, PerPeer: 2, Rate: Rate{1, 10},
}

// UploadSink takes one upload's bytes from where the provider's copy
// ends: Finish checks the whole tar against its SHA-256 and keeps it;
// Abort keeps what arrived, for a resume.
type UploadSink interface {
	io.Writer
	Finish() error
	Abort()
}

// UploadStager answers an upload of size bytes with SHA-256 sum from
// peer from: how many bytes of it the provider holds already, and where
// the rest goes (nil when it holds all of it); its error is the refusal
// the renter reads.
type UploadStager func(from peer.ID, sum []byte, size int64) (have int64, sink UploadSink, err error)

// ServeUploads answers uploads with stage.
func ServeUploads(sv Server, stage UploadStager) {
	sv.Serve(UploadProtocol, UploadLimits, func(ctx context.Context, from peer.ID, s network.Stream) error {
		req := new(pb.UploadRequest)
		if err := ReadMsg(s, maxUploadMessage, req); err != nil {
			return err
		}
		if len(req.Sha256) != sha256.Size || req.Size == 0 || req.Size > 1<<50 {
			return WriteMsg(s, &pb.UploadReply{Refusal: fmt.Sprintf("upload: a %d-byte SHA-256 and %d bytes: want 32 and more than 0", len(req.Sha256), req.Size)})
		}
		size := int64(req.Size)
		have, sink, err := stage(from, req.Sha256, size)
		if err != nil {
			return WriteMsg(s, &pb.UploadReply{Refusal: err.Error()})
		}
		if sink == nil {
			return WriteMsg(s, &pb.UploadReply{Have: uint64(size), Done: true})
		}
		if err := WriteMsg(s, &pb.UploadReply{Have: uint64(have)}); err != nil {
			sink.Abort()
			return err
		}
		// The tar takes as long as it takes, but never stalls.
		if _, err := io.CopyBuffer(sink, io.LimitReader(stallReader{s, UploadStall}, size-have), make([]byte, uploadBuffer)); err != nil {
			sink.Abort()
			return err
		}
		if err := sink.Finish(); err != nil {
			return WriteMsg(s, &pb.UploadReply{Refusal: err.Error()})
		}
		return WriteMsg(s, &pb.UploadReply{Have: uint64(size), Done: true})
	})
}

// stallReader reads s, each read within stall.
type stallReader struct {
	s     network.Stream
	stall time.Duration
}

func (r stallReader) Read(b []byte) (int, error) {
	r.s.SetReadDeadline(time.Now().Add(r.stall))
	return r.s.Read(b)
}

// UploadRefusedError is a provider's refusal of an upload.
type UploadRefusedError struct{ Reason string }

func (e *UploadRefusedError) Error() string { return "upload refused: " + e.Reason }

// Upload sends provider p the tar of size bytes with SHA-256 sum, once:
// the provider says how much of it it holds, and open gives the tar from
// there. It returns how many bytes the provider held before, and its
// refusal as an *UploadRefusedError; a stream that breaks is an error of
// its own, after which another Upload resumes.
func Upload(ctx context.Context, h host.Host, sw Swarm, p peer.ID, sum []byte, size int64, open func(offset int64) (io.ReadCloser, error)) (had int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, MaxUploadDeadline)
	defer cancel()
	s, err := dial(ctx, h, sw, p, UploadProtocol)
	if err != nil {
		return 0, err
	}
	defer s.Close()
	stop := context.AfterFunc(ctx, func() { s.Reset() })
	defer stop()
	fail := func(err error) (int64, error) {
		s.Reset()
		return had, err
	}
	if err := WriteMsg(s, &pb.UploadRequest{Sha256: sum, Size: uint64(size)}); err != nil {
		return fail(err)
	}
	reply := new(pb.UploadReply)
	if err := ReadMsg(s, maxUploadMessage, reply); err != nil {
		return fail(err)
	}
	switch {
	case reply.Refusal != "":
		return 0, &UploadRefusedError{reply.Refusal}
	case reply.Done:
		return size, nil
	case reply.Have > uint64(size):
		return fail(fmt.Errorf("upload: the provider holds %d bytes of a %d-byte tar", reply.Have, size))
	}
	had = int64(reply.Have)
	r, err := open(had)
	if err != nil {
		return fail(err)
	}
	defer r.Close()
	if n, err := io.CopyBuffer(s, io.LimitReader(r, size-had), make([]byte, uploadBuffer)); err != nil || n != size-had {
		return fail(cmp.Or(err, fmt.Errorf("upload: the tar ended %d bytes short", size-had-n)))
	}
	s.CloseWrite()
	if err := ReadMsg(s, maxUploadMessage, reply); err != nil {
		return fail(err)
	}
	if reply.Refusal != "" {
		return had, &UploadRefusedError{reply.Refusal}
	}
	if !reply.Done {
		return fail(errors.New("upload: the provider did not say it has the tar"))
	}
	return had, nil
}
