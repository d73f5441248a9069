package api

import "testing"

func TestLoopbackHostAndSameOrigin(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1:5080": true, "127.0.0.2:5080": true, "[::1]:5080": true, "localhost:5080": true, "LOCALHOST": true,
		"0.0.0.0:5080": false, "192.168.1.5:5080": false, "evil.example:5080": false, "127.0.0.1.evil.example:5080": false,
		"localhost.evil.example": false, "": false,
	} {
		if got := loopbackHost(host); got != want {
			t.Errorf("loopbackHost(%q) = %v", host, got)
		}
	}
	for _, c := range []struct {
		v, host string
		want    bool
	}{
		{"http://127.0.0.1:5080", "127.0.0.1:5080", true},
		{"http://127.0.0.1:5080/v1/status?x", "127.0.0.1:5080", true},
		{"http://127.0.0.1:5081", "127.0.0.1:5080", false},
		{"https://127.0.0.1:5080", "127.0.0.1:5080", false},
		{"null", "127.0.0.1:5080", false},
		{"http://evil.example", "127.0.0.1:5080", false},
	} {
		if got := sameOrigin(c.v, c.host); got != c.want {
			t.Errorf("sameOrigin(%q, %q) = %v", c.v, c.host, got)
		}
	}
}
