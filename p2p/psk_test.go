package p2p

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/protocol"
)

func TestSwarmKeyRoundTrip(t *testing.T) {
	key, err := GenerateSwarmKey()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := EncodeSwarmKey(&buf, key); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 3 || lines[0] != "/key/swarm/psk/1.0.0/" || lines[1] != "/base16/" || len(lines[2]) != 64 {
		t.Fatalf("file is not in the libp2p PSK format:\n%s", buf.String())
	}
	got, err := ParseSwarmKey(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, key) {
		t.Fatalf("round trip changed the key")
	}
	other, _ := GenerateSwarmKey()
	if bytes.Equal(other, key) {
		t.Fatal("two generated keys are equal")
	}
}

func TestParseSwarmKeyAcceptsBase64(t *testing.T) {
	// 32 zero bytes in base64.
	in := "/key/swarm/psk/1.0.0/\n/base64/\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n"
	key, err := ParseSwarmKey(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(key) != 32 {
		t.Fatalf("key has %d bytes", len(key))
	}
}

func TestParseSwarmKeyRejects(t *testing.T) {
	hex64 := strings.Repeat("ab", 32)
	cases := []struct {
		name, in, want string
	}{
		{"empty", "", "first line"},
		{"wrong header", "/key/swarm/psk/2.0.0/\n/base16/\n" + hex64, "first line"},
		{"no key line", "/key/swarm/psk/1.0.0/\n/base16/", "want 3 lines"},
		{"unknown encoding", "/key/swarm/psk/1.0.0/\n/base32/\n" + hex64, "encoding line"},
		{"short key", "/key/swarm/psk/1.0.0/\n/base16/\n" + hex64[:62], "62 characters"},
		{"long key", "/key/swarm/psk/1.0.0/\n/base16/\n" + hex64 + "ab", "66 characters"},
		{"not hex", "/key/swarm/psk/1.0.0/\n/base16/\n" + strings.Repeat("zz", 32), "not hexadecimal"},
		{"short base64", "/key/swarm/psk/1.0.0/\n/base64/\nAAAA\n", "invalid swarm key"},
		{"huge file", "/key/swarm/psk/1.0.0/\n/base16/\n" + strings.Repeat("a", 10000), "larger than"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseSwarmKey(strings.NewReader(c.in))
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, ErrSwarmKey) {
				t.Errorf("error %v is not ErrSwarmKey", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not say %q", err, c.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
}

func TestSwarmNames(t *testing.T) {
	pub := Swarm{Name: "public"}
	if got := pub.Topic(TopicOffers); got != "/idlegrid/public/offers/1" {
		t.Errorf("offers topic = %s", got)
	}
	if got := pub.DHTPrefix(); got != "/idlegrid/public" {
		t.Errorf("dht prefix = %s", got)
	}
	k1, _ := GenerateSwarmKey()
	k2, _ := GenerateSwarmKey()
	a, b := Swarm{Name: "lab", PSK: k1}, Swarm{Name: "lab", PSK: k2}
	if a.ID() == b.ID() || a.Topic(TopicBids) == b.Topic(TopicBids) || a.DHTPrefix() == b.DHTPrefix() {
		t.Errorf("two private swarms named lab share names: %s, %s", a.ID(), b.ID())
	}
	if !strings.HasPrefix(a.ID(), "lab-") {
		t.Errorf("private swarm id %s does not start with its name", a.ID())
	}
	// Stream protocols and signed messages name the swarm; the public
	// swarm's messages name none, as does the zero Swarm.
	if got := a.Protocol(LeaseProtocol); got != protocol.ID("/idlegrid/"+a.ID()+"/lease/1.0.0") || a.Protocol(LeaseProtocol) == b.Protocol(LeaseProtocol) {
		t.Errorf("lab's lease protocol = %s", got)
	}
	if got := (Swarm{}).Protocol(AttestProtocol); got != "/idlegrid/public/attest/1.0.0" || pub.Protocol(AttestProtocol) != got {
		t.Errorf("public attest protocol = %s", got)
	}
	if pub.Tag() != "" || (Swarm{}).Tag() != "" || a.Tag() != a.ID() || (Swarm{Name: "open"}).Tag() != "open" {
		t.Errorf("tags %q %q %q", pub.Tag(), (Swarm{}).Tag(), a.Tag())
	}
	for _, bad := range []string{"", "Lab", "-lab", "lab gpus", strings.Repeat("a", 64), "lab/x"} {
		if ValidateSwarmName(bad) == nil {
			t.Errorf("swarm name %q accepted", bad)
		}
	}
}
