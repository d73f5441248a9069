package api

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idlegrid/idlegrid/node/fault"
)

// Every kind of failure has a status of its own, and Client reads that
// status back into the same kind; an error of no kind is the handler's.
func TestEachKindOfFailureRoundTripsThroughItsStatus(t *testing.T) {
	seen := map[int]bool{}
	for _, k := range fault.Kinds {
		code := statusOf(fault.Mark(k, errors.New("x")), http.StatusTeapot)
		if code == http.StatusTeapot || seen[code] {
			t.Errorf("%v: status %d, taken or none", k, code)
		}
		seen[code] = true
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writeError(w, fault.Mark(k, errors.New("what went wrong")), http.StatusInternalServerError)
		}))
		_, err := NewClient(srv.URL, "t").Status(t.Context())
		srv.Close()
		if !errors.Is(err, k) || fault.KindOf(err) != k {
			t.Errorf("%v over HTTP: %v, of kind %v", k, err, fault.KindOf(err))
		}
	}
	if code := statusOf(errors.New("x"), http.StatusServiceUnavailable); code != http.StatusServiceUnavailable {
		t.Errorf("an error of no kind: %d, want the handler's 503", code)
	}
}
