// Package fault names the kinds of failure that node's domain packages
// return, so that each layer above turns a kind into what its own user
// needs, in one table each: package api a status code (and, in api.Client,
// the status code back into the kind), package main advice. A domain
// package returns its own typed and sentinel errors, marked with a kind
// here; no domain package returns a transport's error.
//
// fault owns nothing and imports only the standard library.
package fault

import (
	"errors"
	"fmt"
)

// The kinds of failure. errors.Is(err, kind) tells them apart; an error
// of none of them is the node's own failure.
var (
	// ErrInvalid is a request at fault: a field holds a value it does
	// not allow, or the fields contradict each other. Asking again as is
	// fails again.
	ErrInvalid = errors.New("invalid request")
	// ErrNotFound is a request naming what this node does not have: a
	// lease, a rental.
	ErrNotFound = errors.New("not found")
	// ErrConflict is a request that what it names forbids now: a lease
	// that has already ended, a name already taken.
	ErrConflict = errors.New("conflict")
	// ErrUnavailable is a request this node cannot serve as it is
	// configured or as it is now: a node that sells no GPUs asked for
	// their readings, a node that is closing.
	ErrUnavailable = errors.New("unavailable")
)

// Kinds lists the kinds, for the tables that map each.
var Kinds = []error{ErrInvalid, ErrNotFound, ErrConflict, ErrUnavailable}

// Field is a request's field holding a value it does not allow. It is
// an ErrInvalid.
type Field struct {
	Name  string // the field as the API spells it: "count", "downloads[2]"
	Value string // the value given, as the request wrote it
	Want  string // what the field allows: "want 1 to 1024"
}

func (e *Field) Error() string {
	if e.Value == "" {
		return e.Name + ": " + e.Want
	}
	return e.Name + " " + e.Value + ": " + e.Want
}

// Is makes every Field an ErrInvalid.
func (e *Field) Is(target error) bool { return target == ErrInvalid }

// Fieldf is a Field whose Value is v as %v writes it and whose Want is
// format's text.
func Fieldf(name string, v any, format string, args ...any) error {
	return &Field{Name: name, Value: fmt.Sprint(v), Want: fmt.Sprintf(format, args...)}
}

// kinded is err marked as of kind; it unwraps to err, so that the typed
// errors within stay reachable with errors.As.
type kinded struct {
	kind error
	err  error
}

func (k *kinded) Error() string        { return k.err.Error() }
func (k *kinded) Is(target error) bool { return target == k.kind }
func (k *kinded) Unwrap() error        { return k.err }

// Mark marks err as of kind (one of Kinds); nil stays nil.
func Mark(kind, err error) error {
	if err == nil {
		return nil
	}
	return &kinded{kind: kind, err: err}
}

// Invalid marks err as the request's fault.
func Invalid(err error) error { return Mark(ErrInvalid, err) }

// Invalidf is an ErrInvalid that says what fmt.Errorf would.
func Invalidf(format string, args ...any) error { return Invalid(fmt.Errorf(format, args...)) }

// NotFoundf is an ErrNotFound that says what fmt.Errorf would.
func NotFoundf(format string, args ...any) error {
	return Mark(ErrNotFound, fmt.Errorf(format, args...))
}

// Conflictf is an ErrConflict that says what fmt.Errorf would.
func Conflictf(format string, args ...any) error {
	return Mark(ErrConflict, fmt.Errorf(format, args...))
}

// Unavailablef is an ErrUnavailable that says what fmt.Errorf would.
func Unavailablef(format string, args ...any) error {
	return Mark(ErrUnavailable, fmt.Errorf(format, args...))
}

// KindOf is the kind of err, or nil when it is of none.
func KindOf(err error) error {
	for _, k := range Kinds {
		if errors.Is(err, k) {
			return k
		}
	}
	return nil
}
