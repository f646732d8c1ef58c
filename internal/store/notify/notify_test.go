package notify

import (
	"context"
	"testing"
	"time"
)

const waitTimeout = 5 * time.Second

func waitClosed(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("channel not closed")
		}
	}
}

func TestNotifyCoalesces(t *testing.T) {
	t.Parallel()
	var h Hub
	ch := h.Subscribe(t.Context())
	for range 5 {
		h.Notify()
	}
	select {
	case <-ch:
	default:
		t.Fatal("no signal after Notify")
	}
	select {
	case <-ch:
		t.Fatal("five Notify calls gave two signals, want one")
	default:
	}
}

func TestNotifyReachesEverySubscriber(t *testing.T) {
	t.Parallel()
	var h Hub
	a, b := h.Subscribe(t.Context()), h.Subscribe(t.Context())
	h.Notify()
	for i, ch := range []<-chan struct{}{a, b} {
		select {
		case <-ch:
		default:
			t.Errorf("subscriber %d got no signal", i)
		}
	}
}

func TestSubscribeClosesOnCancel(t *testing.T) {
	t.Parallel()
	var h Hub
	ctx, cancel := context.WithCancel(t.Context())
	ch := h.Subscribe(ctx)
	cancel()
	waitClosed(t, ch)
	h.Notify() // must not send on the closed channel

	done, cancelDone := context.WithCancel(t.Context())
	cancelDone()
	waitClosed(t, h.Subscribe(done))
}

func TestClose(t *testing.T) {
	t.Parallel()
	var h Hub
	ctx, cancel := context.WithCancel(t.Context())
	ch := h.Subscribe(ctx)
	h.Close()
	waitClosed(t, ch)
	cancel() // the ctx callback must not close it again
	h.Close()
	waitClosed(t, h.Subscribe(t.Context()))
	h.Notify()
}
