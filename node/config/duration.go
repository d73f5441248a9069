package config

import (
	"fmt"
	"time"
)

// Duration is a time.Duration written in config.toml as a string such as
// "30s" or "5m". It is a struct so that a bare number, which has no unit,
// is a type error naming its key rather than a count of nanoseconds.
type Duration struct{ d time.Duration }

// Dur makes a Duration.
func Dur(d time.Duration) Duration { return Duration{d} }

// Std returns the time.Duration.
func (d Duration) Std() time.Duration { return d.d }

// MarshalText writes the duration as time.Duration.String does.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.d.String()), nil }

// UnmarshalText parses a duration such as "1m30s".
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("%q is not a duration such as \"30s\" or \"5m\"", b)
	}
	d.d = v
	return nil
}

// String formats the duration.
func (d Duration) String() string { return d.d.String() }
