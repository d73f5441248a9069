// Package attest owns what a renter may trust about a provider's hardware:
// the GPU inventory (NVML behind the GPUSource interface, with a fake on
// go-nvml's mock servers), signed attestation documents and challenges,
// evidence against cheaters, and signed, hash-chained telemetry.
//
// Its wire types (the attestation document) are in attest/pb.
//
// attest may import market's wire types, its own, libp2p's core/crypto,
// core/peer and core/record, and go-nvml; it must never import p2p, node or
// cmd.
package attest
