package lps

import (
	"errors"
	"net"
	"runtime"
	"time"

	"google.golang.org/grpc/credentials"
)

// DefaultHandshakesPerCPU sizes the default handshake limit: this many
// concurrent TLS handshakes per usable CPU (GOMAXPROCS).
//
// A server handshake holds its slot for about one network round trip
// (TLS 1.3: the server's flight, then the client's Finished) plus its CPU
// time (~0.5 ms). Nodes reach the lpsd of their own region, tens of
// milliseconds away at most, so at a 50 ms round trip 128 slots per CPU
// admit ~2,500 handshakes a second per CPU, about twice what one CPU
// completes (bench/README.md): the limit does not throttle a healthy server.
// When the CPUs are saturated, 128 queued handshakes per CPU drain in well
// under a second, so an admitted node finishes inside its 3 s deadline
// instead of every handshake slowing until none completes. Size
// --max-handshakes up for nodes further away, down when lpsd gets only a
// share of the machine's CPUs.
const DefaultHandshakesPerCPU = 128

// handshakeWait is how long a connection may wait for a handshake slot
// before it is closed. Nodes give the whole call 3 s, and an admitted
// handshake and call take well under one at the default limit, so a node
// that waited 2 s can still be answered in time; later, closing lets it fail
// open at once rather than at its deadline. It also absorbs bursts: a burst
// the CPUs clear within 2 s is served whole (bench/README.md).
const handshakeWait = 2 * time.Second

// DefaultMaxHandshakes is the handshake limit for this process.
func DefaultMaxHandshakes() int { return DefaultHandshakesPerCPU * runtime.GOMAXPROCS(0) }

// errShed ends a connection that waited handshakeWait without a slot.
var errShed = errors.New("overloaded: no TLS handshake slot within 2s; connection shed")

// gatedCreds runs at most cap(slots) server handshakes at once. It is the
// admission control of the node-facing server: under overload it keeps the
// handshakes it admits fast and closes the rest early (counted in Metrics),
// where an unbounded number of concurrent handshakes would each slow down
// until none completes within a node's deadline.
type gatedCreds struct {
	credentials.TransportCredentials
	slots chan struct{}
	m     *Metrics
}

func newGatedCreds(c credentials.TransportCredentials, limit int, m *Metrics) *gatedCreds {
	g := &gatedCreds{TransportCredentials: c, slots: make(chan struct{}, limit), m: m}
	m.registerHandshakes(func() float64 { return float64(len(g.slots)) }, limit)
	return g
}

// ServerHandshake waits up to handshakeWait for a slot, then does the
// wrapped handshake in it. On error grpc-go closes the connection.
func (g *gatedCreds) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	select {
	case g.slots <- struct{}{}:
	default:
		t := time.NewTimer(handshakeWait)
		select {
		case g.slots <- struct{}{}:
			t.Stop()
		case <-t.C:
			g.m.shed.Add(1)
			return nil, nil, errShed
		}
	}
	defer func() { <-g.slots }()
	return g.TransportCredentials.ServerHandshake(c)
}

// Clone shares the slots: a clone gates the same server.
func (g *gatedCreds) Clone() credentials.TransportCredentials {
	return &gatedCreds{TransportCredentials: g.TransportCredentials.Clone(), slots: g.slots, m: g.m}
}
