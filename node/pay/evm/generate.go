package evm

// The contracts' build/ (ABI, bytecode, metadata) is compiled from the
// sources by the solc-js that contracts/package.json pins, and the Go
// bindings are made from it by go-ethereum's abigen:
//
//	(cd contracts && npm ci) && go generate ./node/pay/evm
//
//go:generate node contracts/compile.js
//go:generate go run github.com/ethereum/go-ethereum/cmd/abigen@v1.17.10 --abi contracts/build/PaymentChannels.abi --bin contracts/build/PaymentChannels.bin --pkg evm --type PaymentChannels --out channels_binding.go
//go:generate go run github.com/ethereum/go-ethereum/cmd/abigen@v1.17.10 --abi contracts/build/TestToken.abi --bin contracts/build/TestToken.bin --pkg evm --type TestToken --out token_binding.go
