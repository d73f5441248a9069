package node

import (
	"os"
	"testing"

	"github.com/idlegrid/idlegrid/internal/testwatch"
)

// TestMain names, at the end of the output, the tests still running
// shortly before go test's -timeout would end the binary.
func TestMain(m *testing.M) { os.Exit(testwatch.Run(m)) }
