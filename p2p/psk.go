package p2p

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"strings"

	"github.com/libp2p/go-libp2p/core/pnet"
)

const (
	pskHeader   = "/key/swarm/psk/1.0.0/"
	pskBase16   = "/base16/"
	pskKeyBytes = 32
	// maxSwarmKeyFile bounds what ParseSwarmKey reads: a valid file is 95 bytes.
	maxSwarmKeyFile = 4096
)

// GenerateSwarmKey returns a fresh 32-byte pre-shared key from crypto/rand.
func GenerateSwarmKey() (pnet.PSK, error) {
	key := make([]byte, pskKeyBytes)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("generate swarm key: %w", err)
	}
	return key, nil
}

// EncodeSwarmKey writes key in the standard libp2p PSK file format:
// "/key/swarm/psk/1.0.0/", "/base16/" and 64 hex digits, one per line.
func EncodeSwarmKey(w io.Writer, key pnet.PSK) error {
	if len(key) != pskKeyBytes {
		return fmt.Errorf("%w: key is %d bytes, want %d", ErrSwarmKey, len(key), pskKeyBytes)
	}
	_, err := fmt.Fprintf(w, "%s\n%s\n%s\n", pskHeader, pskBase16, hex.EncodeToString(key))
	return err
}

// ParseSwarmKey reads a libp2p PSK file and says precisely what is wrong
// with one that is malformed. It accepts the /base16/ encoding that
// EncodeSwarmKey writes, and the /base64/ and /bin/ encodings of the format.
func ParseSwarmKey(r io.Reader) (pnet.PSK, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxSwarmKeyFile+1))
	if err != nil {
		return nil, fmt.Errorf("%w: read: %v", ErrSwarmKey, err)
	}
	if len(data) > maxSwarmKeyFile {
		return nil, fmt.Errorf("%w: file is larger than %d bytes; a swarm key file is 3 short lines", ErrSwarmKey, maxSwarmKeyFile)
	}
	lines := strings.SplitN(string(data), "\n", 3)
	if strings.TrimSpace(lines[0]) != pskHeader {
		return nil, fmt.Errorf("%w: first line is %q, want %q (create one with `idlegrid swarm keygen`)", ErrSwarmKey, clip(lines[0]), pskHeader)
	}
	if len(lines) < 3 {
		return nil, fmt.Errorf("%w: want 3 lines (header, encoding, key), got %d", ErrSwarmKey, len(lines))
	}
	enc := strings.TrimSpace(lines[1])
	switch enc {
	case "/base16/":
		digits := strings.TrimSpace(lines[2])
		if len(digits) != 2*pskKeyBytes {
			return nil, fmt.Errorf("%w: key line has %d characters, want %d hex digits", ErrSwarmKey, len(digits), 2*pskKeyBytes)
		}
		if _, err := hex.DecodeString(digits); err != nil {
			return nil, fmt.Errorf("%w: key line is not hexadecimal: %v", ErrSwarmKey, err)
		}
	case "/base64/", "/bin/":
	default:
		return nil, fmt.Errorf("%w: encoding line is %q, want /base16/, /base64/ or /bin/", ErrSwarmKey, clip(lines[1]))
	}
	key, err := pnet.DecodeV1PSK(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSwarmKey, err)
	}
	return key, nil
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
