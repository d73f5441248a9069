// Package attest owns what a renter may trust about a provider's hardware:
// the GPU inventory (NVML behind the GPUSource interface, with a fake on
// go-nvml's mock servers), signed attestation documents and challenges,
// evidence against cheaters, and signed, hash-chained telemetry.
//
// attest may import market's types and libp2p's core/crypto and core/record;
// it must never import p2p, node or cmd.
package attest
