package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// The image budget's keys have sane defaults, and a value out of range is
// refused naming the key, the value and what is allowed.
func TestTheImageBudgetKeysAreValidated(t *testing.T) {
	c := DefaultConfig(ProfileProvider).Clone()
	if err := c.Validate(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	if j := c.Jobs; j.ImageRenterGiB > j.ImageDiskGiB || j.ImageRenterGiB < j.MaxImageGiB || j.ImageKeep.Std() <= 0 {
		t.Errorf("defaults: image_disk_gib %d, image_renter_gib %d, max_image_gib %d, image_keep %v", j.ImageDiskGiB, j.ImageRenterGiB, j.MaxImageGiB, j.ImageKeep)
	}
	for _, tc := range []struct {
		field string
		edit  func(*Config)
	}{
		{"jobs.image_disk_gib", func(c *Config) { c.Jobs.ImageDiskGiB = 0 }},
		{"jobs.image_renter_gib", func(c *Config) { c.Jobs.ImageRenterGiB = 0 }},
		{"jobs.image_renter_gib", func(c *Config) { c.Jobs.ImageRenterGiB = c.Jobs.ImageDiskGiB + 1 }},
		{"jobs.image_keep", func(c *Config) { c.Jobs.ImageKeep = Dur(time.Second) }},
		{"jobs.image_keep", func(c *Config) { c.Jobs.ImageKeep = Dur(365 * 24 * time.Hour) }},
	} {
		c := DefaultConfig(ProfileProvider).Clone()
		tc.edit(&c)
		err := c.Validate()
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(err.Error(), "want ") {
			t.Errorf("%s out of range: %v; want a FieldError naming it and what is allowed", tc.field, err)
		}
	}
}
