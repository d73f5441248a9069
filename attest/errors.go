package attest

import "errors"

// Sentinel errors of package attest. Callers test them with errors.Is;
// the wrapped text names the GPU, peer or field at fault.
var (
	// Attestation documents.
	ErrDocSignature  = errors.New("attestation does not verify")
	ErrDocSigner     = errors.New("attestation signed by another peer")
	ErrDocNonce      = errors.New("attestation answers another nonce")
	ErrDocChallenger = errors.New("attestation answers another challenger")
	ErrDocSwarm      = errors.New("attestation made in another swarm")
	ErrDocStale      = errors.New("attestation is not fresh")
	ErrDocInvalid    = errors.New("malformed attestation")
	ErrNotAttested   = errors.New("offer claims GPUs the attestation does not show")
	ErrDocHash       = errors.New("attestation does not match the offer's attestation hash")
	ErrDocOffer      = errors.New("attestation does not back this offer")
	ErrDocChanged    = errors.New("hardware changed since the offer's attestation")
	// ErrNoOffer: the verifier holds no offer of the attested peer to
	// check the document against.
	ErrNoOffer = errors.New("no offer in the book")

	// Confidential-computing evidence, each its own reason.
	ErrCCMalformed = errors.New("confidential-computing report malformed")
	ErrCCNonce     = errors.New("confidential-computing report answers another nonce")
	ErrCCChain     = errors.New("confidential-computing certificate chain does not verify")
	ErrCCSignature = errors.New("confidential-computing report signature does not verify")

	// ErrNoEvidence is returned for evidence that proves nothing.
	ErrNoEvidence = errors.New("not evidence of cheating")
	// ErrEvidenceUnchecked is returned for evidence this node cannot
	// check: two peers' claims with no CC roots configured.
	ErrEvidenceUnchecked = errors.New("evidence this node cannot check")

	// ErrUnknownFake is returned for a fake machine name that does not exist.
	ErrUnknownFake = errors.New("unknown fake GPU machine")
)
