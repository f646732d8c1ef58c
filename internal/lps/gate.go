package lps

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
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

// firstRecordWait is how long a new connection has to send its whole
// first TLS record (the ClientHello), holding no handshake slot meanwhile.
// A node sends it at once; a connection that does not (silent, or
// trickling a byte at a time) is closed
// (lpsd_connections_closed_total{reason="silent"}) instead of holding a
// slot.
const firstRecordWait = time.Second

// slotHold bounds the rest of a handshake once it has its slot: the
// server's flight and the client's answer, one round trip for a node tens
// of milliseconds away. A client that stops answering loses its slot then,
// not at the handshake timeout. It is longer than handshakeWait, so a
// connection waiting for a slot is shed before a stalled holder's time is
// up.
const slotHold = 2500 * time.Millisecond

// maxRecord is the largest TLS record a ClientHello may come in
// (2^14 bytes of plaintext, plus room a record may carry).
const maxRecord = 16384 + 2048

// DefaultHandshakesPerPeer caps the handshakes in flight from one IP
// address. Nodes behind one NAT share an address, so it is generous: at a
// 50 ms round trip it admits over a thousand handshakes a second from one
// address, yet one host can hold at most this share of the slots.
const DefaultHandshakesPerPeer = 64

// noPeerLimit, as a per-peer limit, turns it off: behind a balancer or a
// NAT that hides the nodes' addresses, every node is one peer.
const noPeerLimit = -1

var (
	// errShed ends a connection that waited handshakeWait without a slot.
	errShed = errors.New("overloaded: no TLS handshake slot within 2s; connection shed")
	// errSilent ends a connection that sent nothing for firstRecordWait.
	errSilent = errors.New("no whole ClientHello within 1s; connection closed")
	// errNotTLS ends a connection whose first record is not a TLS
	// handshake record.
	errNotTLS = errors.New("first record is not a TLS handshake; connection closed")
	// errPeerHandshakes ends a connection whose address has its
	// handshakes-in-flight limit in use.
	errPeerHandshakes = errors.New("too many TLS handshakes in flight from this address; connection closed")
)

// gatedCreds runs at most cap(slots) server handshakes at once. It is the
// admission control of the node-facing server: under overload it keeps the
// handshakes it admits fast and closes the rest early (counted in Metrics),
// where an unbounded number of concurrent handshakes would each slow down
// until none completes within a node's deadline.
type gatedCreds struct {
	credentials.TransportCredentials
	slots chan struct{}
	peers *peerCount
	m     *Metrics
}

func newGatedCreds(c credentials.TransportCredentials, limit, perPeer int, m *Metrics) *gatedCreds {
	g := &gatedCreds{TransportCredentials: c, slots: make(chan struct{}, limit), peers: newPeerCount(perPeer), m: m}
	m.registerHandshakes(func() float64 { return float64(len(g.slots)) }, limit)
	return g
}

// ServerHandshake waits up to firstRecordWait for the client's first byte,
// holding nothing; then takes one of its address's handshakes in flight,
// waits up to handshakeWait for a slot, and does the wrapped handshake in
// it. On error grpc-go closes the connection.
func (g *gatedCreds) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c, err := firstRecord(c)
	switch {
	case errors.Is(err, errNotTLS):
		return nil, nil, err
	case errors.Is(err, os.ErrDeadlineExceeded):
		g.m.closed(closedSilent)
		return nil, nil, errSilent
	case err != nil:
		return nil, nil, err // the client went away: not abuse
	}
	peer := peerOf(c)
	if !g.peers.add(peer) {
		g.m.closed(closedPeerHandshakes)
		return nil, nil, errPeerHandshakes
	}
	defer g.peers.done(peer)
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
	// grpc-go cleared this deadline's predecessor; it clears this one
	// after the handshake too.
	if err := c.SetDeadline(time.Now().Add(slotHold)); err != nil {
		return nil, nil, err
	}
	return g.TransportCredentials.ServerHandshake(c)
}

// Clone shares the slots: a clone gates the same server.
func (g *gatedCreds) Clone() credentials.TransportCredentials {
	return &gatedCreds{TransportCredentials: g.TransportCredentials.Clone(), slots: g.slots, peers: g.peers, m: g.m}
}

// firstRecord reads c's whole first TLS record within firstRecordWait of
// the handshake's start and returns c with the record put back. A first
// record that is not a handshake record, or is too long, is errNotTLS.
func firstRecord(c net.Conn) (net.Conn, error) {
	if err := c.SetReadDeadline(time.Now().Add(firstRecordWait)); err != nil {
		return nil, err
	}
	var hdr [5]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return nil, err
	}
	n := int(hdr[3])<<8 | int(hdr[4])
	if hdr[0] != 0x16 || n == 0 || n > maxRecord {
		return nil, errNotTLS
	}
	rec := make([]byte, len(hdr)+n)
	copy(rec, hdr[:])
	if _, err := io.ReadFull(c, rec[len(hdr):]); err != nil {
		return nil, err
	}
	return &prefixConn{Conn: c, prefix: rec}, nil
}

// prefixConn reads prefix before the connection's own bytes.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (p *prefixConn) Read(b []byte) (int, error) {
	if len(p.prefix) > 0 {
		n := copy(b, p.prefix)
		p.prefix = p.prefix[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}

// peerOf is c's remote peer: its IPv4 address, or its IPv6 /64 (one host
// usually has a whole /64), or "" when it has none.
func peerOf(c net.Conn) string { return peerOfAddr(c.RemoteAddr()) }

// peerOfAddr is peerOf for an address.
func peerOfAddr(addr net.Addr) string {
	var ip net.IP
	if a, ok := addr.(*net.TCPAddr); ok {
		ip = a.IP
	} else if addr == nil {
		return ""
	} else if host, _, err := net.SplitHostPort(addr.String()); err == nil {
		ip = net.ParseIP(host)
	}
	if ip == nil {
		return ""
	}
	if v4 := ip.To4(); v4 != nil {
		return v4.String()
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// peerCount counts something per remote address (handshakes in flight,
// open connections) against a limit.
type peerCount struct {
	limit int
	mu    sync.Mutex
	n     map[string]int
}

func newPeerCount(limit int) *peerCount { return &peerCount{limit: limit, n: make(map[string]int)} }

// add counts one more for peer unless it is at the limit (a negative
// limit has none).
func (p *peerCount) add(peer string) bool {
	if p.limit < 0 {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n[peer] >= p.limit {
		return false
	}
	p.n[peer]++
	return true
}

func (p *peerCount) done(peer string) {
	if p.limit < 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n[peer]--; p.n[peer] <= 0 {
		delete(p.n, peer)
	}
}

// DefaultConnectionsPerPeer caps one IP address's open node connections:
// a host cannot take more than a quarter of the default connection cap,
// while a NAT in front of a cluster's booting nodes (one call each, a few
// hundred milliseconds) still gets room.
const DefaultConnectionsPerPeer = 1024

// perPeerListener closes, at accept, a connection from an address that
// already has its limit of open connections
// (lpsd_connections_closed_total{reason="peer-connections"}).
type perPeerListener struct {
	net.Listener
	peers *peerCount
	m     *Metrics
}

func (l *perPeerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		peer := peerOf(c)
		if l.peers.add(peer) {
			return &peerConn{Conn: c, release: func() { l.peers.done(peer) }}, nil
		}
		l.m.closed(closedPeerConnections)
		c.Close()
	}
}

// peerConn gives its address's count back once, when closed.
type peerConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *peerConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
