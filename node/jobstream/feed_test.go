package jobstream

import (
	"context"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/idlegrid/idlegrid/node/records"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	"google.golang.org/protobuf/proto"
)

const testProto = "/idlegrid-test/job"

// pair is a provider and a renter host on mocknet; the renter reads every
// stream it is given into frames, and closes on ends.
func pair(t *testing.T) (provider host.Host, frames chan *pb.JobFrame, ends chan struct{}) {
	t.Helper()
	mn, err := mocknet.FullMeshConnected(2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mn.Close() })
	provider, renter := mn.Hosts()[0], mn.Hosts()[1]
	frames, ends = make(chan *pb.JobFrame, 16), make(chan struct{}, 16)
	renter.SetStreamHandler(testProto, func(s network.Stream) {
		defer s.Close()
		for {
			f := new(pb.JobFrame)
			if err := p2p.ReadMsg(s, p2p.MaxJobFrame, f); err != nil {
				ends <- struct{}{}
				return
			}
			frames <- f
		}
	})
	return provider, frames, ends
}

func open(t *testing.T, h host.Host) network.Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := h.NewStream(ctx, h.Network().Peers()[0], testProto)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func expect(t *testing.T, frames chan *pb.JobFrame, want ...*pb.JobFrame) {
	t.Helper()
	for i, w := range want {
		select {
		case got := <-frames:
			if !proto.Equal(got, w) {
				t.Errorf("frame %d: %v, want %v", i, got, w)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("frame %d never came", i)
		}
	}
}

func beat(b string) *pb.JobFrame {
	return &pb.JobFrame{Kind: &pb.JobFrame_Heartbeat{Heartbeat: []byte(b)}}
}

// A renter that attaches gets the last beat (one kept from before a
// restart until a newer one is signed) and then the output it missed, in
// order. An attach whose stream cannot be written drops the stream and
// keeps all of it for the next one.
func TestFeedReplaysTheLastBeatAndKeepsWhatAFailedAttachMissed(t *testing.T) {
	provider, frames, _ := pair(t)
	clk := clock.NewFake()
	f := New(clk, []byte("beat 7, signed before a restart"), records.Offsets{})
	f.Start()
	defer f.Close()
	f.Send(&pb.JobFrame{Kind: &pb.JobFrame_Stdout{Stdout: []byte("early ")}})
	f.Send(beat("beat 8"))
	f.Send(beat("beat 9"))
	f.Send(&pb.JobFrame{Kind: &pb.JobFrame_Stderr{Stderr: []byte("late")}})

	dead := open(t, provider)
	dead.CloseWrite()
	select {
	case <-f.Attach(dead, records.Offsets{}):
	case <-time.After(10 * time.Second):
		t.Fatal("a stream that took no frame was kept")
	}
	clk.Advance(time.Minute)
	if d := f.DetachedFor(clk.Now()); d < time.Minute {
		t.Fatalf("detached for %s after a failed attach and a minute", d)
	}

	f.Attach(open(t, provider), records.Offsets{})
	f.Send(&pb.JobFrame{Kind: &pb.JobFrame_Notice{Notice: "live"}})
	expect(t, frames, beat("beat 9"),
		&pb.JobFrame{Kind: &pb.JobFrame_Stdout{Stdout: []byte("early ")}},
		&pb.JobFrame{Kind: &pb.JobFrame_Stderr{Stderr: []byte("late")}},
		&pb.JobFrame{Kind: &pb.JobFrame_Notice{Notice: "live"}})
	if d := f.DetachedFor(clk.Now()); d != 0 {
		t.Errorf("detached for %s while a renter follows", d)
	}
}

// A stream is let go of when another replaces it and when the feed
// closes; what was sent before Close is delivered first, and a Send after
// it returns at once.
func TestFeedLetsGoOfItsStreams(t *testing.T) {
	provider, frames, ends := pair(t)
	f := New(nil, nil, records.Offsets{})
	f.Start()
	first := f.Attach(open(t, provider), records.Offsets{})
	second := f.Attach(open(t, provider), records.Offsets{})
	select {
	case <-first:
	case <-time.After(10 * time.Second):
		t.Fatal("a replaced stream was not let go of")
	}
	f.Send(&pb.JobFrame{Kind: &pb.JobFrame_Notice{Notice: "bye"}})
	f.Close()
	select {
	case <-second:
	default:
		t.Fatal("Close kept the stream")
	}
	expect(t, frames, &pb.JobFrame{Kind: &pb.JobFrame_Notice{Notice: "bye"}})
	<-ends
	f.Send(&pb.JobFrame{Kind: &pb.JobFrame_Notice{Notice: "after"}})
	select {
	case <-f.Attach(open(t, provider), records.Offsets{}):
	default:
		t.Error("a closed feed held a stream")
	}
}

func out(at int64, b string) *pb.JobFrame  { return outputFrame(false, at, []byte(b)) }
func errs(at int64, b string) *pb.JobFrame { return outputFrame(true, at, []byte(b)) }

// Output frames carry their offsets. A renter that re-attaches holding
// part of the output gets only what follows it; Detach says where the
// output the feed keeps begins (for the rest to come from the engine's
// log), delivered or not, and Undelivered is that output as one run per
// stream, which Hold puts back in a feed of its own.
func TestFeedSendsTheOutputPastWhatTheRenterHolds(t *testing.T) {
	provider, frames, _ := pair(t)
	f := New(nil, nil, records.Offsets{Stdout: 100, Stderr: 7})
	f.Start()
	defer f.Close()
	stdout, stderr := f.Writer(false), f.Writer(true)
	stdout.Write([]byte("abc"))
	stderr.Write([]byte("xy"))
	stdout.Write([]byte("defg"))
	if got := f.Detach(); got != (records.Offsets{Stdout: 100, Stderr: 7}) {
		t.Errorf("the backlog begins at %+v, want stdout 100 and stderr 7", got)
	}
	if got := f.Offsets(); got != (records.Offsets{Stdout: 107, Stderr: 9}) {
		t.Errorf("offsets %+v, want stdout 107 and stderr 9", got)
	}
	kept := f.Undelivered()
	if kept.At != (records.Offsets{Stdout: 100, Stderr: 7}) || string(kept.Stdout) != "abcdefg" || string(kept.Stderr) != "xy" {
		t.Errorf("undelivered %+v, want abcdefg from 100 and xy from 7", kept)
	}

	// The renter holds stdout to 102 and all of stderr.
	f.Attach(open(t, provider), records.Offsets{Stdout: 102, Stderr: 9})
	stderr.Write([]byte("z"))
	expect(t, frames, out(102, "c"), out(103, "defg"), errs(9, "z"))
	if got := f.Detach(); got != (records.Offsets{Stdout: 100, Stderr: 7}) {
		t.Errorf("after delivering all: the output kept begins at %+v, want still stdout 100 and stderr 7", got)
	}
	f.Attach(open(t, provider), records.Offsets{Stdout: 106, Stderr: 9})
	expect(t, frames, out(106, "g"), errs(9, "z"))

	g := New(nil, nil, records.Offsets{})
	g.Hold(kept, nil)
	g.Start()
	defer g.Close()
	g.Attach(open(t, provider), records.Offsets{Stdout: 105})
	expect(t, frames, out(105, "fg"), errs(7, "xy"))
}

// Output written to a stream its renter then drops unread is not the
// renter's: a renter that comes back holding none of it gets it again,
// from the feed or, once the job ended, from what Undelivered kept. A
// notice written is not sent again.
func TestFeedKeepsOutputARenterDroppedUnread(t *testing.T) {
	mn, err := mocknet.FullMeshConnected(2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mn.Close() })
	provider, renter := mn.Hosts()[0], mn.Hosts()[1]
	unread := make(chan network.Stream, 1)
	renter.SetStreamHandler(testProto, func(s network.Stream) { unread <- s })
	f := New(nil, nil, records.Offsets{})
	f.Start()
	defer f.Close()
	f.Attach(open(t, provider), records.Offsets{})
	f.Send(&pb.JobFrame{Kind: &pb.JobFrame_Notice{Notice: "taken"}})
	f.Writer(false).Write([]byte("a\n"))
	if got := f.Offsets(); got.Stdout != 2 {
		t.Fatalf("offsets %+v after writing a\\n", got)
	}
	(<-unread).Reset() // the renter leaves without reading
	f.Writer(false).Write([]byte("b\n"))
	if kept := f.Undelivered(); kept.At.Stdout != 0 || string(kept.Stdout) != "a\nb\n" {
		t.Errorf("kept %q from %d after a stream dropped unread, want \"a\\nb\\n\" from 0", kept.Stdout, kept.At.Stdout)
	}

	provider2, frames, _ := pair(t)
	g := New(nil, nil, records.Offsets{})
	g.Hold(f.Undelivered(), nil)
	g.Start()
	defer g.Close()
	g.Attach(open(t, provider2), records.Offsets{})
	expect(t, frames, out(0, "a\nb\n"))
}

// The output a feed keeps is the newest MaxBacklogBytes, however much the
// job writes and whether a renter takes it or not.
func TestFeedKeepsAtMostTheLastMiB(t *testing.T) {
	provider, frames, _ := pair(t)
	go func() {
		for range frames {
		}
	}()
	f := New(nil, nil, records.Offsets{})
	f.Start()
	defer f.Close()
	w := f.Writer(false)
	chunk := make([]byte, OutputChunk)
	total := 0
	for i := range 2 * MaxBacklogBytes / OutputChunk {
		if i == MaxBacklogBytes/OutputChunk {
			f.Attach(open(t, provider), records.Offsets{}) // half written detached, half attached
		}
		chunk[0] = byte(i)
		w.Write(chunk)
		total += len(chunk)
	}
	kept := f.Undelivered()
	if len(kept.Stdout) > MaxBacklogBytes || len(kept.Stdout) == 0 {
		t.Fatalf("kept %d bytes of %d, want at most %d and some", len(kept.Stdout), total, MaxBacklogBytes)
	}
	if end := kept.At.Stdout + int64(len(kept.Stdout)); end != int64(total) {
		t.Errorf("kept output ends at %d, want the newest, to %d", end, total)
	}
}

// Direct sends output straight to a stream, with offsets, in chunks.
func TestDirectWritesFramesWithOffsets(t *testing.T) {
	provider, frames, _ := pair(t)
	s := open(t, provider)
	defer s.Close()
	stdout, stderr := Direct(s, records.Offsets{Stdout: 5, Stderr: 1})
	big := make([]byte, OutputChunk+1)
	stdout.Write(big)
	stderr.Write([]byte("e"))
	expect(t, frames, outputFrame(false, 5, big[:OutputChunk]), outputFrame(false, 5+OutputChunk, big[OutputChunk:]), errs(1, "e"))
}
