package geo

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestTheTableLoads(t *testing.T) {
	if n := Countries(); n < 230 {
		t.Fatalf("%d countries", n)
	}
	for code, want := range map[string]Point{"DE": {51, 9}, "US": {38, -97}, "FR": {46, 2}, "GB": {54, -2}, "JP": {36, 138}} {
		c, ok := Lookup(strings.ToLower(code))
		if !ok || c.Center != want {
			t.Errorf("%s: %+v %v, want centre %v", code, c, ok, want)
		}
	}
	if _, ok := Lookup("XX"); ok {
		t.Error("XX found")
	}
	if _, err := parse([]byte("DE\tGermany\t51\t9\n")); err == nil {
		t.Error("a row of 4 fields was taken")
	}
	if _, err := parse([]byte("DE\tGermany\t91\t9\t357022\n")); err == nil {
		t.Error("latitude 91 was taken")
	}
}

func TestDistanceAndLight(t *testing.T) {
	frankfurt, newYork := Point{50.11, 8.68}, Point{40.71, -74.01}
	if d := DistanceKm(frankfurt, newYork); math.Abs(d-6200) > 50 {
		t.Errorf("Frankfurt–New York %.0f km, want about 6,200", d)
	}
	if got := MinRTT(6200); got != 62*time.Millisecond {
		t.Errorf("MinRTT(6200 km) = %s, want 62ms", got)
	}
}

func TestParsePlace(t *testing.T) {
	for _, s := range []string{"DE", " de ", "50.11,8.68", "-33.9, 151.2"} {
		if _, err := ParsePlace(s); err != nil {
			t.Errorf("%q: %v", s, err)
		}
	}
	for _, s := range []string{"", "XX", "Germany", "91,0", "50.1,x"} {
		if p, err := ParsePlace(s); err == nil {
			t.Errorf("%q taken as %+v", s, p)
		}
	}
}

// A provider that sits in Germany and claims the United States is caught
// by a renter in Germany that measures a few milliseconds; the honest
// claim of every country in the table passes from every other at the
// least RTT light allows between their centres.
func TestCheckCatchesAClaimLightCannotCover(t *testing.T) {
	de, _ := ParsePlace("50.11,8.68")
	us, _ := ParsePlace("US")
	if least, ok := Check(de, us, 5*time.Millisecond); ok || least < 40*time.Millisecond {
		t.Errorf("a 5 ms RTT from Frankfurt for a claim of the US: least %s, ok %v", least, ok)
	}
	if _, ok := Check(de, us, 110*time.Millisecond); !ok {
		t.Error("a 110 ms RTT from Frankfurt for a claim of the US was refused")
	}
	for a, ca := range table() {
		pa, _ := ParsePlace(a)
		for b, cb := range table() {
			pb, _ := ParsePlace(b)
			if least, ok := Check(pa, pb, MinRTT(DistanceKm(ca.Center, cb.Center))); !ok {
				t.Fatalf("%s from %s at light's least RTT refused (least %s)", b, a, least)
			}
		}
	}
}
