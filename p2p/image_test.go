package p2p

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-msgio"
	"google.golang.org/protobuf/proto"
)

// The renter reads the provider's progress, then its answer: the image
// ready, or its refusal as an ImageRefusedError.
func TestReadyImageCarriesProgressAndTheAnswer(t *testing.T) {
	a, b := newTestHost(t, nil, nil), newTestHost(t, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var asked atomic.Int32
	ServeImages(Server{Host: b, Ctx: ctx}, time.Minute, func(_ context.Context, from peer.ID, ref string, progress func(*pb.ImageProgress)) (*pb.ImageReady, error) {
		asked.Add(1)
		if from != a.ID() {
			t.Errorf("asked by %s, want %s", from, a.ID())
		}
		if strings.HasPrefix(ref, "evil/") {
			return nil, errors.New("not allowed here")
		}
		for i := range 3 {
			progress(&pb.ImageProgress{DoneBytes: uint64(i), TotalBytes: 10})
		}
		return &pb.ImageReady{Id: "sha256:abc", SizeBytes: 42, Pulled: true}, nil
	})
	if err := connect(a, b); err != nil {
		t.Fatal(err)
	}
	var seen []*pb.ImageProgress
	got, err := ReadyImage(ctx, a, Swarm{}, b.ID(), "x/y:1", time.Minute, func(p *pb.ImageProgress) { seen = append(seen, p) })
	if err != nil || got.Id != "sha256:abc" || got.SizeBytes != 42 || !got.Pulled {
		t.Fatalf("ready: %+v, %v", got, err)
	}
	// Three reports at once: the first goes out, the others are within
	// ImageProgressEvery of it.
	if len(seen) != 1 || seen[0].TotalBytes != 10 {
		t.Errorf("progress frames %v, want the first of three sent at once", seen)
	}
	_, err = ReadyImage(ctx, a, Swarm{}, b.ID(), "evil/x:1", time.Minute, nil)
	var re *ImageRefusedError
	if !errors.As(err, &re) || re.Reason != "not allowed here" || re.Ref != "evil/x:1" {
		t.Errorf("a refused image: %v", err)
	}
	if _, err := ReadyImage(ctx, a, Swarm{}, b.ID(), strings.Repeat("x", MaxImageRef+1), time.Minute, nil); err == nil {
		t.Error("an oversized ref was sent")
	}
	if n := asked.Load(); n != 2 {
		t.Errorf("the readier ran %d times, want 2", n)
	}
}

// A peer gets its burst of ten requests, then one a second, and a
// request over MaxImageRef is refused without the readier.
func TestImageServerHoldsItsBounds(t *testing.T) {
	a, b := newTestHost(t, nil, nil), newTestHost(t, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var asked atomic.Int32
	ServeImages(Server{Host: b, Ctx: ctx}, time.Minute, func(context.Context, peer.ID, string, func(*pb.ImageProgress)) (*pb.ImageReady, error) {
		asked.Add(1)
		return &pb.ImageReady{Id: "sha256:abc"}, nil
	})
	if err := connect(a, b); err != nil {
		t.Fatal(err)
	}
	// A ref too long, written by hand: ReadyImage would not send it.
	s, err := a.NewStream(ctx, b.ID(), Swarm{}.Protocol(ImageProtocol))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := proto.Marshal(&pb.ImageRequest{Ref: strings.Repeat("x", MaxImageRef+1)})
	msgio.NewVarintWriter(s).WriteMsg(req)
	s.CloseWrite()
	b2, err := msgio.NewVarintReaderSize(s, 4096).ReadMsg()
	f := new(pb.ImageFrame)
	if err != nil || proto.Unmarshal(b2, f) != nil || !strings.Contains(f.GetRefused(), "want 1 to 512") {
		t.Errorf("an oversized ref: %v, %v", f, err)
	}
	s.Close()
	ready := 0
	for range 12 {
		if _, err := ReadyImage(ctx, a, Swarm{}, b.ID(), "x/y:1", 5*time.Second, nil); err == nil {
			ready++
		}
	}
	// The oversized request took the burst's first token; a second may
	// have brought one more.
	if ready != 9 && ready != 10 {
		t.Errorf("%d of 12 requests at once answered, want the 9 the burst of 10 had left", ready)
	}
	if n := asked.Load(); n != int32(ready) {
		t.Errorf("the readier ran %d times for %d answers", n, ready)
	}
}
