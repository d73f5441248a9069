// Package pay is how a lease is paid: payment channels and the vouchers a
// renter signs on them, one per verified telemetry beat, and their
// redemption (settlement kinds none, ledger and evm). This file's
// vouchers are EIP-712 typed data of the channel contract in pay/evm, so
// the contract checks exactly what a provider's node checks.
package pay
