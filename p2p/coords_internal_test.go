package p2p

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/serf/coordinate"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-msgio"
	"google.golang.org/protobuf/proto"
)

// at is a coordinate dx seconds out along the first axis, with err.
func at(dx, err float64) *coordinate.Coordinate {
	c := coordinate.NewCoordinate(coordinate.DefaultConfig())
	c.Vec[0], c.Error = dx, err
	return c
}

// A node estimates nothing before its coordinate has settled; it refuses
// coordinates of another shape; it keeps at most maxCoordPeers peers'
// coordinates, the least recently seen going first; and, settled, it
// ignores a peer whose coordinate puts it far nearer or farther than the
// RTT measured, without moving.
func TestCoordinatesHoldTheirBounds(t *testing.T) {
	c := NewCoordinates()
	now := time.Now()
	if _, err := c.Estimate(at(0.05, 0.1)); !errors.Is(err, ErrCoordUnknown) {
		t.Errorf("estimate before any sample: %v, want ErrCoordUnknown", err)
	}
	if err := c.Observe("p", &coordinate.Coordinate{Vec: make([]float64, 3)}, 10*time.Millisecond, now); err == nil {
		t.Error("a coordinate of 3 dimensions was taken")
	}
	// Settle against peers that agree: 50 ms away, along the first axis.
	for i := range 200 {
		c.Observe(peer.ID(fmt.Sprint("honest-", i%20)), at(0.05, 0.2), 50*time.Millisecond, now)
	}
	if c.Error() > outlierTrust {
		t.Fatalf("error %.2f after 200 agreeing samples", c.Error())
	}
	est, err := c.Estimate(at(0.05, 0.2))
	if err != nil || est < 40*time.Millisecond || est > 60*time.Millisecond {
		t.Errorf("estimate to where the samples put 50 ms: %s, %v", est, err)
	}
	before := c.Own()
	for _, lie := range []*coordinate.Coordinate{at(2, 0.01), at(-2, 0.01), at(0.0501, 0.01)} {
		rtt := 50 * time.Millisecond
		if lie.Vec[0] == 0.0501 {
			rtt = 900 * time.Millisecond // the coordinate is honest-looking, the RTT not
		}
		if err := c.Observe("liar", lie, rtt, now); !errors.Is(err, ErrCoordOutlier) {
			t.Errorf("a coordinate %.2f s out, measured %s: %v, want ErrCoordOutlier", lie.Vec[0], rtt, err)
		}
	}
	if after := c.Own(); !slices.Equal(before.Vec, after.Vec) || before.Height != after.Height || before.Error != after.Error {
		t.Errorf("the lies moved this node from %+v to %+v", before, after)
	}
	if _, ok := c.Of("liar"); ok || !c.Outlier("liar") {
		t.Error("a liar's coordinate is kept for estimates")
	}
	if _, err := c.EstimateTo("liar", CoordToProto(at(0.05, 0.2))); !errors.Is(err, ErrCoordOutlier) {
		t.Errorf("estimate to a liar through its offer's coordinate: %v", err)
	}
	for i := range maxCoordPeers + 10 {
		c.Observe(peer.ID(fmt.Sprint("many-", i)), at(0.05, 0.2), 50*time.Millisecond, now.Add(time.Duration(i)*time.Millisecond))
	}
	if st := c.Stats(); st.Peers != maxCoordPeers {
		t.Errorf("%d peers kept, want %d", st.Peers, maxCoordPeers)
	}
	if _, ok := c.Of("many-0"); ok {
		t.Error("the least recently seen peer was kept")
	}
	if _, ok := c.Of(peer.ID(fmt.Sprint("many-", maxCoordPeers+9))); !ok {
		t.Error("the newest peer was dropped")
	}
}

// FetchCoord reads at most MaxCoordSize bytes and takes only a coordinate
// of the market's shape.
func TestFetchCoordRefusesWhatItCannotUse(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for name, answer := range map[string][]byte{
		"oversized":       make([]byte, MaxCoordSize+1),
		"9 dimensions":    mustMarshal(t, &pb.NetworkCoordinate{Vec: make([]float64, 9)}),
		"not finite":      mustMarshal(t, &pb.NetworkCoordinate{Vec: []float64{math.NaN(), 0, 0, 0, 0, 0, 0, 0}}),
		"negative height": mustMarshal(t, &pb.NetworkCoordinate{Vec: make([]float64, 8), Height: -1}),
		"not protobuf":    []byte("\xff\xff\xff"),
	} {
		t.Run(name, func(t *testing.T) {
			a, b := newTestHost(t, nil, nil), newTestHost(t, nil, nil)
			b.SetStreamHandler(CoordProtocol, func(s network.Stream) {
				defer s.Close()
				msgio.NewVarintWriter(s).WriteMsg(answer)
			})
			if err := connect(a, b); err != nil {
				t.Fatal(err)
			}
			if c, err := FetchCoord(ctx, a, Swarm{}, b.ID()); err == nil {
				t.Errorf("took %+v", c)
			}
		})
	}
	// And a good one, from ServeCoord.
	a, b := newTestHost(t, nil, nil), newTestHost(t, nil, nil)
	want := at(0.03, 0.4)
	ServeCoord(Server{Host: b, Ctx: ctx}, func() *coordinate.Coordinate { return want })
	if err := connect(a, b); err != nil {
		t.Fatal(err)
	}
	got, err := FetchCoord(ctx, a, Swarm{}, b.ID())
	if err != nil || got.Vec[0] != 0.03 || got.Error != 0.4 || !strings.Contains(fmt.Sprint(got.Vec), "0.03") {
		t.Errorf("fetched %+v, %v", got, err)
	}
}

func mustMarshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Whatever a peer answers, readCoord reads at most MaxCoordSize bytes and
// returns only a coordinate the market would take.
func FuzzReadCoord(f *testing.F) {
	f.Add(mustMarshal(f, CoordToProto(at(0.05, 0.2))))
	f.Add([]byte{})
	f.Add([]byte("\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, answer []byte) {
		var wire bytes.Buffer
		msgio.NewVarintWriter(&wire).WriteMsg(answer)
		c, err := readCoord(&wire)
		if err != nil {
			return
		}
		if len(answer) > MaxCoordSize {
			t.Fatalf("read an answer of %d bytes", len(answer))
		}
		if err := market.CheckCoordinate(c); err != nil {
			t.Fatalf("returned a coordinate the market refuses: %v", err)
		}
	})
}
