package lps

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc/codes"

	"nodehotfix/internal/assess"
	"nodehotfix/internal/imds/attest"
	"nodehotfix/internal/regression"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/tally"
)

// Outcomes of a node request, besides the attest.Reason of a rejected
// document. They label lpsd_requests_total and key Counts.
const (
	outcomeServed           = "served"            // OK: the node's pointer
	outcomeNotFound         = "not-found"         // nothing applies to the node
	outcomeUnknownComponent = "unknown-component" // a component nothing is published for
	outcomeUnavailable      = "unavailable"       // no snapshot loaded yet
	outcomeNoToken          = "no-token"          // authorization metadata absent or repeated
	outcomeUnknown          = "unknown"           // verifier failed without an attest.Reason
	outcomeInternal         = "internal"          // a bug: no identity in ctx, marshal failure
	outcomePanic            = "panic"             // recovered panic in a verifier or handler
	outcomeOverBudget       = "over-budget"       // the document would be over ServedBudget
)

// outcomeCodes maps every outcome to the gRPC code its request ends with.
// Uniform rejections use only codes the reference client treats as benign
// (Unauthenticated, PermissionDenied), except a failed intermediate fetch:
// that is our outage, so Unavailable lets the node fall back.
var outcomeCodes = func() map[string]codes.Code {
	m := map[string]codes.Code{
		outcomeServed:           codes.OK,
		outcomeNotFound:         codes.NotFound,
		outcomeUnknownComponent: codes.NotFound,
		outcomeUnavailable:      codes.Unavailable,
		outcomeNoToken:          codes.Unauthenticated,
		outcomeUnknown:          codes.Unauthenticated,
		outcomeInternal:         codes.Internal,
		outcomePanic:            codes.Internal,
		outcomeOverBudget:       codes.Unavailable,
	}
	for _, r := range attest.Reasons() {
		switch r {
		case attest.ReasonSubscription:
			m[string(r)] = codes.PermissionDenied
		case attest.ReasonIntermediate:
			m[string(r)] = codes.Unavailable
		default:
			m[string(r)] = codes.Unauthenticated
		}
	}
	return m
}()

// verifyBuckets spans a local verification (about a millisecond) up to an
// intermediate fetch at its 5 s limit.
var verifyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}

// Metrics counts what the node-facing service does, in Prometheus form on
// its registry and as plain counts for the admin Status API. Safe for
// concurrent use.
type Metrics struct {
	reg         *prometheus.Registry
	requests    *prometheus.CounterVec
	verify      *prometheus.HistogramVec
	storeErrors prometheus.Counter
	reports     *prometheus.CounterVec
	servedRecs  *prometheus.CounterVec
	seats       *prometheus.CounterVec
	servedBytes prometheus.Histogram
	// served maps a release version to its servedCount: the answers that
	// chose it. Versions are not known up front; after a version's first
	// answer, counting takes no lock.
	served        sync.Map
	servedRelease *prometheus.CounterVec
	// trust maps a base to its trustCount: the answers with a release of
	// the base, by whether the node declared a key-set version.
	trust        sync.Map
	trustRelease *prometheus.CounterVec
	// expired maps a release version to its lpsd_release_expired_skipped_total
	// counter, created on the version's first skip.
	expired        sync.Map
	expiredRelease *prometheus.CounterVec
	trimmed        prometheus.Counter
	leader         prometheus.Gauge
	frozen         prometheus.Gauge
	skew           prometheus.Gauge
	fleet          fleetCollector
	// shed counts connections closed for want of a handshake slot.
	shed atomic.Uint64
	// closedConns counts connections closed by an abuse limit, by reason.
	closedConns *prometheus.CounterVec
	// counts has a fixed key set (every outcome), so reads need no lock.
	counts map[string]*atomic.Uint64
}

// NewMetrics registers the service's metrics on reg. A nil reg means a new
// registry that also carries the Go runtime and process collectors. It
// panics if reg already holds metrics of the same names.
func NewMetrics(reg *prometheus.Registry) *Metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	m := &Metrics{
		reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lpsd_requests_total",
			Help: "Node GetComponentConfig requests by gRPC code and outcome (served, not-found, unavailable, or the rejection reason).",
		}, []string{"code", "outcome"}),
		verify: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "lpsd_attestation_verify_seconds",
			Help:    "Time to verify a node's attested document, by result (accepted, rejected).",
			Buckets: verifyBuckets,
		}, []string{"result"}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lpsd_store_errors_total",
			Help: "Failed store reads while refreshing the serving snapshot.",
		}),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lpsd_reports_total",
			Help: "Node outcome reports by result: accepted (duplicate counts those that replaced an earlier report of the same boot), or why one was refused.",
		}, []string{"result"}),
		servedRecs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lpsd_served_records_total",
			Help: "Answers that served a hotfix to a node of its base, by attribution: recorded (the store has the boot, so it counts for the release whether it reports or not), unrecorded (the write failed or took over 500 ms; the node was served anyway and counts only if it reports), unattributed (the node declared no reports or no boot: a reference client, shown but never judged), too-many-boots (past 16 boots of one vmId on this replica: a VM inventing boot IDs; not recorded).",
		}, []string{"result"}),
		seats: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lpsd_canary_seat_requests_total",
			Help: "Requests of in-scope nodes for a seat of a release's canary, by result: taken (the node holds one), full (every seat is held by other nodes), subscription (its subscription holds its share of the seats, a scope of 10 or more subscriptions), error (the store failed or took longer than 1 s; the node was served as holding none), late (the store gave the seat after the request stopped waiting: the node holds it but was not served this time).",
		}, []string{"result"}),
		servedBytes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "lpsd_served_pointer_bytes",
			Help:    "Size of each pointer document served; lpsd serves none over 48 KiB (nodes accept 64).",
			Buckets: prometheus.ExponentialBuckets(256, 2, 9), // 256 B .. 64 KiB
		}),
		trimmed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lpsd_served_pointer_trimmed_total",
			Help: "Pointers served without release envelopes to nodes that declared no base, because every base's document was over the budget.",
		}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lpsd_autopilot_leader",
			Help: "1 while this replica's autopilot is the elected one that steps rollouts (always 1 on a store one process holds), else 0. Across replicas the sum should be 1; 0 everywhere means no replica decides (their clocks disagree, or etcd is unreachable).",
		}),
		frozen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lpsd_rollouts_frozen",
			Help: "1 while every rollout is frozen (lpsctl freeze), as the autopilot leader read it at its last look; 0 on the other replicas. Nothing starts or advances while frozen.",
		}),
		skew: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lpsd_clock_skew_seconds",
			Help: "The leader's estimate of how far its clock is ahead of the other replicas' heartbeats (negative: behind); past 30 s either way it steps down.",
		}),
		servedRelease: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lpsd_release_served_total",
			Help: "Node requests this instance answered with the release, by version (bounded by the releases that exist).",
		}, []string{"version"}),
		trustRelease: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lpsd_served_trust_total",
			Help: "Answers with a release, by base and by whether the node declared a release key-set version (keyset=declared: an agent that walks the key-set chain and checks the log) or not (keyset=none: an image baked before release trust v2, or without release keys, which accepts one signature and knows no log). Bounded by the bases that have releases.",
		}, []string{"base", "keyset"}),
		expiredRelease: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lpsd_release_expired_skipped_total",
			Help: "Node requests the release would have answered but did not because its envelope had expired (nodes would refuse it), by version; the node got an older release or nothing.",
		}, []string{"version"}),
		closedConns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lpsd_connections_closed_total",
			Help: "Node connections closed by an abuse limit: silent (no whole ClientHello within 1 s), peer-handshakes (--max-handshakes-per-peer), peer-connections (--max-connections-per-peer).",
		}, []string{"reason"}),
		counts: make(map[string]*atomic.Uint64, len(outcomeCodes)),
	}
	for _, r := range []string{servedRecorded, servedUnrecorded, servedUnattributed, servedTooManyBoots} {
		m.servedRecs.WithLabelValues(r)
	}
	for _, r := range reportResults {
		m.reports.WithLabelValues(r)
	}
	for _, r := range []string{seatTaken, seatFull, seatError, seatLate, seatSubscription} {
		m.seats.WithLabelValues(r)
	}
	for o, c := range outcomeCodes {
		m.counts[o] = new(atomic.Uint64)
		// Pre-create every series so rates and alerts see zeros, not gaps.
		m.requests.WithLabelValues(c.String(), o)
	}
	m.verify.WithLabelValues("accepted")
	m.verify.WithLabelValues("rejected")
	for _, r := range []string{closedSilent, closedPeerHandshakes, closedPeerConnections} {
		m.closedConns.WithLabelValues(r)
	}
	reg.MustRegister(m.closedConns, m.requests, m.verify, m.storeErrors, m.reports, m.servedRecs, m.leader, m.frozen, m.skew, m.seats, m.servedBytes, m.trimmed, m.servedRelease, m.trustRelease, m.expiredRelease, &m.fleet,
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "lpsd_connections_shed_total",
			Help: "Node connections closed unanswered because no TLS handshake slot freed within 2 s (overload).",
		}, func() float64 { return float64(m.shed.Load()) }))
	return m
}

// Register adds c to the service's registry: metrics of lpsd's other
// parts (the admin API's) served on the same /metrics.
func (m *Metrics) Register(c prometheus.Collector) { m.reg.MustRegister(c) }

// RegisterBuildInfo adds lpsd_build_info{version,goversion} = 1.
func (m *Metrics) RegisterBuildInfo(version string) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "lpsd_build_info",
		Help:        "1, labelled with lpsd's version and the Go release that built it.",
		ConstLabels: prometheus.Labels{"version": version, "goversion": runtime.Version()},
	})
	g.Set(1)
	m.reg.MustRegister(g)
}

// Reasons of lpsd_connections_closed_total.
const (
	closedSilent          = "silent"
	closedPeerHandshakes  = "peer-handshakes"
	closedPeerConnections = "peer-connections"
)

// closed counts a connection closed by an abuse limit.
func (m *Metrics) closed(reason string) { m.closedConns.WithLabelValues(reason).Inc() }

// seatResult counts a canary seat request's result.
func (m *Metrics) seatResult(r string) { m.seats.WithLabelValues(r).Inc() }

// registerHandshakes adds gauges of the handshakes in progress (read with
// inFlight at scrape time) and of their limit.
func (m *Metrics) registerHandshakes(inFlight func() float64, limit int) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "lpsd_handshakes_in_flight",
			Help: "Node TLS handshakes in progress.",
		}, inFlight),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "lpsd_handshakes_limit",
			Help: "Most node TLS handshakes allowed at once (--max-handshakes).",
		}, func() float64 { return float64(limit) }),
	)
}

// StoreError counts a failed store read; pass it as the onError hook of
// NewSnapshotter.
func (m *Metrics) StoreError(error) { m.storeErrors.Inc() }

// Counts returns the number of requests per outcome since m was created,
// leaving out outcomes that never happened. Outcomes are "served",
// "not-found", "unknown-component", "unavailable", "no-token", "unknown",
// "internal", "panic" and the attest.Reason of each rejected document.
func (m *Metrics) Counts() map[string]uint64 {
	out := make(map[string]uint64)
	for o, n := range m.counts {
		if v := n.Load(); v > 0 {
			out[o] = v
		}
	}
	return out
}

// servedCount is one version's answers, for Status and for Prometheus.
type servedCount struct {
	n       atomic.Uint64
	counter prometheus.Counter
}

// countServed records an answer that chose versions.
func (m *Metrics) countServed(versions map[string]string) {
	for _, v := range versions {
		c, ok := m.served.Load(v)
		if !ok {
			c, _ = m.served.LoadOrStore(v, &servedCount{counter: m.servedRelease.WithLabelValues(v)})
		}
		sc := c.(*servedCount)
		sc.n.Add(1)
		sc.counter.Inc()
	}
}

// TrustCounts are a base's answers with a release by what the nodes
// declared of their release trust.
type TrustCounts struct {
	// Declared counts nodes that declared a key-set version; None, nodes
	// that declared none (baked before release trust v2, or without
	// release keys: one signature, no log).
	Declared, None uint64
}

type trustCount struct {
	declared, none   atomic.Uint64
	cDeclared, cNone prometheus.Counter
}

// countTrust records an answer with a release of base to a node that
// declared a key-set version or not.
func (m *Metrics) countTrust(base string, declared bool) {
	c, ok := m.trust.Load(base)
	if !ok {
		c, _ = m.trust.LoadOrStore(base, &trustCount{
			cDeclared: m.trustRelease.WithLabelValues(base, "declared"), cNone: m.trustRelease.WithLabelValues(base, "none"),
		})
	}
	tc := c.(*trustCount)
	if declared {
		tc.declared.Add(1)
		tc.cDeclared.Inc()
		return
	}
	tc.none.Add(1)
	tc.cNone.Inc()
}

// TrustByBase returns, per base, this instance's answers with a release
// by what the nodes declared of their release trust.
func (m *Metrics) TrustByBase() map[string]TrustCounts {
	out := make(map[string]TrustCounts)
	m.trust.Range(func(k, v any) bool {
		tc := v.(*trustCount)
		out[k.(string)] = TrustCounts{Declared: tc.declared.Load(), None: tc.none.Load()}
		return true
	})
	return out
}

// countExpired records an answer that skipped the expired versions.
func (m *Metrics) countExpired(versions []string) {
	for _, v := range versions {
		c, ok := m.expired.Load(v)
		if !ok {
			c, _ = m.expired.LoadOrStore(v, m.expiredRelease.WithLabelValues(v))
		}
		c.(prometheus.Counter).Inc()
	}
}

// ServedByRelease returns, per release version, how many node requests this
// instance answered with it.
func (m *Metrics) ServedByRelease() map[string]uint64 {
	out := make(map[string]uint64)
	m.served.Range(func(k, v any) bool {
		out[k.(string)] = v.(*servedCount).n.Load()
		return true
	})
	return out
}

// count records one request that ended with outcome o, which must be a key
// of outcomeCodes.
// reportResults are the values of lpsd_reports_total's result label.
var reportResults = []string{"accepted", "duplicate", "started", "invalid", "not-offered", "too-many-boots", "queue-full", "store", "canceled", "unauthenticated"}

func (m *Metrics) countReport(result string) { m.reports.WithLabelValues(result).Inc() }

func (m *Metrics) count(o string) {
	m.counts[o].Add(1)
	m.requests.WithLabelValues(outcomeCodes[o].String(), o).Inc()
}

func (m *Metrics) observeVerify(d time.Duration, accepted bool) {
	result := "rejected"
	if accepted {
		result = "accepted"
	}
	m.verify.WithLabelValues(result).Observe(d.Seconds())
}

// registerSnapshots adds gauges describing the serving snapshot, read from
// s at scrape time. Before the first snapshot, loaded is 0 and the age and
// revision are 0.
func (m *Metrics) registerSnapshots(s snapshots, now func() time.Time) {
	current := func(f func(*Snapshot) float64) func() float64 {
		return func() float64 {
			snap := s.Current()
			if snap == nil {
				return 0
			}
			return f(snap)
		}
	}
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "lpsd_snapshot_loaded",
			Help: "1 once a snapshot of the store is serving, else 0.",
		}, current(func(*Snapshot) float64 { return 1 })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "lpsd_snapshot_age_seconds",
			Help: "Seconds since the serving snapshot was built; 0 before the first. A reload that finds the store revision unchanged keeps the snapshot, so this is the time since the last observed change, not since the last successful read (see lpsd_store_errors_total).",
		}, current(func(snap *Snapshot) float64 { return math.Max(0, now().Sub(snap.Built).Seconds()) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "lpsd_snapshot_revision",
			Help: "Store revision of the serving snapshot; 0 before the first.",
		}, current(func(snap *Snapshot) float64 { return float64(snap.Revision) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "lpsd_snapshot_log_size",
			Help: "Tree size of the transparency-log checkpoint the serving snapshot serves nodes (with its proofs); 0 before the first checkpoint. A release published since is proven once this passes its record.",
		}, current(func(snap *Snapshot) float64 {
			if snap.log == nil {
				return 0
			}
			return float64(snap.log.size)
		})),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "lpsd_snapshot_keyset_version",
			Help: "Newest release key-set version the serving snapshot serves as the chain's last link; 0 when none is published (nodes keep the set they were baked with).",
		}, current(func(snap *Snapshot) float64 {
			if snap.log == nil || len(snap.log.keySets) == 0 {
				return 0
			}
			return float64(snap.log.keySets[len(snap.log.keySets)-1].Version)
		})),
		notAfterCollector{s},
		seatsHeldCollector{s},
		rolloutCollector{s},
		stoppedCollector{s},
	)
}

var (
	rolloutStateDesc = prometheus.NewDesc("lpsd_rollout_state",
		"1 for each release's rollout state as the serving snapshot holds it (the same on every replica): state is draft, rolling, paused, halted, complete or revoked; reason is an automatic pause or halt's reason code (regression, silent, refusedIntegrity, refusedDelivery, inconclusive, stalled, ...), empty otherwise. Every rolling, paused or halted release, and the "+fmt.Sprint(rolloutTerminalKept)+" highest-versioned drafts and as many complete or revoked ones.",
		[]string{"version", "base", "state", "reason"}, nil)
	rolloutPercentDesc = prometheus.NewDesc("lpsd_rollout_percent",
		"The percentage of its scope each release of lpsd_rollout_state is rolled out to.",
		[]string{"version", "base"}, nil)
	rolloutStepDesc = prometheus.NewDesc("lpsd_rollout_step",
		"The plan step (1-based, as lpsctl shows it) each planned release of lpsd_rollout_state is at, of lpsd_rollout_steps.",
		[]string{"version", "base"}, nil)
	rolloutStepsDesc = prometheus.NewDesc("lpsd_rollout_steps",
		"How many steps each planned release's plan has.",
		[]string{"version", "base"}, nil)
)

// rolloutTerminalKept is how many drafts, and how many complete or
// revoked releases, the rollout gauges keep besides every live one,
// newest first: enough to graph what just ended, bounded however long the
// history.
const rolloutTerminalKept = 20

// rolloutCollector serves each release's rollout from the serving
// snapshot at scrape time, so the fleet's rollouts can be graphed and
// alerted on outside lpsd.
type rolloutCollector struct{ s snapshots }

func (c rolloutCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- rolloutStateDesc
	ch <- rolloutPercentDesc
	ch <- rolloutStepDesc
	ch <- rolloutStepsDesc
}

func (c rolloutCollector) Collect(ch chan<- prometheus.Metric) {
	snap := c.s.Current()
	if snap == nil {
		return
	}
	for _, r := range rolloutsShown(snap.Releases) {
		state := string(r.Rollout.State)
		if r.Revoked {
			state = "revoked"
		}
		ch <- prometheus.MustNewConstMetric(rolloutStateDesc, prometheus.GaugeValue, 1, r.Version, r.Base, state, r.Rollout.Reason)
		ch <- prometheus.MustNewConstMetric(rolloutPercentDesc, prometheus.GaugeValue, float64(r.Rollout.Percent), r.Version, r.Base)
		if p := r.Rollout.Plan; p != nil && len(p.Steps) > 0 {
			ch <- prometheus.MustNewConstMetric(rolloutStepDesc, prometheus.GaugeValue, float64(p.Step+1), r.Version, r.Base)
			ch <- prometheus.MustNewConstMetric(rolloutStepsDesc, prometheus.GaugeValue, float64(len(p.Steps)), r.Version, r.Base)
		}
	}
}

var stoppedDesc = prometheus.NewDesc("lpsd_releases_stopped",
	"Releases of the serving snapshot that are paused or halted (not revoked), by state and reason: the autopilot's reason code (regression, silent, refusedIntegrity, refusedDelivery, inconclusive; stalled: a step's deadline passed and it reached no node) or operator. Every pair is exported, 0 when none.",
	[]string{"state", "reason"}, nil)

// reasonOperator labels a release an operator paused or halted.
const reasonOperator = "operator"

// stoppedCollector counts the serving snapshot's paused and halted
// releases at scrape time, by why.
type stoppedCollector struct{ s snapshots }

func (c stoppedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- stoppedDesc }

func (c stoppedCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[[2]string]int{}
	if snap := c.s.Current(); snap != nil {
		for _, r := range snap.Releases {
			if r.Revoked || (r.Rollout.State != rollout.Paused && r.Rollout.State != rollout.Halted) {
				continue
			}
			reason := r.Rollout.Reason
			if reason == "" {
				reason = reasonOperator
			}
			counts[[2]string{string(r.Rollout.State), reason}]++
		}
	}
	for _, state := range []rollout.State{rollout.Paused, rollout.Halted} {
		for _, reason := range append(slices.Clone(regression.Reasons), reasonOperator) {
			ch <- prometheus.MustNewConstMetric(stoppedDesc, prometheus.GaugeValue, float64(counts[[2]string{string(state), reason}]), string(state), reason)
		}
	}
}

// rolloutsShown returns the releases the rollout gauges show: every one
// that still needs a person or is moving (rolling, paused, halted, not
// revoked), and the rolloutTerminalKept highest-versioned drafts and of
// the ended ones (complete, revoked), so neither a CI publishing every
// build nor a long history grows the series.
func rolloutsShown(rels []rollout.Release) []rollout.Release {
	var live, drafts, ended []rollout.Release
	for _, r := range rels {
		switch {
		case r.Revoked, r.Rollout.State == rollout.Complete:
			ended = append(ended, r)
		case r.Rollout.State == rollout.Draft:
			drafts = append(drafts, r)
		default:
			live = append(live, r)
		}
	}
	newest := func(rs []rollout.Release) []rollout.Release {
		slices.SortFunc(rs, func(a, b rollout.Release) int { return rollout.Compare(b, a) })
		return rs[:min(len(rs), rolloutTerminalKept)]
	}
	return slices.Concat(live, newest(drafts), newest(ended))
}

var seatsHeldDesc = prometheus.NewDesc("lpsd_canary_seats_held",
	"Canary seats held, per release whose holders are served (rolling or paused with a canary), as the serving snapshot read them from the store: every replica's holders, up to 30 s old.",
	[]string{"version"}, nil)

// seatsHeldCollector serves the holder counts of the serving snapshot at
// scrape time; they are already in memory, so a scrape costs no store read.
type seatsHeldCollector struct{ s snapshots }

func (c seatsHeldCollector) Describe(ch chan<- *prometheus.Desc) { ch <- seatsHeldDesc }

func (c seatsHeldCollector) Collect(ch chan<- prometheus.Metric) {
	snap := c.s.Current()
	if snap == nil {
		return
	}
	for version, vms := range snap.Seats {
		ch <- prometheus.MustNewConstMetric(seatsHeldDesc, prometheus.GaugeValue, float64(len(vms)), version)
	}
}

var notAfterDesc = prometheus.NewDesc("lpsd_release_not_after_timestamp_seconds",
	"When each release of the serving snapshot that is not revoked expires (its envelope's not_after), in Unix seconds; from then on lpsd serves it to no node. 0 when the envelope does not decode (never served). Alert on it minus time() for releases still rolling out.",
	[]string{"version", "base"}, nil)

// notAfterCollector serves each release's expiry from the serving
// snapshot at scrape time.
type notAfterCollector struct{ s snapshots }

func (c notAfterCollector) Describe(ch chan<- *prometheus.Desc) { ch <- notAfterDesc }

func (c notAfterCollector) Collect(ch chan<- prometheus.Metric) {
	snap := c.s.Current()
	if snap == nil {
		return
	}
	for _, r := range snap.Releases {
		if r.Revoked {
			continue
		}
		v := 0.0
		if !r.NotAfter.IsZero() {
			v = float64(r.NotAfter.Unix())
		}
		ch <- prometheus.MustNewConstMetric(notAfterDesc, prometheus.GaugeValue, v, r.Version, r.Base)
	}
}

// knownOutcome reports whether o is a key of outcomeCodes.
func knownOutcome(o string) bool {
	_, ok := outcomeCodes[o]
	return ok
}

// SetAssess publishes the fleet's latest assessment (the autopilot makes
// one every look) as lpsd_release_nodes, lpsd_control_nodes and, for
// planned releases, lpsd_release_silent_ceiling. Their label sets are
// bounded by the releases and bases that exist and the fixed list of
// outcomes.
func (m *Metrics) SetAssess(f assess.Fleet) {
	ceilings := map[string]float64{}
	for _, r := range f.Records {
		if p := r.Rollout.Plan; p != nil && !p.Timed {
			ceilings[r.Version] = p.SilentCeiling()
		}
	}
	m.fleet.mu.Lock()
	m.fleet.t, m.fleet.unreadable, m.fleet.silentCeilings = f.Tally, f.Unreadable, ceilings
	m.fleet.mu.Unlock()
}

var (
	releaseNodesDesc = prometheus.NewDesc("lpsd_release_nodes",
		"Nodes counted for a release (served it, or reported on it), one per vmId by its worst outcome: ok, failed, fellBack, refusedIntegrity, refusedDelivery, notApplicable, silent, pending.",
		[]string{"version", "outcome"}, nil)
	unreadableDesc = prometheus.NewDesc("lpsd_store_unreadable_records",
		"Records the autopilot's last look could not decode and left out, by kind (report, served record; seat: a canary seat whose time could not be read, still counted as held): a newer encoding mid-upgrade, another writer of the prefix, damage.",
		[]string{"kind"}, nil)
	controlNodesDesc = prometheus.NewDesc("lpsd_control_nodes",
		"Nodes of a base that ran the baked agent with no release requested (the first hotfix's baseline), by outcome (ok, failed).",
		[]string{"base", "outcome"}, nil)
	silentCeilingDesc = prometheus.NewDesc("lpsd_release_silent_ceiling",
		"The silent rate (silent nodes over those judged) above which the autopilot halts a planned release: its plan's ceiling (lpsctl rollout plan --max-silent; 0.2 by default). Releases without a plan have none.",
		[]string{"version"}, nil)
)

// fleetCollector serves the latest tally.
type fleetCollector struct {
	mu             sync.Mutex
	t              tally.Tally
	unreadable     map[string]int
	silentCeilings map[string]float64
}

func (c *fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- releaseNodesDesc
	ch <- controlNodesDesc
	ch <- unreadableDesc
	ch <- silentCeilingDesc
}

func (c *fleetCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	t, unreadable, ceilings := c.t, c.unreadable, c.silentCeilings
	c.mu.Unlock()
	for v, x := range ceilings {
		ch <- prometheus.MustNewConstMetric(silentCeilingDesc, prometheus.GaugeValue, x, v)
	}
	for _, kind := range []string{"report", "served record", "seat"} {
		ch <- prometheus.MustNewConstMetric(unreadableDesc, prometheus.GaugeValue, float64(unreadable[kind]), kind)
	}
	for v, n := range t.Releases {
		for o, x := range byOutcome(n) {
			ch <- prometheus.MustNewConstMetric(releaseNodesDesc, prometheus.GaugeValue, float64(x), v, o.String())
		}
	}
	for b, n := range t.Control {
		for _, o := range []tally.Outcome{tally.OK, tally.Failed} {
			ch <- prometheus.MustNewConstMetric(controlNodesDesc, prometheus.GaugeValue, float64(byOutcome(n)[o]), b, o.String())
		}
	}
}

// byOutcome spreads c by outcome.
func byOutcome(c tally.Counts) map[tally.Outcome]uint64 {
	return map[tally.Outcome]uint64{
		tally.OK: c.OK, tally.Failed: c.Failed, tally.FellBack: c.Fallback, tally.RefusedIntegrity: c.RefusedIntegrity,
		tally.RefusedDelivery: c.RefusedDelivery, tally.NotApplicable: c.NotApplicable, tally.Silent: c.Silent, tally.Pending: c.Pending,
	}
}

// SetLeader records whether this replica's autopilot leads.
func (m *Metrics) SetLeader(leads bool) {
	v := 0.0
	if leads {
		v = 1
	} else {
		// Only the leader's looks are current: a replica that stopped
		// leading exports no assessment, so a rule over the replicas
		// never mixes a stale one into the leader's.
		m.SetAssess(assess.Fleet{})
		m.frozen.Set(0)
	}
	m.leader.Set(v)
}

// SetFrozen records the leader's last reading of the fleet-wide freeze.
func (m *Metrics) SetFrozen(frozen bool) { m.frozen.Set(boolGauge(frozen)) }

// SetClockSkew records the leader's last clock comparison.
func (m *Metrics) SetClockSkew(d time.Duration) { m.skew.Set(d.Seconds()) }
