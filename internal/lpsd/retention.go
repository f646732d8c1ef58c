package lpsd

import (
	"flag"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"nodehotfix/internal/duration"
	"nodehotfix/internal/retention"
	"nodehotfix/internal/store"
)

// retentionFlags are the flags of the stored history's bounds.
type retentionFlags struct {
	maxAge     time.Duration
	maxRecords int
	interval   time.Duration
}

func (f *retentionFlags) register(fs *flag.FlagSet) {
	f.maxAge, f.maxRecords, f.interval = retention.DefaultMaxAge, retention.DefaultMaxRecords, retention.DefaultInterval
	fs.Var(durationValue{&f.maxAge}, "retention-age", "delete nodes' reports and served records older than this `duration` (30d, 72h; 0: none by age; never the last 48 h)")
	fs.IntVar(&f.maxRecords, "retention-records", f.maxRecords, "keep at most this many reports, and as many served records, deleting the oldest (0: no bound; never the last 48 h's)")
	fs.Var(durationValue{&f.interval}, "retention-interval", "`duration` between the prunes of the replica running the autopilot, after its prune at start")
}

// config is the retention.Config the flags give, or a usage error.
func (f retentionFlags) config() (retention.Config, error) {
	c := retention.Config{MaxAge: f.maxAge, MaxRecords: f.maxRecords, Interval: f.interval}
	if f.interval <= 0 {
		return c, usagef("--retention-interval %s: want a positive duration", duration.Format(f.interval))
	}
	if err := c.Validate(); err != nil {
		return c, usagef("--retention-age %s, --retention-records %d: %v", duration.Format(f.maxAge), f.maxRecords, err)
	}
	return c, nil
}

// on reports whether the flags prune anything.
func (f retentionFlags) on() bool { return f.maxAge > 0 || f.maxRecords > 0 }

// durationValue is a flag of an operator's duration (internal/duration:
// days too).
type durationValue struct{ d *time.Duration }

func (v durationValue) String() string {
	if v.d == nil {
		return ""
	}
	return duration.Format(*v.d)
}

func (v durationValue) Set(s string) error {
	d, err := duration.Parse(s)
	if err != nil {
		return err
	}
	*v.d = d
	return nil
}

// retentionMetrics publish each prune.
type retentionMetrics struct {
	stored, over *prometheus.GaugeVec
	prunedTotal  *prometheus.CounterVec
	last         prometheus.Gauge
}

func newRetentionMetrics(register func(prometheus.Collector)) *retentionMetrics {
	m := &retentionMetrics{
		prunedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lpsd_retention_pruned_total",
			Help: "Records this replica's prunes deleted (--retention-age, --retention-records), by kind: report, served, seatSet (a canary's seats of an evidence window a resume replaced).",
		}, []string{"kind"}),
		stored: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "lpsd_retention_stored_records",
			Help: "Records stored after this replica's last prune, by kind (report, served: what every look reads; seatSet: canary seat sets).",
		}, []string{"kind"}),
		over: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "lpsd_retention_over_limit",
			Help: "1 when the last prune kept more than --retention-records of the kind because the last 48 h's records alone are more (never pruned), else 0.",
		}, []string{"kind"}),
		last: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lpsd_retention_last_prune_timestamp_seconds",
			Help: "When this replica last pruned (it prunes only while its autopilot runs: the leader on etcd), in Unix seconds; 0: never.",
		}),
	}
	for _, k := range []string{"report", "served", "seatSet"} {
		m.prunedTotal.WithLabelValues(k)
	}
	for _, c := range []prometheus.Collector{m.prunedTotal, m.stored, m.over, m.last} {
		register(c)
	}
	return m
}

// set records one prune.
func (m *retentionMetrics) set(r retention.Result) {
	for kind, p := range map[string]store.Pruned{"report": r.Reports, "served": r.Served, "seatSet": r.Seats} {
		m.prunedTotal.WithLabelValues(kind).Add(float64(p.Deleted))
		m.stored.WithLabelValues(kind).Set(float64(p.Stored))
		if kind == "seatSet" {
			continue // no bound by count
		}
		over := 0.0
		if p.OverKeep {
			over = 1
		}
		m.over.WithLabelValues(kind).Set(over)
	}
	m.last.Set(float64(r.Time.Unix()))
}
