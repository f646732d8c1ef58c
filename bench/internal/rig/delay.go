package rig

import (
	"context"
	"net"
	"sync"
	"time"
)

// DelayProxy listens on listen ("127.0.0.1:0" for any loopback port) and
// forwards every connection to upstream, holding each chunk for oneWay in
// each direction: a network whose round trip is 2·oneWay, for measuring
// what a client overlaps with it. Order within a direction is kept, and a half-close arrives oneWay
// late like data; bandwidth is not modelled, nor TCP's own handshake (a
// connect completes at once), so a new connection costs one round trip
// less than on a real network. It returns the address to dial and stops
// when ctx ends.
func DelayProxy(ctx context.Context, listen, upstream string, oneWay time.Duration) (string, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return "", err
	}
	var wg sync.WaitGroup
	context.AfterFunc(ctx, func() { ln.Close() })
	go func() {
		for {
			down, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer down.Close()
				up, err := (&net.Dialer{}).DialContext(ctx, "tcp", upstream)
				if err != nil {
					return
				}
				defer up.Close()
				stop := context.AfterFunc(ctx, func() { up.Close(); down.Close() })
				defer stop()
				var dirs sync.WaitGroup
				dirs.Go(func() { delayCopy(up, down, oneWay) })
				dirs.Go(func() { delayCopy(down, up, oneWay) })
				dirs.Wait()
			})
		}
	}()
	return ln.Addr().String(), nil
}

// delayCopy copies src to dst, writing each chunk oneWay after it was
// read, and half-closes dst when src ends.
func delayCopy(dst, src net.Conn, oneWay time.Duration) {
	type chunk struct {
		due  time.Time
		data []byte
	}
	q := make(chan chunk, 256)
	go func() {
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{time.Now().Add(oneWay), buf[:n]}
			}
			if err != nil {
				// The end travels as slowly as the data.
				q <- chunk{due: time.Now().Add(oneWay)}
				return
			}
		}
	}()
	for c := range q {
		time.Sleep(time.Until(c.due))
		if len(c.data) == 0 {
			continue
		}
		if _, err := dst.Write(c.data); err != nil {
			// Stop the reader, and drain so it is not left blocked on
			// a full queue.
			src.Close()
			for range q {
			}
			return
		}
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}
