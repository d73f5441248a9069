package node

import (
	"context"
	"sync"
)

// owner is the go-libp2p-pubsub processLoop shape: one goroutine alone
// touches a state S; others hand it functions, in order, and wait for
// them (do) or not (post). The functions do no I/O: they read and change
// S and return.
type owner[S any] struct {
	eval    chan func(S)
	quit    chan struct{}
	done    chan struct{}
	stopped sync.Once
}

// ownerQueue is how many functions may wait for an owner: a burst of
// gossip queues up to it before a reader waits.
const ownerQueue = 64

func newOwner[S any]() *owner[S] {
	return &owner[S]{eval: make(chan func(S), ownerQueue), quit: make(chan struct{}), done: make(chan struct{})}
}

// start runs the owner on st until stop.
func (o *owner[S]) start(st S) {
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

// do runs f on the owner and waits for it, or for ctx or the owner's end
// before it took f: a function the owner took runs to its end.
func (o *owner[S]) do(ctx context.Context, f func(S)) error {
	ran := make(chan struct{})
	if err := o.post(ctx, func(st S) { f(st); close(ran) }); err != nil {
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

// post queues f for the owner without waiting for it to run.
func (o *owner[S]) post(ctx context.Context, f func(S)) error {
	select {
	case o.eval <- f:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-o.done:
		return ErrClosed
	}
}

// stop ends the owner and waits for it; what is still queued is dropped.
func (o *owner[S]) stop() {
	o.stopped.Do(func() { close(o.quit) })
	<-o.done
}
