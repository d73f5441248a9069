package p2p

import (
	"bytes"
	"context"
	"errors"
	"io"
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
	}, nil)
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
	}, nil)
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

// A chunk written by hand reads as the protobuf it stands for, and a
// chunk that is not one is refused.
func TestImageChunksAreImageChunkMessages(t *testing.T) {
	for _, n := range []int{1, 127, 128, MaxImageChunk} {
		var got bytes.Buffer
		w := msgio.NewVarintWriter(&got)
		data := bytes.Repeat([]byte{7}, n)
		if _, err := (chunkWriter{w}).Write(data); err != nil {
			t.Fatal(err)
		}
		msg, err := msgio.NewVarintReaderSize(&got, MaxImageChunk+64).ReadMsg()
		if err != nil {
			t.Fatal(err)
		}
		var ch pb.ImageChunk
		if err := proto.Unmarshal(msg, &ch); err != nil || !bytes.Equal(ch.Data, data) {
			t.Errorf("%d bytes: the protobuf reads %d bytes, %v", n, len(ch.Data), err)
		}
		if d, err := chunkData(msg); err != nil || !bytes.Equal(d, data) {
			t.Errorf("%d bytes: chunkData reads %d bytes, %v", n, len(d), err)
		}
	}
	for name, msg := range map[string][]byte{
		"another field": {0x12, 1, 0},
		"short":         {0x0a, 5, 1, 2},
		"long":          {0x0a, 1, 1, 2},
		"bad varint":    {0x0a, 0xff},
	} {
		if _, err := chunkData(msg); err == nil {
			t.Errorf("%s: read", name)
		}
	}
}

// A sent image's bytes arrive whole after the provider says which layers
// it has; a provider that takes none, or an upload of no layers, is
// refused before any byte is sent.
func TestSendImageSendsWhatTheProviderLacks(t *testing.T) {
	a, b := newTestHost(t, nil, nil), newTestHost(t, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	payload := bytes.Repeat([]byte("layer"), 300_000) // past a chunk
	var loaded []byte
	ServeImages(Server{Host: b, Ctx: ctx}, time.Minute, nil, func(_ context.Context, _ peer.ID, id string, up *pb.ImageUpload, body func(int) io.Reader) (*pb.ImageReady, error) {
		var err error
		loaded, err = io.ReadAll(body(1))
		if err != nil {
			return nil, err
		}
		return &pb.ImageReady{Id: id, Pulled: true}, nil
	})
	if err := connect(a, b); err != nil {
		t.Fatal(err)
	}
	up := &pb.ImageUpload{DiffIds: []string{"sha256:a", "sha256:b"}}
	var from int
	got, err := SendImage(ctx, a, Swarm{}, b.ID(), "sha256:x", up, time.Minute, func(w io.Writer, have int) error {
		from = have
		_, err := w.Write(payload)
		return err
	})
	if err != nil || got.Id != "sha256:x" || from != 1 || !bytes.Equal(loaded, payload) {
		t.Errorf("send: %v, %v, from layer %d, %d of %d bytes loaded", got, err, from, len(loaded), len(payload))
	}
	wrote := false
	write := func(io.Writer, int) error { wrote = true; return nil }
	var re *ImageRefusedError
	if _, err := SendImage(ctx, a, Swarm{}, b.ID(), "sha256:x", &pb.ImageUpload{}, time.Minute, write); !errors.As(err, &re) || !strings.Contains(re.Reason, "0 layers") {
		t.Errorf("an upload of no layers: %v", err)
	}
	c := newTestHost(t, nil, nil)
	ServeImages(Server{Host: c, Ctx: ctx}, time.Minute, func(context.Context, peer.ID, string, func(*pb.ImageProgress)) (*pb.ImageReady, error) {
		return nil, errors.New("unused")
	}, nil)
	if err := connect(a, c); err != nil {
		t.Fatal(err)
	}
	if _, err := SendImage(ctx, a, Swarm{}, c.ID(), "sha256:x", up, time.Minute, write); !errors.As(err, &re) || !strings.Contains(re.Reason, "takes no images") {
		t.Errorf("a provider that takes none: %v", err)
	}
	if wrote {
		t.Error("bytes were written to a provider that refused")
	}
}
