package main

import (
	"context"
	"log/slog"

	"github.com/idlegrid/idlegrid/market/inert"
)

// inertHandler makes the strings of JSON log records inert before h
// writes them: JSON escapes C0 controls but passes C1 controls (a CSI
// among them) and bidi overrides through, and an operator reads the
// daemon's log in a terminal too. The text format needs none of it: slog
// quotes any value that holds an unprintable rune.
type inertHandler struct{ h slog.Handler }

func (i inertHandler) Enabled(ctx context.Context, l slog.Level) bool { return i.h.Enabled(ctx, l) }

func (i inertHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, inert.Text(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(inertAttr(a))
		return true
	})
	return i.h.Handle(ctx, out)
}

func (i inertHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	mended := make([]slog.Attr, len(attrs))
	for j, a := range attrs {
		mended[j] = inertAttr(a)
	}
	return inertHandler{i.h.WithAttrs(mended)}
}

func (i inertHandler) WithGroup(name string) slog.Handler {
	return inertHandler{i.h.WithGroup(inert.Text(name))}
}

// inertAttr mends an attribute's key, its string or error value, and a
// group's attributes; other values keep their kind.
func inertAttr(a slog.Attr) slog.Attr {
	a.Key = inert.Text(a.Key)
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		a.Value = slog.StringValue(inert.Text(v.String()))
	case slog.KindGroup:
		g := v.Group()
		mended := make([]slog.Attr, len(g))
		for j, b := range g {
			mended[j] = inertAttr(b)
		}
		a.Value = slog.GroupValue(mended...)
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			a.Value = slog.StringValue(inert.Text(err.Error()))
		} else {
			a.Value = v
		}
	default:
		a.Value = v
	}
	return a
}
