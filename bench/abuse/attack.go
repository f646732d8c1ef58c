package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"nodehotfix/bench/internal/stats"
	lpsv1 "nodehotfix/internal/gen/akslivepatching/v1"
	"nodehotfix/internal/node/lpsclient"
	"nodehotfix/test/harness"
)

// setupTimeout is the attacker's patience for one connection (TCP, and for
// idle-h2 the TLS handshake and the SETTINGS exchange), longer than lpsd's
// own handshake timeout so that lpsd, not the attacker, gives up first.
const setupTimeout = 10 * time.Second

// Attack kinds.
const (
	kindSilent = "silent"  // TCP connected, never a byte sent
	kindIdleH2 = "idle-h2" // TLS with ALPN h2, the HTTP/2 preface and SETTINGS exchanged, then no call
	// kindTrickle sends a real ClientHello one byte per trickleEvery, so
	// the connection is never silent and its handshake never done.
	kindTrickle = "trickle"
	// kindOpenCall is idle-h2 with one call opened (HEADERS of
	// GetComponentConfig) whose request is never sent: an active
	// connection, which the idle limit does not close.
	kindOpenCall = "open-call"
)

// trickleEvery is the trickle attacker's pace: a byte every 400 ms keeps
// a ClientHello of ~300 bytes going for two minutes.
const trickleEvery = 400 * time.Millisecond

// attacker holds target connections of one kind open to addr from one
// local address until its ctx is done: a connection lpsd closes is opened
// again after about reopen (0: never), as a client set on holding them
// would. It is one client: every connection comes from local.
type attacker struct {
	kind     string
	target   int
	addr     string
	local    *net.TCPAddr
	reopen   time.Duration
	parallel int // connections being set up at once

	start       time.Time
	dials       atomic.Int64
	setupErrs   atomic.Int64
	established atomic.Int64
	closed      atomic.Int64 // by lpsd
	open, peak  atomic.Int64
	peakAt      atomic.Int64 // ns after start when open last reached a new peak
	fullAt      atomic.Int64 // ns after start when open first reached target; 0 never

	mu       sync.Mutex
	held     []time.Duration // of connections lpsd closed
	firstErr error
}

// run holds the connections until ctx is done, then closes them all and
// returns.
func (a *attacker) run(ctx context.Context) {
	a.start = time.Now()
	sem := make(chan struct{}, a.parallel)
	var wg sync.WaitGroup
	for range a.target {
		wg.Go(func() { a.slot(ctx, sem) })
	}
	wg.Wait()
}

func (a *attacker) slot(ctx context.Context, sem chan struct{}) {
	for ctx.Err() == nil {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		a.dials.Add(1)
		c, err := a.setup(ctx)
		<-sem
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			a.setupErrs.Add(1)
			a.mu.Lock()
			if a.firstErr == nil {
				a.firstErr = err
			}
			a.mu.Unlock()
		} else {
			a.established.Add(1)
			opened := time.Now()
			a.opened()
			byServer := a.hold(ctx, c)
			a.open.Add(-1)
			if !byServer {
				return
			}
			a.closed.Add(1)
			a.mu.Lock()
			a.held = append(a.held, time.Since(opened))
			a.mu.Unlock()
		}
		if a.reopen == 0 {
			<-ctx.Done()
			return
		}
		// Jitter, so that connections closed together do not return together.
		pause := a.reopen/2 + rand.N(a.reopen)
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
	}
}

func (a *attacker) opened() {
	n := a.open.Add(1)
	for p := a.peak.Load(); n > p; p = a.peak.Load() {
		if a.peak.CompareAndSwap(p, n) {
			a.peakAt.Store(int64(time.Since(a.start)))
			break
		}
	}
	if n >= int64(a.target) {
		a.fullAt.CompareAndSwap(0, int64(time.Since(a.start)))
	}
}

// setup opens one connection of the attacker's kind.
func (a *attacker) setup(ctx context.Context) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	d := net.Dialer{LocalAddr: a.local}
	c, err := d.DialContext(ctx, "tcp", a.addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", a.addr, err)
	}
	if a.kind == kindSilent || a.kind == kindTrickle {
		return c, nil
	}
	tc, err := h2Setup(ctx, c)
	if err == nil && a.kind == kindOpenCall {
		err = openCall(tc)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return tc, nil
}

// openCall opens a GetComponentConfig call on c and sends nothing more:
// the HEADERS frame only, the stream left open.
func openCall(c net.Conn) error {
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{
		{":method", "POST"}, {":scheme", "https"}, {":authority", harness.APIServerName + ":443"},
		{":path", lpsv1.LivePatchingService_GetComponentConfig_FullMethodName},
		{"content-type", "application/grpc"}, {"te", "trailers"},
	} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
		return fmt.Errorf("open a call: %w", err)
	}
	return nil
}

// clientHello returns the bytes of a ClientHello as nodes send it, for
// the trickle attacker to dribble.
var clientHello = sync.OnceValue(func() []byte {
	client, server := net.Pipe()
	defer server.Close()
	go func() {
		tls.Client(client, &tls.Config{ServerName: harness.APIServerName, NextProtos: []string{lpsclient.ALPN, "h2"}, InsecureSkipVerify: true}).Handshake()
		client.Close()
	}()
	// The first record is the whole ClientHello: 5 bytes of header, then
	// its length.
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(server, hdr); err != nil {
		return nil
	}
	body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	if _, err := io.ReadFull(server, body); err != nil {
		return nil
	}
	return append(hdr, body...)
})

// h2Setup completes TLS with ALPN h2 (offering what nodes offer) and the
// HTTP/2 connection preface: the client's preface and SETTINGS, the
// server's SETTINGS, acknowledged.
func h2Setup(ctx context.Context, c net.Conn) (net.Conn, error) {
	tc := tls.Client(c, &tls.Config{
		ServerName: harness.APIServerName,
		NextProtos: []string{lpsclient.ALPN, "h2"},
		// The attacker needs no assurance about lpsd.
		InsecureSkipVerify: true,
	})
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, fmt.Errorf("tls handshake: %w", err)
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
		return nil, fmt.Errorf("negotiated %q, not h2", p)
	}
	dl, _ := ctx.Deadline()
	tc.SetDeadline(dl)
	fr := http2.NewFramer(tc, tc)
	if _, err := io.WriteString(tc, http2.ClientPreface); err != nil {
		return nil, fmt.Errorf("write preface: %w", err)
	}
	if err := fr.WriteSettings(); err != nil {
		return nil, fmt.Errorf("write settings: %w", err)
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return nil, fmt.Errorf("read server settings: %w", err)
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			if err := fr.WriteSettingsAck(); err != nil {
				return nil, fmt.Errorf("ack settings: %w", err)
			}
			break
		}
	}
	tc.SetDeadline(time.Time{})
	return tc, nil
}

// hold keeps c open until lpsd closes it (true) or ctx is done (false),
// answering what an idle HTTP/2 client answers (SETTINGS, PING).
func (a *attacker) hold(ctx context.Context, c net.Conn) bool {
	stop := context.AfterFunc(ctx, func() { c.Close() })
	switch a.kind {
	case kindSilent:
		io.Copy(io.Discard, c)
	case kindTrickle:
		closed := make(chan struct{})
		go func() {
			io.Copy(io.Discard, c)
			close(closed)
		}()
		t := time.NewTicker(trickleEvery)
		hello := clientHello()
	trickle:
		for i := 0; ; i = (i + 1) % len(hello) {
			if _, err := c.Write(hello[i : i+1]); err != nil {
				break
			}
			select {
			case <-closed:
				break trickle
			case <-t.C:
			}
		}
		t.Stop()
		c.Close()
		<-closed
	default:
		fr := http2.NewFramer(c, c)
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				break
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					fr.WriteSettingsAck()
				}
			case *http2.PingFrame:
				if !f.IsAck() {
					fr.WritePing(true, f.Data)
				}
			}
		}
	}
	byServer := stop()
	if byServer {
		c.Close()
	}
	return byServer
}

// report summarises the attack; call it after run returned.
func (a *attacker) report() *attackReport {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := &attackReport{
		Kind: a.kind, Target: a.target, Local: a.local.IP.String(),
		Dials: a.dials.Load(), Established: a.established.Load(), SetupErrors: a.setupErrs.Load(),
		ClosedByLPSD: a.closed.Load(), PeakOpen: a.peak.Load(), PeakAfterS: time.Duration(a.peakAt.Load()).Seconds(),
	}
	if a.firstErr != nil {
		r.FirstError = a.firstErr.Error()
	}
	if ns := a.fullAt.Load(); ns > 0 {
		r.FullAfterS = time.Duration(ns).Seconds()
	}
	if len(a.held) > 0 {
		h := stats.Of(stats.Millis(a.held))
		r.HeldP50s, r.HeldMaxS = h.Median/1000, h.Max/1000
	}
	return r
}
