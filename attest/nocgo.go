//go:build !cgo

package attest

import (
	"context"
	"fmt"
)

// NVMLSource stands in for the NVML reader in a build without cgo, which
// go-nvml needs: it reports zero GPUs and says why.
type NVMLSource struct{ name string }

const noCgo = "this idlegrid was built without cgo, so NVML is not in it: rebuild with CGO_ENABLED=1"

// OpenNVML returns a source that explains NVML is not in this build.
func OpenNVML(string) *NVMLSource { return &NVMLSource{name: "nvml"} }

// Fake stands in for the mock-server source, which needs cgo.
type Fake struct{ *NVMLSource }

// SetBusy does nothing without cgo.
func (f *Fake) SetBusy(int, bool) {}

// SetTemperature does nothing without cgo.
func (f *Fake) SetTemperature(int, uint32) {}

// NewFake is unavailable without cgo: go-nvml's mock servers need it too.
func NewFake(machine string) (*Fake, error) {
	return nil, fmt.Errorf("fake %s: %s", machine, noCgo)
}

// NewFakeSeeded is unavailable without cgo, as NewFake is.
func NewFakeSeeded(machine, _ string) (*Fake, error) { return NewFake(machine) }

// Inventory reports no GPUs and the reason.
func (s *NVMLSource) Inventory(context.Context) (Inventory, error) {
	return Inventory{Source: s.name, GPUs: []GPU{}, Unavailable: noCgo}, nil
}

// CCEvidence gives none without cgo.
func (s *NVMLSource) CCEvidence(context.Context, []byte) ([]CCEvidence, error) { return nil, nil }
