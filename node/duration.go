package node

import (
	"fmt"
	"time"
)

// Duration is a time.Duration written in config.toml as a string such as
// "30s" or "5m".
type Duration time.Duration

// MarshalText writes the duration as time.Duration.String does.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText parses a duration such as "1m30s".
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("%q is not a duration such as \"30s\" or \"5m\"", b)
	}
	*d = Duration(v)
	return nil
}

// String formats the duration.
func (d Duration) String() string { return time.Duration(d).String() }
