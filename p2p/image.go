package p2p

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-msgio"
	"google.golang.org/protobuf/proto"
)

// ImageProtocol readies a container image on a provider before a lease
// is proposed: the renter sends one ImageRequest; the provider answers
// with ImageFrames, progress while it pulls and then ready or refused.
// The pull happens before any lease exists, so no lease pays for it.
//
// Like every protocol here it is a template: Swarm.Protocol scopes it to a
// swarm, /idlegrid/<swarm>/…, and that is what is served and dialled.
const ImageProtocol protocol.ID = "/idlegrid/image/1.0.0"

// Bounds of the image protocol.
const (
	// MaxImageRef bounds a reference: a registry, a path and a digest.
	MaxImageRef = 512
	// maxImageFrame bounds one frame either way but an upload's chunks.
	maxImageFrame = 16 << 10
	// MaxImageChunk bounds one chunk of an image sent.
	MaxImageChunk = 256 << 10
	// MaxUploadLayers bounds an uploaded image's layers (Docker's own
	// limit is 127).
	MaxUploadLayers = 256
	// ImageProgressEvery is the least time between two progress frames.
	ImageProgressEvery = 500 * time.Millisecond
	// maxImageFrames bounds the frames a renter reads: a pull of the
	// longest deadline at the progress rate, twice over.
	maxImageFrames = 2 * int(MaxPullDeadline/ImageProgressEvery)
	// MaxPullDeadline is the longest a provider may give one pull.
	MaxPullDeadline = 2 * time.Hour
)

// ImageLimits bound the image server: a peer readies one image at a
// time, one a second after a burst of ten (a renter leasing several jobs
// asks for each). What costs the provider, a pull, is bounded apart, for
// all peers together. The deadline is the provider's.
func ImageLimits(deadline time.Duration) StreamLimits {
	return StreamLimits{
		Service: "idlegrid.image", Memory: 2 * MaxImageChunk,
		Request: requestDeadline, Deadline: deadline, PerPeer: 1, Rate: Rate{1, 10},
	}
}

// ImageReadier makes ref present for peer from, calling progress as it
// pulls; its error is the refusal the renter reads.
type ImageReadier func(ctx context.Context, from peer.ID, ref string, progress func(*pb.ImageProgress)) (*pb.ImageReady, error)

// ImageLoader makes an image a renter sends present: it says whether it
// has it, and otherwise calls body with how many of its layers it has,
// to read the rest; its error is the refusal the renter reads.
type ImageLoader func(ctx context.Context, from peer.ID, id string, up *pb.ImageUpload, body func(have int) io.Reader) (*pb.ImageReady, error)

// ServeImages answers image requests with ready, and uploads with load
// (nil: uploads are refused), within deadline. Progress frames go out at
// most every ImageProgressEvery.
func ServeImages(sv Server, deadline time.Duration, ready ImageReadier, load ImageLoader) {
	sv.Serve(ImageProtocol, ImageLimits(deadline), func(ctx context.Context, from peer.ID, s network.Stream) error {
		req := new(pb.ImageRequest)
		if err := ReadMsg(s, maxImageFrame, req); err != nil {
			return err
		}
		send := func(f *pb.ImageFrame) error { return WriteMsg(s, f) }
		// answer ends the exchange: ready, refused, or the stream broken
		// while the frames went out.
		answer := func(got *pb.ImageReady, err, sendErr error) error {
			switch {
			case sendErr != nil:
				return sendErr
			case err != nil:
				return send(&pb.ImageFrame{Kind: &pb.ImageFrame_Refused{Refused: err.Error()}})
			}
			return send(&pb.ImageFrame{Kind: &pb.ImageFrame_Ready{Ready: got}})
		}
		if req.Ref == "" || len(req.Ref) > MaxImageRef {
			return send(&pb.ImageFrame{Kind: &pb.ImageFrame_Refused{Refused: fmt.Sprintf("ref: %d bytes: want 1 to %d", len(req.Ref), MaxImageRef)}})
		}
		if up := req.Upload; up != nil {
			switch {
			case load == nil:
				return send(&pb.ImageFrame{Kind: &pb.ImageFrame_Refused{Refused: "this provider takes no images sent to it"}})
			case len(up.DiffIds) == 0 || len(up.DiffIds) > MaxUploadLayers:
				return send(&pb.ImageFrame{Kind: &pb.ImageFrame_Refused{Refused: fmt.Sprintf("upload: %d layers: want 1 to %d", len(up.DiffIds), MaxUploadLayers)}})
			}
			var sendErr error
			got, err := load(ctx, from, req.Ref, up, func(have int) io.Reader {
				if sendErr = send(&pb.ImageFrame{Kind: &pb.ImageFrame_NeedFrom{NeedFrom: uint32(have)}}); sendErr != nil {
					return errReader{sendErr}
				}
				// The image takes as long as it takes, within the deadline.
				s.SetReadDeadline(time.Time{})
				return &chunkReader{r: msgio.NewVarintReaderSize(s, MaxImageChunk+64)}
			})
			return answer(got, err, sendErr)
		}
		var last time.Time
		var sendErr error
		got, err := ready(ctx, from, req.Ref, func(p *pb.ImageProgress) {
			if now := time.Now(); sendErr == nil && now.Sub(last) >= ImageProgressEvery {
				last = now
				sendErr = send(&pb.ImageFrame{Kind: &pb.ImageFrame_Progress{Progress: p}})
			}
		})
		return answer(got, err, sendErr)
	})
}

// ImageRefusedError is a provider's refusal to ready an image.
type ImageRefusedError struct {
	Ref, Reason string
}

func (e *ImageRefusedError) Error() string {
	return fmt.Sprintf("image %s refused: %s", e.Ref, e.Reason)
}

// ReadyImage asks p to make ref present, within deadline, calling
// progress (which may be nil) with each progress frame. A provider's
// refusal is an *ImageRefusedError.
func ReadyImage(ctx context.Context, h host.Host, sw Swarm, p peer.ID, ref string, deadline time.Duration, progress func(*pb.ImageProgress)) (*pb.ImageReady, error) {
	if ref == "" || len(ref) > MaxImageRef {
		return nil, fmt.Errorf("image ref: %d bytes: want 1 to %d", len(ref), MaxImageRef)
	}
	return askImage(ctx, h, sw, p, &pb.ImageRequest{Ref: ref}, deadline, progress, nil)
}

// askImage sends req to p and reads its frames to the answer: progress
// to progress (may be nil); a need_from, for an upload, to send, which
// writes the image's bytes (nil: no upload, and need_from is an error).
func askImage(ctx context.Context, h host.Host, sw Swarm, p peer.ID, req *pb.ImageRequest, deadline time.Duration, progress func(*pb.ImageProgress), send func(w msgio.WriteCloser, have int) error) (*pb.ImageReady, error) {
	ctx, cancel := context.WithTimeout(ctx, min(deadline, MaxPullDeadline))
	defer cancel()
	s, err := dial(ctx, h, sw, p, ImageProtocol)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	if err := WriteMsg(s, req); err != nil {
		s.Reset()
		return nil, err
	}
	if send == nil {
		s.CloseWrite()
	}
	fail := func(err error) (*pb.ImageReady, error) {
		s.Reset()
		return nil, err
	}
	sent := false
	for range maxImageFrames {
		f := new(pb.ImageFrame)
		if err := ReadMsg(s, maxImageFrame, f); err != nil {
			return fail(err)
		}
		switch k := f.Kind.(type) {
		case *pb.ImageFrame_Progress:
			if progress != nil && k.Progress != nil {
				progress(k.Progress)
			}
		case *pb.ImageFrame_NeedFrom:
			if send == nil || sent || int(k.NeedFrom) > len(req.Upload.GetDiffIds()) {
				return fail(fmt.Errorf("the provider asked for the image from layer %d of %d (an upload: %v, sent: %v)", k.NeedFrom, len(req.Upload.GetDiffIds()), send != nil, sent))
			}
			sent = true
			if err := send(msgio.NewVarintWriter(s), int(k.NeedFrom)); err != nil {
				return fail(fmt.Errorf("send image %s: %w", req.Ref, err))
			}
			s.CloseWrite()
		case *pb.ImageFrame_Ready:
			if k.Ready == nil {
				return nil, errors.New("an empty ready frame")
			}
			return k.Ready, nil
		case *pb.ImageFrame_Refused:
			return nil, &ImageRefusedError{Ref: req.Ref, Reason: k.Refused}
		default:
			return fail(errors.New("an image frame of no known kind"))
		}
	}
	return fail(fmt.Errorf("more than %d image frames", maxImageFrames))
}

// chunkReader reads an uploaded image's ImageChunks as one stream, to
// the empty chunk that ends it.
type chunkReader struct {
	r    msgio.ReadCloser
	buf  []byte
	done bool
}

func (c *chunkReader) Read(b []byte) (int, error) {
	for len(c.buf) == 0 {
		if c.done {
			return 0, io.EOF
		}
		msg, err := c.r.ReadMsg()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF // the end is an empty chunk
			}
			return 0, err
		}
		data, err := chunkData(msg)
		if err != nil {
			return 0, err
		}
		c.buf, c.done = data, len(data) == 0
	}
	n := copy(b, c.buf)
	c.buf = c.buf[n:]
	return n, nil
}

// chunkData is the data of an ImageChunk, read in place: its one field
// (1, bytes) or nothing. A chunk is the bulk of an image sent, and the
// generic decoder would copy it once more.
func chunkData(msg []byte) ([]byte, error) {
	if len(msg) == 0 {
		return nil, nil
	}
	if msg[0] != 0x0a { // field 1, wire type 2
		return nil, fmt.Errorf("an image chunk with field tag %#x: want only data (1)", msg[0])
	}
	n, k := binary.Uvarint(msg[1:])
	if k <= 0 || uint64(len(msg)-1-k) != n {
		return nil, errors.New("an image chunk whose length does not match its data")
	}
	return msg[1+k:], nil
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// chunkWriter sends what is written as ImageChunks of at most
// MaxImageChunk bytes.
type chunkWriter struct{ w msgio.WriteCloser }

func (c chunkWriter) Write(b []byte) (int, error) {
	n := 0
	msg := make([]byte, 0, 1+binary.MaxVarintLen64+min(len(b), MaxImageChunk))
	for len(b) > 0 {
		part := b[:min(len(b), MaxImageChunk)]
		// ImageChunk{data: part}, by hand: field 1, wire type 2.
		msg = append(binary.AppendUvarint(append(msg[:0], 0x0a), uint64(len(part))), part...)
		if err := c.w.WriteMsg(msg); err != nil {
			return n, err
		}
		n, b = n+len(part), b[len(part):]
	}
	return n, nil
}

// SendImage offers provider p the image id described by up, within
// deadline: a provider that has it answers ready at once; one that has
// some of its layers asks for the rest, which write writes (the image's
// save without its first have layers). A provider's refusal is an
// *ImageRefusedError.
func SendImage(ctx context.Context, h host.Host, sw Swarm, p peer.ID, id string, up *pb.ImageUpload, deadline time.Duration, write func(w io.Writer, have int) error) (*pb.ImageReady, error) {
	return askImage(ctx, h, sw, p, &pb.ImageRequest{Ref: id, Upload: up}, deadline, nil, func(w msgio.WriteCloser, have int) error {
		if err := write(chunkWriter{w}, have); err != nil {
			return err
		}
		end, _ := proto.Marshal(&pb.ImageChunk{})
		return w.WriteMsg(end)
	})
}
