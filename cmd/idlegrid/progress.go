package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/idlegrid/idlegrid/market/inert"
	"golang.org/x/term"
)

// statusEvery is how often a changed wait state is written where it
// cannot update in place (a file, a pipe).
const statusEvery = 5 * time.Second

// progressLines writes a command's progress to w, "idlegrid: " before
// each line: steps one a line, and the state of a wait (offers gathered,
// an image pulled) as one line that updates in place on a terminal, or
// elsewhere a changed state at most every statusEvery.
type progressLines struct {
	mu     sync.Mutex
	w      io.Writer
	tty    bool
	width  int
	shown  bool // a status line is on the terminal
	last   string
	lastAt time.Time
}

func newProgressLines(w io.Writer) *progressLines {
	p := &progressLines{w: w, width: 80}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.tty = true
		if width, _, err := term.GetSize(int(f.Fd())); err == nil && width > 0 {
			p.width = width
		}
	}
	return p
}

// step writes one line, clearing a status line first.
func (p *progressLines) step(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
	fmt.Fprintf(p.w, "idlegrid: %s\n", inert.Text(line))
}

// status shows the state of a wait.
func (p *progressLines) status(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	line = "idlegrid: " + inert.Text(line)
	if p.tty {
		// Cut to the terminal's width: a wrapped line would not be
		// overwritten.
		if r := []rune(line); len(r) > p.width-1 {
			line = string(r[:p.width-2]) + "…"
		}
		fmt.Fprint(p.w, "\r\033[K"+line)
		p.shown = true
		return
	}
	if now := time.Now(); line != p.last && now.Sub(p.lastAt) >= statusEvery {
		p.last, p.lastAt = line, now
		fmt.Fprintln(p.w, line)
	}
}

// end clears a status line left on the terminal.
func (p *progressLines) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
}

func (p *progressLines) clear() {
	if p.shown {
		fmt.Fprint(p.w, "\r\033[K")
		p.shown = false
	}
}
