package node

import (
	"context"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/network"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	"google.golang.org/protobuf/proto"
)

// A renter that attaches gets the last beat (one kept from before a
// restart until a newer one is signed) and then the output it missed, in
// order. An attach whose stream cannot be written drops the stream and
// keeps all of it for the next one.
func TestJobOutputReplaysTheLastBeatAndKeepsWhatAFailedAttachMissed(t *testing.T) {
	mn, err := mocknet.FullMeshConnected(2)
	if err != nil {
		t.Fatal(err)
	}
	defer mn.Close()
	provider, renter := mn.Hosts()[0], mn.Hosts()[1]
	const testProto = "/idlegrid-test/job"
	// The renter reads every stream it is given into one channel.
	frames := make(chan *pb.JobFrame, 16)
	renter.SetStreamHandler(testProto, func(s network.Stream) {
		defer s.Close()
		for {
			f := new(pb.JobFrame)
			if err := p2p.ReadMsg(s, p2p.MaxJobFrame, f); err != nil {
				return
			}
			frames <- f
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	open := func() network.Stream {
		t.Helper()
		s, err := provider.NewStream(ctx, renter.ID(), testProto)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	beat := func(b string) *pb.JobFrame { return &pb.JobFrame{Kind: &pb.JobFrame_Heartbeat{Heartbeat: []byte(b)}} }

	o := newJobOutput(time.Now(), []byte("beat 7, signed before a restart"))
	o.send(&pb.JobFrame{Kind: &pb.JobFrame_Stdout{Stdout: []byte("early ")}})
	o.send(beat("beat 8"))
	o.send(beat("beat 9"))
	o.send(&pb.JobFrame{Kind: &pb.JobFrame_Stderr{Stderr: []byte("late")}})

	dead := open()
	dead.CloseWrite()
	o.attach(dead)
	if o.detachedFor(time.Now()) == 0 {
		t.Fatal("a stream that took no frame stays attached")
	}

	o.attach(open())
	o.send(&pb.JobFrame{Kind: &pb.JobFrame_Notice{Notice: "live"}})
	want := []*pb.JobFrame{
		beat("beat 9"),
		{Kind: &pb.JobFrame_Stdout{Stdout: []byte("early ")}},
		{Kind: &pb.JobFrame_Stderr{Stderr: []byte("late")}},
		{Kind: &pb.JobFrame_Notice{Notice: "live"}},
	}
	for i, w := range want {
		select {
		case got := <-frames:
			if !proto.Equal(got, w) {
				t.Errorf("frame %d: %v, want %v", i, got, w)
			}
		case <-ctx.Done():
			t.Fatalf("frame %d never came", i)
		}
	}
}
