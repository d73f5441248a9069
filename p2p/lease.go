package p2p

import (
	"context"
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

// Lease and job protocols.
const (
	// Both are templates that Swarm.Protocol scopes to a swarm.

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

// LeaseLimits bound the lease server: one request, one reply.
var LeaseLimits = StreamLimits{
	Service: "idlegrid.lease", Memory: 2 * MaxLeaseMessage,
	Request: requestDeadline, Deadline: leaseDeadline, PerPeer: 8, Rate: Rate{2, 20},
}

// JobLimits bound the job server. A job stream lives as long as the
// renter follows its lease; a renter follows a few at once.
var JobLimits = StreamLimits{
	Service: "idlegrid.job", Memory: MaxJobFrame + MaxLeaseMessage,
	Request: requestDeadline, PerPeer: 16, Rate: Rate{2, 20},
}

// LeaseHandler answers one lease request from peer from.
type LeaseHandler func(ctx context.Context, from peer.ID, req *pb.LeaseRequest) *pb.LeaseReply

// ServeLeases answers lease requests with handle.
func ServeLeases(sv Server, handle LeaseHandler) {
	sv.Serve(LeaseProtocol, LeaseLimits, func(ctx context.Context, from peer.ID, s network.Stream) error {
		req := new(pb.LeaseRequest)
		if err := ReadMsg(s, MaxLeaseMessage, req); err != nil {
			return err
		}
		return WriteMsg(s, handle(ctx, from, req))
	})
}

// RequestLease sends req to provider p and returns its reply.
func RequestLease(ctx context.Context, h host.Host, sw Swarm, p peer.ID, req *pb.LeaseRequest) (*pb.LeaseReply, error) {
	ctx, cancel := context.WithTimeout(ctx, leaseDeadline)
	defer cancel()
	s, err := dial(ctx, h, sw, p, LeaseProtocol)
	if err != nil {
		return nil, fmt.Errorf("lease with %s: %w", p, err)
	}
	defer s.Close()
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

// JobHandler serves one attached job stream, att the renter's request;
// it owns s until it returns, and returns when whoever it handed s to is
// done with it.
type JobHandler func(ctx context.Context, from peer.ID, att *pb.JobAttach, s network.Stream) error

// ServeJobs hands each attached job stream to handle. The attach message
// is the request; what the renter sends after it (its receipt reply) has
// no read deadline but the one the handler sets.
func ServeJobs(sv Server, handle JobHandler) {
	sv.Serve(JobProtocol, JobLimits, func(ctx context.Context, from peer.ID, s network.Stream) error {
		att := new(pb.JobAttach)
		if err := ReadMsg(s, MaxLeaseMessage, att); err != nil {
			return err
		}
		s.SetReadDeadline(time.Time{})
		return handle(ctx, from, att, s)
	})
}

// AttachJob opens a job stream to provider p for att's lease; the caller
// reads JobFrames from it with ReadMsg.
func AttachJob(ctx context.Context, h host.Host, sw Swarm, p peer.ID, att *pb.JobAttach) (network.Stream, error) {
	s, err := OpenStream(ctx, h, p, sw.Protocol(JobProtocol))
	if err != nil {
		return nil, fmt.Errorf("attach to lease %s at %s: %w", att.LeaseId, p, err)
	}
	if err := WriteMsg(s, att); err != nil {
		s.Reset()
		return nil, fmt.Errorf("attach to lease %s at %s: %w", att.LeaseId, p, err)
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
	return market.Unmarshal(b, m)
}
