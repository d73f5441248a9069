package config

import (
	"errors"
	"fmt"
)

// ErrConfig wraps every configuration error.
var ErrConfig = errors.New("invalid config")

// FieldError names one bad config field, the value found and what is allowed.
type FieldError struct {
	Field   string
	Value   any
	Allowed string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%s = %v: want %s", e.Field, quoteIfString(e.Value), e.Allowed)
}

// Unwrap makes every FieldError an ErrConfig.
func (e *FieldError) Unwrap() error { return ErrConfig }

func FieldErr(field string, v any, allowed string) error {
	return &FieldError{Field: field, Value: v, Allowed: allowed}
}

func quoteIfString(v any) any {
	if s, ok := v.(string); ok {
		return fmt.Sprintf("%q", s)
	}
	return v
}
