package market

import (
	"errors"
	"fmt"
)

// Sentinel errors of package market.
var (
	// ErrTooLarge is returned for an envelope over the size limit.
	ErrTooLarge = errors.New("message too large")
	// ErrSignature is returned for an envelope that does not verify, or
	// that is of another type than the one asked for.
	ErrSignature = errors.New("bad signature")
	// ErrWrongIssuer is returned when the signer is not the issuer named
	// in the message.
	ErrWrongIssuer = errors.New("signer is not the issuer")
	// ErrInvalid wraps every validation failure.
	ErrInvalid = errors.New("invalid message")
	// ErrStale is returned by the book for a message whose sequence
	// number is not above the one it holds.
	ErrStale = errors.New("stale sequence number")
	// ErrBookFull is returned by a book at its limit for a new key whose
	// issuer ranks no higher than the lowest it holds.
	ErrBookFull = errors.New("book full")
	// ErrExpired is returned for a message past its expiry.
	ErrExpired = errors.New("expired")
	// ErrFuture is returned for a message created further ahead of the
	// local clock than the allowed skew.
	ErrFuture = errors.New("created in the future")
)

// FieldError says which field of a message is wrong and why.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return fmt.Sprintf("%s: %s", e.Field, e.Reason) }

// Unwrap makes every FieldError an ErrInvalid.
func (e *FieldError) Unwrap() error { return ErrInvalid }

func invalid(field, format string, a ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, a...)}
}
