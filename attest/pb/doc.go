// Package pb holds the generated Go of attest.proto, the attestation wire
// types. Regenerate with `go generate ./...` (protoc 3.21.12 and
// protoc-gen-go v1.36.12; see the README).
package pb

//go:generate protoc --go_out=. --go_opt=paths=source_relative attest.proto
