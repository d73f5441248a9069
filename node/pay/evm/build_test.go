package evm

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/accounts/abi/bind"
	"github.com/ethereum/go-ethereum/crypto"
)

var builds = []struct {
	name string
	meta *bind.MetaData
}{{"PaymentChannels", PaymentChannelsMetaData}, {"TestToken", TestTokenMetaData}}

// TestTheCommittedBytecodeIsCompiledFromTheSource proves, without a
// compiler, that build/ holds what the committed sources compile to: solc
// ends the bytecode with the IPFS hash of the compilation's metadata, and
// the metadata holds the keccak-256 of every source. So the bytecode
// names its metadata, and the metadata names PaymentChannels.sol and
// TestToken.sol as they are in this checkout; the bindings carry the same
// ABI and bytecode.
func TestTheCommittedBytecodeIsCompiledFromTheSource(t *testing.T) {
	for _, b := range builds {
		bin := readBuild(t, b.name+".bin")
		code, err := hex.DecodeString(strings.TrimSpace(string(bin)))
		if err != nil {
			t.Fatalf("%s.bin: %v", b.name, err)
		}
		metaFile := readBuild(t, b.name+".metadata.json")
		if got, want := metadataHash(t, code), ipfsFileHash(metaFile); !bytes.Equal(got, want) {
			t.Fatalf("%s.bin names metadata %x, but %s.metadata.json hashes to %x: the two are not of one compilation", b.name, got, b.name, want)
		}
		var meta struct {
			Sources map[string]struct {
				Keccak256 string `json:"keccak256"`
			} `json:"sources"`
		}
		if err := json.Unmarshal(metaFile, &meta); err != nil {
			t.Fatal(err)
		}
		src, err := os.ReadFile(filepath.Join("contracts", b.name+".sol"))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := meta.Sources[b.name+".sol"].Keccak256, crypto.Keccak256Hash(src).Hex(); got != want {
			t.Fatalf("%s.sol hashes to %s, but build/ was compiled from %s: run go generate ./node/pay/evm", b.name, want, got)
		}
		if got, want := strings.TrimPrefix(b.meta.Bin, "0x"), strings.TrimSpace(string(bin)); got != want {
			t.Fatalf("the %s binding's bytecode is not build/%s.bin: run go generate ./node/pay/evm", b.name, b.name)
		}
		var abiBuild, abiBinding any
		if err := json.Unmarshal(readBuild(t, b.name+".abi"), &abiBuild); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(b.meta.ABI), &abiBinding); err != nil {
			t.Fatal(err)
		}
		if a, c := mustJSON(abiBuild), mustJSON(abiBinding); a != c {
			t.Fatalf("the %s binding's ABI is not build/%s.abi", b.name, b.name)
		}
	}
}

// TestTheSourceCompilesToTheCommittedBytecode compiles the sources with
// the pinned solc-js and compares every file of build/. It needs the npm
// packages (cd node/pay/evm/contracts && npm ci, which .ci/run does);
// with IDLEGRID_REQUIRE_SOLC set (.ci/run sets it) their absence fails it.
func TestTheSourceCompilesToTheCommittedBytecode(t *testing.T) {
	if _, err := os.Stat(filepath.Join("contracts", "node_modules", "solc")); err != nil {
		if os.Getenv("IDLEGRID_REQUIRE_SOLC") != "" {
			t.Fatal("contracts/node_modules has no solc: .ci/run installs it with npm ci")
		}
		t.Skip("contracts/node_modules has no solc: run (cd node/pay/evm/contracts && npm ci) to compile the contracts here")
	}
	out, err := exec.Command("node", filepath.Join("contracts", "compile.js"), "--check").CombinedOutput()
	if err != nil {
		t.Fatalf("compile.js --check: %v\n%s", err, out)
	}
}

func readBuild(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("contracts", "build", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// metadataHash is the sha2-256 multihash solc put at the end of code: a
// CBOR map {"ipfs": hash, "solc": version}, its length in the last two
// bytes.
func metadataHash(t *testing.T, code []byte) []byte {
	t.Helper()
	if len(code) < 2 {
		t.Fatal("empty bytecode")
	}
	n := int(binary.BigEndian.Uint16(code[len(code)-2:]))
	if n+2 > len(code) {
		t.Fatalf("bytecode's metadata length %d exceeds it", n)
	}
	cbor := code[len(code)-2-n : len(code)-2]
	key := append([]byte{0x64}, "ipfs"...)
	i := bytes.Index(cbor, key)
	if i < 0 || i+len(key)+2+34 > len(cbor) || cbor[i+len(key)] != 0x58 || cbor[i+len(key)+1] != 34 {
		t.Fatalf("bytecode's metadata has no IPFS hash: %x", cbor)
	}
	return cbor[i+len(key)+2 : i+len(key)+2+34]
}

// ipfsFileHash is the CIDv0 multihash IPFS gives b as one UnixFS file
// block (as solc computes it for metadata under 256 KiB): a dag-pb node
// whose data is UnixFS{type: file, data: b, filesize: len(b)}.
func ipfsFileHash(b []byte) []byte {
	var unixfs []byte
	unixfs = append(unixfs, 0x08, 0x02) // type: file
	unixfs = append(unixfs, 0x12)
	unixfs = binary.AppendUvarint(unixfs, uint64(len(b)))
	unixfs = append(unixfs, b...)
	unixfs = append(unixfs, 0x18)
	unixfs = binary.AppendUvarint(unixfs, uint64(len(b)))
	node := []byte{0x0a}
	node = binary.AppendUvarint(node, uint64(len(unixfs)))
	node = append(node, unixfs...)
	sum := sha256.Sum256(node)
	return append([]byte{0x12, 0x20}, sum[:]...)
}
