package node

import (
	"errors"

	"github.com/idlegrid/idlegrid/internal/owner"
)

// Sentinel errors of package node.
var (
	// ErrAPIListen is returned when the local API port cannot be bound.
	ErrAPIListen = errors.New("cannot start the local API")
	// ErrClosed is returned by calls on a node that is closing.
	ErrClosed = owner.ErrClosed
)
