// Package owner is the go-libp2p-pubsub processLoop shape, for any
// state: one goroutine alone touches it, and others hand it functions.
// It imports nothing of ours.
package owner

import (
	"context"
	"errors"
	"sync"
)

// Owner is the go-libp2p-pubsub processLoop shape: one goroutine alone
// touches a state S; others hand it functions, in order, and wait for
// them (Do) or not (Post). The functions do no I/O: they read and change
// S and return.
type Owner[S any] struct {
	eval    chan func(S)
	quit    chan struct{}
	done    chan struct{}
	stopped sync.Once
}

// ownerQueue is how many functions may wait for an owner: a burst of
// gossip queues up to it before a reader waits.
const ownerQueue = 64

// New returns an owner; Start runs it.
func New[S any]() *Owner[S] {
	return &Owner[S]{eval: make(chan func(S), ownerQueue), quit: make(chan struct{}), done: make(chan struct{})}
}

// Start runs the owner on st until stop.
func (o *Owner[S]) Start(st S) {
	go func() {
		defer close(o.done)
		for {
			select {
			case f := <-o.eval:
				f(st)
			case <-o.quit:
				return
			}
		}
	}()
}

// Do runs f on the owner and waits for it, or for ctx or the owner's end
// before it took f: a function the owner took runs to its end.
func (o *Owner[S]) Do(ctx context.Context, f func(S)) error {
	ran := make(chan struct{})
	if err := o.Post(ctx, func(st S) { f(st); close(ran) }); err != nil {
		return err
	}
	select {
	case <-ran:
		return nil
	case <-o.done: // stopped: f ran first, or was still queued
		select {
		case <-ran:
			return nil
		default:
			return ErrClosed
		}
	}
}

// Post queues f for the owner without waiting for it to run; after Stop
// has returned, it refuses with ErrClosed (a send to the queue's free
// room would otherwise win half the time, and f would never run).
func (o *Owner[S]) Post(ctx context.Context, f func(S)) error {
	select {
	case <-o.done:
		return ErrClosed
	default:
	}
	select {
	case o.eval <- f:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-o.done:
		return ErrClosed
	}
}

// Stop ends the owner and waits for it; what is still queued is dropped.
func (o *Owner[S]) Stop() {
	o.stopped.Do(func() { close(o.quit) })
	<-o.done
}

// ErrClosed is returned by calls on a node that is closing.
var ErrClosed = errors.New("node is closing")
