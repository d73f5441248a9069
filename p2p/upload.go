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

// A sink may also have Superseded() <-chan struct{}: closed when the
// renter resumes the upload on a newer stream, which resets this one
// (a killed renter's QUIC connection is not known dead for a while).

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
		// A newer stream of the same renter's may take the upload over.
		copied := make(chan struct{})
		if sup, ok := sink.(interface{ Superseded() <-chan struct{} }); ok {
			go func() {
				select {
				case <-sup.Superseded():
					s.Reset()
				case <-copied:
				}
			}()
		}
		// The tar takes as long as it takes, but never stalls.
		_, err = io.CopyBuffer(sink, io.LimitReader(stallReader{s, UploadStall}, size-have), make([]byte, uploadBuffer))
		close(copied)
		if err != nil {
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

// DownloadProtocol gives a renter the tars of its lease's outputs, which
// the provider packed when the job's command ended: the renter sends a
// DownloadRequest (lease, output, offset); the provider answers with a
// DownloadReply (the tar's size and SHA-256, or why not) and the raw
// bytes from the offset to the end. A dropped download resumes from what
// arrived; the renter checks the whole tar's hash.
const DownloadProtocol protocol.ID = "/idlegrid/download/1.0.0"

// DownloadLimits bound the download server as UploadLimits bound uploads.
var DownloadLimits = StreamLimits{
	Service: "idlegrid.download", Memory: uploadBuffer,
	Request: requestDeadline, Deadline: MaxUploadDeadline, PerPeer: 2, Rate: Rate{1, 10},
}

// OutputOpener opens output index of lease for peer from, its size and
// SHA-256: only for the lease's renter, from that lease's own outputs. Its
// error is the refusal the renter reads.
type OutputOpener func(ctx context.Context, from peer.ID, lease string, index int) (r io.ReadSeekCloser, size int64, sum []byte, err error)

// ServeDownloads answers downloads with open.
func ServeDownloads(sv Server, open OutputOpener) {
	sv.Serve(DownloadProtocol, DownloadLimits, func(ctx context.Context, from peer.ID, s network.Stream) error {
		req := new(pb.DownloadRequest)
		if err := ReadMsg(s, maxUploadMessage, req); err != nil {
			return err
		}
		r, size, sum, err := open(ctx, from, req.LeaseId, int(req.Index))
		if err != nil {
			return WriteMsg(s, &pb.DownloadReply{Refusal: err.Error()})
		}
		defer r.Close()
		if req.Offset > uint64(size) {
			return WriteMsg(s, &pb.DownloadReply{Refusal: fmt.Sprintf("offset %d past the tar's %d bytes", req.Offset, size)})
		}
		if _, err := r.Seek(int64(req.Offset), io.SeekStart); err != nil {
			return err
		}
		if err := WriteMsg(s, &pb.DownloadReply{Size: uint64(size), Sha256: sum}); err != nil {
			return err
		}
		_, err = io.CopyBuffer(s, io.LimitReader(r, size-int64(req.Offset)), make([]byte, uploadBuffer))
		return err
	})
}

// DownloadRefusedError is a provider's refusal of a download.
type DownloadRefusedError struct{ Reason string }

func (e *DownloadRefusedError) Error() string { return "download refused: " + e.Reason }

// Download asks provider p for output index of lease from offset on and
// writes what arrives to w; it returns the tar's size and SHA-256. A
// stream that breaks is an error after which another Download resumes
// from what w took.
func Download(ctx context.Context, h host.Host, sw Swarm, p peer.ID, lease string, index int, offset int64, w io.Writer) (size int64, sum []byte, err error) {
	ctx, cancel := context.WithTimeout(ctx, MaxUploadDeadline)
	defer cancel()
	s, err := dial(ctx, h, sw, p, DownloadProtocol)
	if err != nil {
		return 0, nil, err
	}
	defer s.Close()
	stop := context.AfterFunc(ctx, func() { s.Reset() })
	defer stop()
	if err := WriteMsg(s, &pb.DownloadRequest{LeaseId: lease, Index: uint32(index), Offset: uint64(offset)}); err != nil {
		s.Reset()
		return 0, nil, err
	}
	s.CloseWrite()
	reply := new(pb.DownloadReply)
	if err := ReadMsg(s, maxUploadMessage, reply); err != nil {
		s.Reset()
		return 0, nil, err
	}
	if reply.Refusal != "" {
		return 0, nil, &DownloadRefusedError{reply.Refusal}
	}
	size = int64(min(reply.Size, 1<<50))
	if offset > size {
		s.Reset()
		return 0, nil, fmt.Errorf("download: the provider's tar has %d bytes, fewer than the %d held here", size, offset)
	}
	n, err := io.CopyBuffer(w, io.LimitReader(stallReader{s, UploadStall}, size-offset), make([]byte, uploadBuffer))
	if err == nil && n != size-offset {
		err = fmt.Errorf("download: the tar ended %d bytes short", size-offset-n)
	}
	if err != nil {
		s.Reset()
	}
	return size, reply.Sha256, err
}
