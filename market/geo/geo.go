// Package geo places a claimed region on the Earth and holds it to a
// measured round-trip time: light in fibre covers about 200 km a
// millisecond, and no route is shorter than the great circle, so an RTT
// below what the distance needs proves a claim wrong. It ships a table of
// country centres and areas (countries.tsv, public domain; see README.md).
//
// geo is pure: it imports nothing of idlegrid.
package geo

import (
	"bufio"
	"bytes"
	_ "embed"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"
)

//go:embed countries.tsv
var countriesTSV []byte

// Point is a place on the Earth, in degrees: north and east positive.
type Point struct{ Lat, Lon float64 }

// Country is one row of the table.
type Country struct {
	Code, Name string
	Center     Point
	AreaKm2    float64
}

// Place is where a node is, as far as it is known: within RadiusKm of
// Point.
type Place struct {
	Point    Point
	RadiusKm float64
	Name     string // "DE" or "50.11,8.68"
}

// Bounds of the physics.
const (
	// FibreKmPerMs is how far light travels in fibre in a millisecond,
	// one way: two thirds of its speed in vacuum.
	FibreKmPerMs = 200
	// pointRadiusKm is how far a node given as a point may be from it.
	pointRadiusKm = 50
	// countrySlackKm widens every country beyond the square root of its
	// area, for long and scattered ones.
	countrySlackKm = 300
	// marginKm is taken off every distance before it is held to an RTT.
	marginKm = 100
)

var (
	loadOnce  sync.Once
	countries map[string]Country
)

func table() map[string]Country {
	loadOnce.Do(func() {
		var err error
		if countries, err = parse(countriesTSV); err != nil {
			panic("geo: countries.tsv: " + err.Error()) // the embedded table is checked by its test
		}
	})
	return countries
}

func parse(b []byte) (map[string]Country, error) {
	out := map[string]Country{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if strings.HasPrefix(text, "#") || strings.TrimSpace(text) == "" {
			continue
		}
		f := strings.Split(text, "\t")
		if len(f) != 5 {
			return nil, fmt.Errorf("line %d: %d fields, want 5", line, len(f))
		}
		var v [3]float64
		for i, s := range f[2:] {
			x, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return nil, fmt.Errorf("line %d: %q: %v", line, s, err)
			}
			v[i] = x
		}
		c := Country{Code: f[0], Name: f[1], Center: Point{v[0], v[1]}, AreaKm2: v[2]}
		if len(c.Code) != 2 || math.Abs(c.Center.Lat) > 90 || math.Abs(c.Center.Lon) > 180 || c.AreaKm2 <= 0 {
			return nil, fmt.Errorf("line %d: %+v out of range", line, c)
		}
		out[c.Code] = c
	}
	return out, sc.Err()
}

// Lookup returns the country of an ISO 3166-1 alpha-2 code, any case.
func Lookup(code string) (Country, bool) {
	c, ok := table()[strings.ToUpper(code)]
	return c, ok
}

// Countries is how many countries the table holds.
func Countries() int { return len(table()) }

// RadiusKm is how far from its centre a point of the country is taken to
// lie: the square root of its area plus countrySlackKm.
func (c Country) RadiusKm() float64 { return math.Sqrt(c.AreaKm2) + countrySlackKm }

// ParsePlace reads where a node is: a country code ("DE") or a latitude
// and longitude in degrees ("50.11,8.68").
func ParsePlace(s string) (Place, error) {
	s = strings.TrimSpace(s)
	if lat, lon, ok := strings.Cut(s, ","); ok {
		la, err1 := strconv.ParseFloat(strings.TrimSpace(lat), 64)
		lo, err2 := strconv.ParseFloat(strings.TrimSpace(lon), 64)
		if err1 != nil || err2 != nil || math.Abs(la) > 90 || math.Abs(lo) > 180 {
			return Place{}, fmt.Errorf("%q: want latitude,longitude in degrees, such as 50.11,8.68", s)
		}
		return Place{Point: Point{la, lo}, RadiusKm: pointRadiusKm, Name: s}, nil
	}
	c, ok := Lookup(s)
	if !ok {
		return Place{}, fmt.Errorf("%q: not a country code of the table (ISO 3166-1 alpha-2, such as DE) nor latitude,longitude", s)
	}
	return Place{Point: c.Center, RadiusKm: c.RadiusKm(), Name: c.Code}, nil
}

// DistanceKm is the great-circle distance between a and b.
func DistanceKm(a, b Point) float64 {
	const earthKm = 6371.0
	rad := math.Pi / 180
	dLat, dLon := (b.Lat-a.Lat)*rad, (b.Lon-a.Lon)*rad
	h := math.Sin(dLat/2)*math.Sin(dLat/2) + math.Cos(a.Lat*rad)*math.Cos(b.Lat*rad)*math.Sin(dLon/2)*math.Sin(dLon/2)
	return 2 * earthKm * math.Asin(math.Min(1, math.Sqrt(h)))
}

// MinRTT is the least RTT over km of fibre, there and back.
func MinRTT(km float64) time.Duration {
	return time.Duration(2 * km / FibreKmPerMs * float64(time.Millisecond))
}

// Check holds a claim to be at claimed against an RTT measured from
// observer: the least RTT the two places allow, and whether rtt is at
// least that. Both places count as wide as their radius, and marginKm
// more is given, so an honest claim is never refused.
func Check(observer, claimed Place, rtt time.Duration) (least time.Duration, ok bool) {
	km := DistanceKm(observer.Point, claimed.Point) - observer.RadiusKm - claimed.RadiusKm - marginKm
	least = MinRTT(max(km, 0))
	return least, rtt >= least
}
