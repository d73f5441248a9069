package p2p

import (
	"context"
	"fmt"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-msgio"
	"google.golang.org/protobuf/proto"
)

// Lease and job protocols.
const (
	// LeaseProtocol negotiates a lease: one LeaseRequest, one LeaseReply.
	LeaseProtocol protocol.ID = "/idlegrid/lease/1.0.0"
	// JobProtocol follows a lease's job: the renter sends JobAttach, the
	// provider streams JobFrames (output, telemetry, notices) and ends with
	// a receipt frame, which the renter answers with a ReceiptReply.
	JobProtocol protocol.ID = "/idlegrid/job/1.0.0"
)

// Limits of the lease and job protocols.
const (
	leaseDeadline = 15 * time.Second
	// MaxLeaseMessage bounds a lease request or reply and a receipt.
	MaxLeaseMessage = 128 << 10
	// MaxJobFrame bounds one job frame; output is sent in smaller chunks.
	MaxJobFrame = 256 << 10
)

// LeaseHandler answers one lease request from peer from.
type LeaseHandler func(ctx context.Context, from peer.ID, req *pb.LeaseRequest) *pb.LeaseReply

// ServeLeases answers lease requests on h with handle.
func ServeLeases(h host.Host, handle LeaseHandler) {
	h.SetStreamHandler(LeaseProtocol, func(s network.Stream) {
		defer s.Close()
		s.SetDeadline(time.Now().Add(leaseDeadline))
		req := new(pb.LeaseRequest)
		if err := ReadMsg(s, MaxLeaseMessage, req); err != nil {
			s.Reset()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), leaseDeadline)
		defer cancel()
		if err := WriteMsg(s, handle(ctx, s.Conn().RemotePeer(), req)); err != nil {
			s.Reset()
		}
	})
}

// RequestLease sends req to provider p and returns its reply.
func RequestLease(ctx context.Context, h host.Host, p peer.ID, req *pb.LeaseRequest) (*pb.LeaseReply, error) {
	ctx, cancel := context.WithTimeout(ctx, leaseDeadline)
	defer cancel()
	s, err := h.NewStream(ctx, p, LeaseProtocol)
	if err != nil {
		return nil, fmt.Errorf("lease with %s: %w", p, err)
	}
	defer s.Close()
	if d, ok := ctx.Deadline(); ok {
		s.SetDeadline(d)
	}
	reply := new(pb.LeaseReply)
	if err := WriteMsg(s, req); err != nil {
		s.Reset()
		return nil, fmt.Errorf("lease with %s: %w", p, err)
	}
	s.CloseWrite()
	if err := ReadMsg(s, MaxLeaseMessage, reply); err != nil {
		s.Reset()
		return nil, fmt.Errorf("lease with %s: %w", p, err)
	}
	return reply, nil
}

// JobHandler serves one attached job stream; it owns s until it returns.
type JobHandler func(from peer.ID, leaseID string, s network.Stream)

// ServeJobs hands each attached job stream on h to handle.
func ServeJobs(h host.Host, handle JobHandler) {
	h.SetStreamHandler(JobProtocol, func(s network.Stream) {
		s.SetReadDeadline(time.Now().Add(leaseDeadline))
		att := new(pb.JobAttach)
		if err := ReadMsg(s, MaxLeaseMessage, att); err != nil {
			s.Reset()
			return
		}
		s.SetReadDeadline(time.Time{})
		handle(s.Conn().RemotePeer(), att.LeaseId, s)
	})
}

// AttachJob opens a job stream to provider p for leaseID; the caller reads
// JobFrames from it with ReadMsg.
func AttachJob(ctx context.Context, h host.Host, p peer.ID, leaseID string) (network.Stream, error) {
	s, err := h.NewStream(ctx, p, JobProtocol)
	if err != nil {
		return nil, fmt.Errorf("attach to lease %s at %s: %w", leaseID, p, err)
	}
	if err := WriteMsg(s, &pb.JobAttach{LeaseId: leaseID}); err != nil {
		s.Reset()
		return nil, fmt.Errorf("attach to lease %s at %s: %w", leaseID, p, err)
	}
	return s, nil
}

// WriteMsg writes m, varint length-prefixed.
func WriteMsg(s network.Stream, m proto.Message) error {
	b, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	return msgio.NewVarintWriter(s).WriteMsg(b)
}

// ReadMsg reads one varint length-prefixed message of at most limit bytes
// into m; a longer one is refused before it is read.
func ReadMsg(s network.Stream, limit int, m proto.Message) error {
	r := msgio.NewVarintReaderSize(s, limit)
	b, err := r.ReadMsg()
	if err != nil {
		return err
	}
	defer r.ReleaseMsg(b)
	return proto.Unmarshal(b, m)
}
