package lease

import (
	"testing"

	"github.com/idlegrid/idlegrid/market/pb"
)

// A lease of 2 GPUs of 8 on a host shared by GPUs has its container held
// to a quarter of the host's cores and RAM; a host sold whole, or a
// lease of every GPU, holds it to nothing more than jobs' own limits.
func TestALeaseIsHeldToItsShareOfTheHost(t *testing.T) {
	offer := &pb.Offer{Host: &pb.HostSpec{CpuCores: 64, RamBytes: 512 << 30}}
	lo := &Owner{Slots: map[string]int{"H100 SXM": 8}, offer: func() (*pb.Offer, bool) { return offer, true }}
	lease := &pb.Lease{Id: "l", GpuCount: 2, Workload: &pb.Workload{Image: "busybox"}}
	if cpus, mem := lo.hostShare(lease); cpus != 16e9 || mem != 128<<30 {
		t.Errorf("2 of 8 GPUs: %d nano-CPUs, %d bytes; want 16 cores, 128 GiB", cpus, mem)
	}
	if s := lo.spec(lease, nil); s.MemoryBytes != 128<<30 || s.NanoCPUs <= 0 {
		t.Errorf("the container of 2 of 8 GPUs: %d nano-CPUs, %d bytes of memory", s.NanoCPUs, s.MemoryBytes)
	}
	lease.Workload.MemoryBytes = 1 << 30
	if s := lo.spec(lease, nil); s.MemoryBytes != 1<<30 {
		t.Errorf("a job asking less than its share: %d bytes", s.MemoryBytes)
	}
	lease.GpuCount = 8
	if cpus, mem := lo.hostShare(lease); cpus != 0 || mem != 0 {
		t.Errorf("every GPU: %d, %d; want no share", cpus, mem)
	}
	lease.GpuCount, offer.HostWhole = 2, true
	if cpus, mem := lo.hostShare(lease); cpus != 0 || mem != 0 {
		t.Errorf("a host sold whole: %d, %d; want no share", cpus, mem)
	}
}
