package p2p

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idlegrid/idlegrid/market"
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
	// maxImageFrame bounds one frame either way.
	maxImageFrame = 4 << 10
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
		Service: "idlegrid.image", Memory: 2 * maxImageFrame,
		Request: requestDeadline, Deadline: deadline, PerPeer: 1, Rate: Rate{1, 10},
	}
}

// ImageReadier makes ref present for peer from, calling progress as it
// pulls; its error is the refusal the renter reads.
type ImageReadier func(ctx context.Context, from peer.ID, ref string, progress func(*pb.ImageProgress)) (*pb.ImageReady, error)

// ServeImages answers image requests with ready, within deadline.
// Progress frames go out at most every ImageProgressEvery.
func ServeImages(sv Server, deadline time.Duration, ready ImageReadier) {
	sv.Serve(ImageProtocol, ImageLimits(deadline), func(ctx context.Context, from peer.ID, s network.Stream) error {
		b, err := msgio.NewVarintReaderSize(s, maxImageFrame).ReadMsg()
		if err != nil {
			return err
		}
		req := new(pb.ImageRequest)
		if err := market.Unmarshal(b, req); err != nil {
			return err
		}
		w := msgio.NewVarintWriter(s)
		send := func(f *pb.ImageFrame) error {
			b, err := proto.Marshal(f)
			if err != nil {
				return err
			}
			return w.WriteMsg(b)
		}
		if req.Ref == "" || len(req.Ref) > MaxImageRef {
			return send(&pb.ImageFrame{Kind: &pb.ImageFrame_Refused{Refused: fmt.Sprintf("ref: %d bytes: want 1 to %d", len(req.Ref), MaxImageRef)}})
		}
		var last time.Time
		var sendErr error
		got, err := ready(ctx, from, req.Ref, func(p *pb.ImageProgress) {
			if now := time.Now(); sendErr == nil && now.Sub(last) >= ImageProgressEvery {
				last = now
				sendErr = send(&pb.ImageFrame{Kind: &pb.ImageFrame_Progress{Progress: p}})
			}
		})
		switch {
		case sendErr != nil:
			return sendErr
		case err != nil:
			return send(&pb.ImageFrame{Kind: &pb.ImageFrame_Refused{Refused: err.Error()}})
		}
		return send(&pb.ImageFrame{Kind: &pb.ImageFrame_Ready{Ready: got}})
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
	ctx, cancel := context.WithTimeout(ctx, min(deadline, MaxPullDeadline))
	defer cancel()
	s, err := dial(ctx, h, sw, p, ImageProtocol)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	req, err := proto.Marshal(&pb.ImageRequest{Ref: ref})
	if err != nil {
		return nil, err
	}
	if err := msgio.NewVarintWriter(s).WriteMsg(req); err != nil {
		s.Reset()
		return nil, err
	}
	s.CloseWrite()
	r := msgio.NewVarintReaderSize(s, maxImageFrame)
	for range maxImageFrames {
		b, err := r.ReadMsg()
		if err != nil {
			s.Reset()
			return nil, err
		}
		f := new(pb.ImageFrame)
		if err := market.Unmarshal(b, f); err != nil {
			s.Reset()
			return nil, err
		}
		switch k := f.Kind.(type) {
		case *pb.ImageFrame_Progress:
			if progress != nil && k.Progress != nil {
				progress(k.Progress)
			}
		case *pb.ImageFrame_Ready:
			if k.Ready == nil {
				return nil, errors.New("an empty ready frame")
			}
			return k.Ready, nil
		case *pb.ImageFrame_Refused:
			return nil, &ImageRefusedError{Ref: ref, Reason: k.Refused}
		default:
			s.Reset()
			return nil, errors.New("an image frame of no known kind")
		}
	}
	s.Reset()
	return nil, fmt.Errorf("more than %d image frames", maxImageFrames)
}
