// Package rollout is the pure domain of serving hotfix releases to a fleet:
// release records, rollout states, deterministic node bucketing and the
// selection of what one node gets.
package rollout

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/quote"
	"nodehotfix/internal/release"
	"nodehotfix/internal/uuid"
)

// State is a release's rollout state.
type State string

// States. A release is published as a draft; rolling serves it to the
// nodes its scope and percentage include; paused serves the same nodes but
// refuses percentage changes; halted serves nobody (nodes fall back to an
// older release, staged copies stay until revoked); complete serves every
// node in scope.
const (
	Draft    State = "draft"
	Rolling  State = "rolling"
	Paused   State = "paused"
	Halted   State = "halted"
	Complete State = "complete"
)

// Valid reports whether s is a known state.
func (s State) Valid() bool {
	switch s {
	case Draft, Rolling, Paused, Halted, Complete:
		return true
	}
	return false
}

// transitions lists the states each state may move to.
var transitions = map[State][]State{
	Draft:    {Rolling, Halted, Complete},
	Rolling:  {Paused, Halted, Complete},
	Paused:   {Rolling, Halted, Complete},
	Halted:   {Rolling},
	Complete: {Halted},
}

// Next returns the states s may move to, in the state machine's order.
func (s State) Next() []State { return slices.Clone(transitions[s]) }

// ErrInvalidTransition is returned (wrapped) for a state change the state
// machine does not allow.
var ErrInvalidTransition = errors.New("invalid rollout transition")

// ErrRevoked is returned (wrapped) for any change to a revoked release.
var ErrRevoked = errors.New("release is revoked")

// ErrPercentDecrease is returned (wrapped) when a percentage would shrink:
// that would take the hotfix away from nodes that already have it. Halt or
// revoke instead.
var ErrPercentDecrease = errors.New("rollout percentage can only grow")

// ErrInvalidScope is returned (wrapped) for a scope value that is not a
// subscription ID or a region label (CheckScope).
var ErrInvalidScope = errors.New("invalid rollout scope")

// commands names the operator command (lpsctl) that moves a release to
// each state, for refusals to suggest.
var commands = map[State]string{
	Rolling:  "lpsctl rollout resume %s",
	Paused:   "lpsctl rollout pause %s",
	Halted:   "lpsctl rollout halt %s",
	Complete: "lpsctl rollout complete %s",
}

// moves returns the commands that work on a release in state from, for
// a refusal: exactly the transitions the state machine allows.
func moves(version string, from State) string {
	var out []string
	for _, to := range transitions[from] {
		out = append(out, "`"+fmt.Sprintf(commands[to], version)+"`")
	}
	return strings.Join(out, ", ")
}

// revokedError is the refusal of any change to revoked release version.
func revokedError(version string) error {
	return fmt.Errorf("%w: %s never changes again; to ship the fix, sign and publish a new patch version", ErrRevoked, version)
}

// Rollout says which nodes a release is served to.
type Rollout struct {
	State State `json:"state"`
	// Percent of in-scope nodes, by hash bucket of (vmId, version), 0..100.
	Percent int `json:"percent"`
	// Subscriptions limits the scope to these subscription IDs; empty means
	// every subscription.
	Subscriptions []string `json:"subscriptions,omitempty"`
	// Regions limits the scope to service instances labelled with one of
	// these regions; empty means every region.
	Regions []string `json:"regions,omitempty"`
	// Plan, when set, steps the percentage by itself (see Plan).
	Plan *Plan `json:"plan,omitempty"`
	// Canary is set once a plan with a canary of nodes was put on the
	// release, and never cleared: its seat holders stay served (and their
	// reports accepted) whatever plan follows.
	Canary bool `json:"canary,omitempty"`
	// DeployEnvs limits the scope to service instances labelled with one
	// of these deploy environments (lpsd --deploy-env); empty means every
	// environment.
	DeployEnvs []string `json:"deploy_envs,omitempty"`
	// EvidenceSince opens the release's evidence window: when set, only
	// evidence from it on counts for the release's health and its plan's
	// report minimums (internal/tally): reports lpsd accepted at or after
	// it (store.Report.Time), and nodes served at or after it
	// (store.Served.Time), the only ones that can count as silent; a node
	// served before it had its say in the evidence that came before.
	// Counts decides. Resume sets it when it resumes a halted release, so
	// the evidence that caused a halt cannot cause it again; zero means
	// all evidence counts. A new plan keeps it: a plan changes the rule,
	// not the evidence.
	EvidenceSince time.Time `json:"evidence_since,omitzero"`
	// HaltedFrom is the state a halted release was halted from, so that
	// Resume returns a release halted while complete to complete; empty
	// for any other state, and for records halted before it was kept
	// (those resume to rolling).
	HaltedFrom State `json:"halted_from,omitempty"`
	// Reason is the reason code of the autopilot's last automatic pause
	// or halt (regression, silent, refusedIntegrity, refusedDelivery,
	// inconclusive, stalled); empty after an operator's change.
	Reason string `json:"reason,omitempty"`
	// Approval is a change waiting for a second operator (Policy's
	// TwoPerson rule); nil when none. Any operator's change clears it.
	Approval *Approval `json:"approval,omitempty"`
	// RaisedAt is when the percentage last rose (an operator's change, a
	// plan step the autopilot advanced to), so that Policy's MinBake
	// holds between rises; zero before the first, and for records written
	// before it was kept.
	RaisedAt time.Time `json:"raised_at,omitzero"`
}

// Counts reports whether evidence from t counts for the release: a report
// lpsd accepted at t, or a node served at t, is inside the evidence window
// that EvidenceSince opens (all evidence is while it is zero).
func (r Rollout) Counts(t time.Time) bool {
	return r.EvidenceSince.IsZero() || !t.Before(r.EvidenceSince)
}

// Release is a published hotfix release and its rollout.
type Release struct {
	// Version is the hotfix version YYYYMM.DD.PATCH; it identifies the
	// release.
	Version string `json:"version"`
	// Base is the image base YYYYMM.DD the release hotfixes.
	Base string `json:"base"`
	// Envelope is the release as signed offline (internal/release); it is
	// served verbatim so nodes verify the operator's signature.
	Envelope json.RawMessage `json:"envelope"`
	Rollout  Rollout         `json:"rollout"`
	Revoked  bool            `json:"revoked,omitempty"`
	// NotAfter is when the envelope stops verifying (its signed
	// not_after), set at publish. It is kept beside the envelope so
	// selection, a pure function of records, can refuse an expired release
	// without decoding envelopes per request; records stored without it
	// get it from WithNotAfter. Zero means unknown, which Includes treats
	// as expired.
	NotAfter time.Time `json:"not_after,omitzero"`
	// ExpiryRecorded is set once lpsd has written the audit entry of
	// NotAfter passing while the release was served (autopilot's action
	// expire), so that no replica writes it twice, whenever it looks.
	ExpiryRecorded bool `json:"expiry_recorded,omitempty"`
	// PublishedAt and UpdatedAt are set by the service.
	PublishedAt time.Time `json:"published_at"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// Validate checks a record's invariants.
func (r Release) Validate() error {
	v, err := hotfix.ParseVersion(r.Version)
	if err != nil {
		return err
	}
	if v.String() != r.Version {
		return fmt.Errorf("release version %q is not canonical (%s)", r.Version, v)
	}
	if r.Base != v.Base() {
		return fmt.Errorf("release %s: base %q does not match the version", r.Version, r.Base)
	}
	if len(r.Envelope) == 0 {
		return fmt.Errorf("release %s: no signed envelope", r.Version)
	}
	return r.Rollout.validate("release " + r.Version)
}

// validate checks ro's invariants, for the record name names in its
// errors: the checks a release and a component configuration share.
func (ro Rollout) validate(name string) error {
	if !ro.State.Valid() {
		return fmt.Errorf("%s: unknown rollout state %q", name, ro.State)
	}
	if ro.Percent < 0 || ro.Percent > 100 {
		return fmt.Errorf("%s: percent %d out of range 0..100", name, ro.Percent)
	}
	if ro.Plan != nil {
		if err := ro.Plan.Validate(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// WithNotAfter returns r with NotAfter read from its envelope when it is
// unset (a record stored before releases carried it). An envelope that does
// not decode leaves it zero: unknown, so Includes never serves r, which
// nodes would refuse anyway.
func (r Release) WithNotAfter() Release {
	if !r.NotAfter.IsZero() {
		return r
	}
	if rel, err := release.Inspect(r.Envelope); err == nil {
		r.NotAfter = rel.NotAfter
	}
	return r
}

// Expired reports whether r's envelope no longer verifies at now, or
// cannot be shown to: its expiry is unknown (zero NotAfter) or now is the
// zero time.
func (r Release) Expired(now time.Time) bool {
	return now.IsZero() || r.NotAfter.IsZero() || !now.Before(r.NotAfter)
}

// Transition returns r moved to state to. A halt remembers the state it
// halted (HaltedFrom). Refusals (ErrRevoked, ErrInvalidTransition) name the
// commands that do work from r's state.
func (r Release) Transition(to State) (Release, error) {
	if r.Revoked {
		return r, revokedError(r.Version)
	}
	if !slices.Contains(transitions[r.Rollout.State], to) {
		return r, fmt.Errorf("%w: %s cannot go from %s to %s; from %s it can go on with %s", ErrInvalidTransition, r.Version, r.Rollout.State, to, r.Rollout.State, moves(r.Version, r.Rollout.State))
	}
	r.Rollout.HaltedFrom = ""
	if to == Halted {
		r.Rollout.HaltedFrom = r.Rollout.State
	}
	r.Rollout.State = to
	// The reason belongs to the state it explains; the autopilot sets the
	// new one after its own transitions.
	r.Rollout.Reason = ""
	if to == Complete {
		r.Rollout.Percent = 100
	}
	return r, nil
}

// SeatSet names the canary seats r's canary fills now, as the store keys
// them: its version, and after a resume that opened a fresh evidence
// window, its version and the window's start. So a retry's canary seats
// new nodes: the holders of the halted attempt provisioned already and
// would not be heard from again, and with every seat theirs the retry
// gathered no evidence and paused at its deadline.
func (r Release) SeatSet() string {
	if r.Rollout.EvidenceSince.IsZero() {
		return r.Version
	}
	return r.Version + "+" + strconv.FormatInt(r.Rollout.EvidenceSince.UnixNano(), 10)
}

// ParseSeatSet returns the release version a SeatSet name is of and the
// start of the evidence window it seats (zero for a release's own set,
// from before any window), and false for a name SeatSet does not write.
func ParseSeatSet(set string) (version string, window time.Time, ok bool) {
	version, nanos, resumed := strings.Cut(set, "+")
	if !resumed {
		return version, time.Time{}, version != ""
	}
	n, err := strconv.ParseInt(nanos, 10, 64)
	if err != nil || n <= 0 {
		return version, time.Time{}, false
	}
	return version, time.Unix(0, n).UTC(), true
}

// Resume returns r going on at now, from paused or halted: rolling, or
// complete again when it was halted while complete (HaltedFrom). A
// planned rollout's current step bakes afresh from now: time spent stopped
// is not time its nodes were watched. Resuming a halted release opens a
// fresh evidence window at now (EvidenceSince): the reports that led to
// the halt no longer count, so they cannot halt it again. A pause is not
// a verdict on the evidence, so resuming a paused release keeps its
// window.
func (r Release) Resume(now time.Time) (Release, error) {
	out, err := r.Transition(Rolling)
	if err != nil {
		return r, err
	}
	if r.Rollout.State != Halted {
		out.Rollout.Plan = restarted(out.Rollout.Plan, now)
		return out, nil
	}
	out.Rollout.EvidenceSince = now
	if r.Rollout.HaltedFrom == Complete {
		// Back to serving every node in scope, as before the halt; its
		// plan, if any, had ended.
		out.Rollout.State, out.Rollout.Percent = Complete, 100
		return out, nil
	}
	out.Rollout.Plan = restarted(out.Rollout.Plan, now)
	return out, nil
}

// restarted returns a copy of p with its current step begun at now, or nil.
func restarted(p *Plan, now time.Time) *Plan {
	if p == nil {
		return nil
	}
	next := *p
	next.StepSince = now
	return &next
}

// SetScope returns r with a new percentage and scope. The percentage may
// only grow, so every node already included stays included; nil
// subscriptions or regions keep the current scope, an empty list means
// all. A draft starts rolling. A complete release keeps 100% and may
// change its scope; a paused one may change its scope at its current
// percentage; a halted one serves nobody and is refused until resumed.
// Scope values must pass CheckScope (ErrInvalidScope).
func (r Release) SetScope(percent int, subscriptions, regions []string) (Release, error) {
	if r.Revoked {
		return r, revokedError(r.Version)
	}
	if percent < 0 || percent > 100 {
		return r, fmt.Errorf("percent %d out of range 0..100", percent)
	}
	if err := CheckScope(subscriptions, regions); err != nil {
		return r, err
	}
	next := r
	if subscriptions != nil {
		next.Rollout.Subscriptions = normalizeIDs(subscriptions)
	}
	if regions != nil {
		next.Rollout.Regions = normalizeIDs(regions)
	}
	switch {
	case r.Rollout.State == Halted && Widens(r, next):
		// What a resume serves must be what the rules judged: a scope
		// widened while halted would come back at its percentage at once.
		return r, fmt.Errorf("%w: %s is halted: its scope may narrow, not widen, until `lpsctl rollout resume %s`", ErrInvalidTransition, r.Version, r.Version)
	case r.Rollout.State == Halted && percent != r.Rollout.Percent:
		// A halted release serves nobody, so its scope may change (narrowed
		// before a resume, say); growth waits for the resume.
		return r, fmt.Errorf("%w: %s is halted at %d%%: its percentage holds until `lpsctl rollout resume %s` (its scope may change while halted)", ErrInvalidTransition, r.Version, r.Rollout.Percent, r.Version)
	case percent < r.Rollout.Percent:
		return r, fmt.Errorf("%w: %s is at %d%%, asked for %d%%; to stop serving it, `lpsctl rollout halt %s`", ErrPercentDecrease, r.Version, r.Rollout.Percent, percent, r.Version)
	case r.Rollout.State == Paused:
		if percent != r.Rollout.Percent {
			return r, fmt.Errorf("%w: %s is paused at %d%%: its percentage holds until `lpsctl rollout resume %s` (its scope may change while paused)", ErrInvalidTransition, r.Version, r.Rollout.Percent, r.Version)
		}
	}
	r.Rollout.Percent = percent
	if subscriptions != nil {
		r.Rollout.Subscriptions = normalizeIDs(subscriptions)
	}
	if regions != nil {
		r.Rollout.Regions = normalizeIDs(regions)
	}
	if r.Rollout.State == Draft {
		r.Rollout.State = Rolling
	}
	return r, nil
}

// SetDeployEnvs returns r with its deploy-environment scope replaced by
// envs (nil keeps it, an empty list means every environment). Each must
// pass CheckDeployEnvs (ErrInvalidScope). A revoked release is refused; a
// halted one may change it, as its other scopes.
func (r Release) SetDeployEnvs(envs []string) (Release, error) {
	if r.Revoked {
		return r, revokedError(r.Version)
	}
	if err := CheckDeployEnvs(envs); err != nil {
		return r, err
	}
	if envs != nil {
		r.Rollout.DeployEnvs = normalizeIDs(envs)
	}
	return r, nil
}

// CheckDeployEnvs returns an error wrapping ErrInvalidScope, naming the
// value, unless every deploy environment is a label as a region is (a
// letter, then letters and digits, at most MaxRegionLength: prod,
// staging2). Surrounding spaces and empty entries are ignored.
func CheckDeployEnvs(envs []string) error {
	for _, e := range envs {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		if !ValidRegion(e) {
			return fmt.Errorf("%w: deploy environment %s is not a label (a letter, then letters and digits, at most %d, like prod or staging2)%s", ErrInvalidScope, quoted(e), MaxRegionLength, emptyHint(e))
		}
	}
	return nil
}

// MaxRegionLength is the longest region label a scope takes.
const MaxRegionLength = 64

// CheckScope returns an error wrapping ErrInvalidScope, naming the value,
// unless every subscription is a GUID (8-4-4-4-12 hex digits) and every
// region a region label: a letter, then letters and digits, at most
// MaxRegionLength (eastus, westeurope2), in either case. Surrounding
// spaces and empty entries are ignored, as SetScope drops them.
func CheckScope(subscriptions, regions []string) error {
	for _, s := range subscriptions {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if _, ok := uuid.Canonical(s); !ok {
			return fmt.Errorf("%w: subscription %s is not a subscription ID (a GUID, 8-4-4-4-12 hex digits)%s", ErrInvalidScope, quoted(s), emptyHint(s))
		}
	}
	for _, r := range regions {
		if r = strings.TrimSpace(r); r == "" {
			continue
		}
		if !ValidRegion(r) {
			return fmt.Errorf("%w: region %s is not a region label (a letter, then letters and digits, at most %d, like eastus or westeurope2)%s", ErrInvalidScope, quoted(r), MaxRegionLength, emptyHint(r))
		}
	}
	return nil
}

// ValidRegion reports whether s is a region label: a letter, then letters
// and digits, at most MaxRegionLength; case is ignored (scopes keep it
// lower case).
func ValidRegion(s string) bool {
	if s == "" || len(s) > MaxRegionLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i] | 0x20 // ASCII lower case; maps no non-letter onto a letter
		switch {
		case 'a' <= c && c <= 'z':
		case i > 0 && '0' <= s[i] && s[i] <= '9':
		default:
			return false
		}
	}
	return true
}

// quoted returns s for an error message: in double quotes, with control
// characters, format characters and invalid bytes escaped (quote.Text), so
// the operator sees exactly what was sent.
func quoted(s string) string {
	if q := quote.Text(s); q != s {
		return q
	}
	return `"` + s + `"`
}

// emptyHint explains a value made only of quote marks: a manual's empty
// pair of quotes for "all", which a formatter may have turned into one
// typographic quote (U+201D) that a shell passes on as a value.
func emptyHint(s string) string {
	if strings.Trim(s, "\u2018\u2019\u201c\u201d'\"") == "" {
		return `; for every subscription or region, pass an empty list ('')`
	}
	return ""
}

func normalizeIDs(ids []string) []string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if id = strings.ToLower(strings.TrimSpace(id)); id != "" {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Buckets is the number of hash buckets; a percentage p includes buckets
// below p*Buckets/100.
const Buckets = 10000

// Bucket places a node in [0, Buckets) for a release: uniformly spread and
// independent across releases, so each rollout samples a fresh set of nodes.
func Bucket(vmID, version string) int {
	h := sha256.Sum256([]byte(strings.ToLower(vmID) + "\x00" + version))
	return int(binary.BigEndian.Uint64(h[:8]) % Buckets)
}

// Node is what the service knows about a caller: its verified identity,
// the service instance's region, and when it asked.
type Node struct {
	// Now is the time of the request: a release expired at Now is not
	// served. The zero time serves no release at all, so a caller that
	// forgot to set it cannot serve expired ones.
	Now            time.Time
	VMID           string
	SubscriptionID string
	Region         string
	// Seats lists the releases (by version) whose canary seat the node
	// holds; the store keeps who holds what (lps.Seats hands them out).
	Seats []string
	// Base is the image base the node declared, or "" (a reference node):
	// a node of a declared base is served that base's release and
	// revocations only, so its document stays small however many bases
	// have releases.
	Base string
	// DeployEnv is the service instance's deploy-environment label, as
	// Region is its region's.
	DeployEnv string
}

// inScope reports whether n is in r's subscription and region scope.
func (r Release) inScope(n Node) bool {
	return (len(r.Rollout.Subscriptions) == 0 || slices.Contains(r.Rollout.Subscriptions, strings.ToLower(n.SubscriptionID))) &&
		(len(r.Rollout.Regions) == 0 || slices.Contains(r.Rollout.Regions, strings.ToLower(n.Region))) &&
		r.Rollout.envInScope(n)
}

// envInScope reports whether n's service instance is in ro's
// deploy-environment scope.
func (ro Rollout) envInScope(n Node) bool {
	return len(ro.DeployEnvs) == 0 || slices.Contains(ro.DeployEnvs, strings.ToLower(n.DeployEnv))
}

// Rule is one step of the decision for one release, for explain.
type Rule struct {
	Rule   string `json:"rule"`
	Passed bool   `json:"passed"`
	Detail string `json:"detail"`
}

// RuleCanarySeat is the rule that decides at a canary step, and includes a
// seat holder after it.
const RuleCanarySeat = "canary-seat"

// RuleDeployEnv is the rule of a rollout scoped by deploy environment.
const RuleDeployEnv = "deploy-env-in-scope"

// RuleNotExpired is the rule that refuses a release whose envelope has
// expired: nodes would refuse it, so serving it would reach nobody.
const RuleNotExpired = "not-expired"

// RuleStateServing refuses a release whose rollout state serves nobody
// (draft, halted).
const RuleStateServing = "state-serving"

func expiryText(notAfter, now time.Time) string {
	switch {
	case notAfter.IsZero():
		return "not_after unknown (the envelope does not decode)"
	case now.IsZero():
		return "not_after=" + notAfter.UTC().Format(time.RFC3339) + " now unknown"
	}
	return "not_after=" + notAfter.UTC().Format(time.RFC3339) + " now=" + now.UTC().Format(time.RFC3339)
}

// Includes reports whether r is served to n, with the rules that decided.
func (r Release) Includes(n Node) (bool, []Rule) { return r.includes(n, true) }

// includes is Includes, with the not-expired rule left out unless expiry.
func (r Release) includes(n Node, expiry bool) (bool, []Rule) {
	rules, decided, ok, limit := r.gate(n, expiry)
	if decided {
		return ok, rules
	}
	b := Bucket(n.VMID, r.Version)
	ok = b < limit
	return ok, append(rules, Rule{Rule: RulePercentage, Passed: ok, Detail: fmt.Sprintf("bucket=%d limit=%d (%d%%)", b, limit, r.Rollout.Percent)})
}

// RulePercentage is the last rule: the node's hash bucket against the
// rollout's percentage (or complete: every node in scope).
const RulePercentage = "percentage"

// gate is the decision for n up to the node's own hash bucket, in the
// order explain shows: every rule but the last, the percentage, whose
// bucket limit it returns. decided is true when a rule settled it first
// (then ok is the answer and rules end with that rule): a refusal, a
// complete rollout, a canary seat n holds. Includes finishes it for one
// node; Shares for the whole of a cohort, so both decide by one set of
// rules.
func (r Release) gate(n Node, expiry bool) (rules []Rule, decided, ok bool, limit int) {
	add := func(name string, ok bool, detail string) bool {
		rules = append(rules, Rule{Rule: name, Passed: ok, Detail: detail})
		return ok
	}
	if !add("not-revoked", !r.Revoked, fmt.Sprintf("revoked=%v", r.Revoked)) {
		return rules, true, false, 0
	}
	if expiry && !add(RuleNotExpired, !r.Expired(n.Now), expiryText(r.NotAfter, n.Now)) {
		return rules, true, false, 0
	}
	serving := r.Rollout.State == Rolling || r.Rollout.State == Paused || r.Rollout.State == Complete
	if !add(RuleStateServing, serving, "state="+string(r.Rollout.State)) {
		return rules, true, false, 0
	}
	subOK := len(r.Rollout.Subscriptions) == 0 || slices.Contains(r.Rollout.Subscriptions, strings.ToLower(n.SubscriptionID))
	if !add("subscription-in-scope", subOK, fmt.Sprintf("subscription=%s scope=%v", n.SubscriptionID, ScopeText(r.Rollout.Subscriptions))) {
		return rules, true, false, 0
	}
	regionOK := len(r.Rollout.Regions) == 0 || slices.Contains(r.Rollout.Regions, strings.ToLower(n.Region))
	if !add("region-in-scope", regionOK, fmt.Sprintf("region=%q scope=%v", n.Region, ScopeText(r.Rollout.Regions))) {
		return rules, true, false, 0
	}
	// Only a rollout scoped by deploy environment has this rule, so the
	// rules of one that is not read as before the scope existed.
	if len(r.Rollout.DeployEnvs) > 0 && !add(RuleDeployEnv, r.Rollout.envInScope(n), fmt.Sprintf("deploy_env=%q scope=%v", n.DeployEnv, ScopeText(r.Rollout.DeployEnvs))) {
		return rules, true, false, 0
	}
	if r.Rollout.State == Complete {
		add(RulePercentage, true, "complete: every node in scope")
		return rules, true, true, Buckets
	}
	if slices.Contains(n.Seats, r.Version) {
		add(RuleCanarySeat, true, "holds a canary seat")
		return rules, true, true, Buckets
	}
	// At a canary step only seat holders are served, unless an operator
	// set a percentage by hand: then that serves as well.
	if r.AtCanary() && r.Rollout.Percent == 0 {
		add(RuleCanarySeat, false, fmt.Sprintf("holds none of the canary's %d seats", r.Rollout.Plan.Current().Nodes))
		return rules, true, false, 0
	}
	return rules, false, false, r.Rollout.Percent * Buckets / 100
}

// unexpiredIncludes reports whether r would include n were it not expired.
func (r Release) unexpiredIncludes(n Node) bool {
	ok, _ := r.includes(n, false)
	return ok
}

// Offered reports whether r has ever been served to n, whatever its state
// now: it left draft, n is in its scope, and the rollout is complete, n
// holds a canary seat, or n's bucket is under the percentage (which only
// grows). A halt or revocation
// since does not undo an offer; it is how lpsd knows a node's report about
// r can be genuine.
func (r Release) Offered(n Node) bool {
	switch {
	case r.Rollout.State == Draft || r.Rollout.State == "":
		return false
	case slices.Contains(n.Seats, r.Version):
		// A seat holder was served, whatever the scope has become since.
		return true
	case !r.inScope(n):
		return false
	}
	return r.Rollout.State == Complete || Bucket(n.VMID, r.Version) < r.Rollout.Percent*Buckets/100
}

// AtCanary reports whether r's plan is at a canary step.
func (r Release) AtCanary() bool {
	return r.Rollout.Plan != nil && r.Rollout.Plan.Step < len(r.Rollout.Plan.Steps) && r.Rollout.Plan.Current().Canary()
}

// ScopeText is a scope list for people: its IDs, or "all" when empty.
func ScopeText(ids []string) string {
	if len(ids) == 0 {
		return "all"
	}
	return strings.Join(ids, ",")
}

// Selection is what one node is served.
type Selection struct {
	// Hotfixes maps each base to the chosen release's version.
	Hotfixes map[string]string
	// Tombstones lists the bases with a revoked release and no release
	// chosen for the node; Pointer serves hotfix.Tombstone(base) for each,
	// so a reference node's custom-data pointer to the revoked version
	// cannot install it. The price: while a base has a revoked release, a
	// node outside every rollout of that base cannot take a hotfix of it
	// from custom data either.
	Tombstones []string
	// Releases are the chosen releases' signed envelopes.
	Releases []json.RawMessage
	// Revoked lists every revoked version, so nodes drop staged copies.
	Revoked []string
	// Expired lists the releases that would have been chosen for the node
	// but had expired: not served, only counted.
	Expired []string
}

// Empty reports whether nothing applies to the node.
func (s Selection) Empty() bool {
	return len(s.Hotfixes) == 0 && len(s.Revoked) == 0 && len(s.Tombstones) == 0
}

// PointerSizes returns the largest pointer document a node could be
// served from releases at now or later: for a node that declared base (one
// release of the base, its largest envelope, and the base's revocations),
// and for one that declared none when trimmed (every base's hotfix and
// every revocation, no envelopes). A release expired at now is never
// served again, so it counts only once revoked (revocations are served
// for good). lpsd refuses a publish that takes either over its budget.
func PointerSizes(releases []Release, base string, now time.Time) (declared, trimmed int, err error) {
	worst := Selection{Hotfixes: map[string]string{}}
	all := Selection{Hotfixes: map[string]string{}}
	var envelope json.RawMessage
	for _, r := range releases {
		v, err := hotfix.ParseVersion(r.Version)
		if err != nil {
			continue
		}
		if r.Revoked {
			all.Revoked = append(all.Revoked, r.Version)
			if v.Base() == base {
				worst.Revoked = append(worst.Revoked, r.Version)
			}
			continue
		}
		if !r.NotAfter.IsZero() && !now.Before(r.NotAfter) {
			continue
		}
		if cur := all.Hotfixes[v.Base()]; len(r.Version) > len(cur) {
			all.Hotfixes[v.Base()] = r.Version
		}
		if v.Base() == base {
			if len(r.Version) > len(worst.Hotfixes[base]) {
				worst.Hotfixes[base] = r.Version
			}
			if len(r.Envelope) > len(envelope) {
				envelope = r.Envelope
			}
		}
	}
	if envelope != nil {
		worst.Releases = []json.RawMessage{envelope}
	}
	d, err := worst.Pointer().MarshalJSON()
	if err != nil {
		return 0, 0, err
	}
	t, err := all.Pointer().MarshalJSON()
	if err != nil {
		return 0, 0, err
	}
	return len(d), len(t), nil
}

// Trimmed returns s without the release envelopes: what a node that
// declared no base is served when its whole document would be over the
// budget. Reference readers use only the hotfixes; our agents without
// envelopes take the package route.
func (s Selection) Trimmed() Selection {
	s.Releases = nil
	return s
}

// Pointer renders the selection as the pointer document nodes stage.
func (s Selection) Pointer() hotfix.Pointer {
	hotfixes := s.Hotfixes
	if len(s.Tombstones) > 0 {
		hotfixes = maps.Clone(s.Hotfixes)
		if hotfixes == nil {
			hotfixes = make(map[string]string, len(s.Tombstones))
		}
		for _, b := range s.Tombstones {
			hotfixes[b] = hotfix.Tombstone(b)
		}
	}
	return hotfix.Pointer{Hotfixes: hotfixes, Releases: s.Releases, Revoked: s.Revoked}
}

// Select picks, for each base (only n.Base when the node declared one), the
// highest-patch release that includes n, and the revoked versions (of
// n.Base when declared). releases need not be sorted; invalid records are
// ignored.
func Select(releases []Release, n Node) Selection {
	best := make(map[string]hotfix.Version)
	env := make(map[string]json.RawMessage)
	var revoked []string
	var expired []Release
	revokedBases := make(map[string]bool)
	for _, r := range releases {
		v, err := hotfix.ParseVersion(r.Version)
		if err != nil || (n.Base != "" && v.Base() != n.Base) {
			continue
		}
		if r.Revoked {
			revoked = append(revoked, v.String())
			revokedBases[v.Base()] = true
			continue
		}
		if ok, _ := r.Includes(n); !ok {
			if r.Expired(n.Now) {
				expired = append(expired, r)
			}
			continue
		}
		if cur, seen := best[v.Base()]; !seen || v.Patch() > cur.Patch() {
			best[v.Base()] = v
			env[v.Base()] = r.Envelope
		}
	}
	s := Selection{Revoked: revoked}
	slices.Sort(s.Revoked)
	for _, r := range expired {
		// Only expiry kept it out, and nothing newer was chosen instead:
		// the node is left without the hotfix it was meant to get.
		v, _ := hotfix.ParseVersion(r.Version)
		if cur, chosen := best[v.Base()]; (!chosen || cur.Patch() < v.Patch()) && r.unexpiredIncludes(n) {
			s.Expired = append(s.Expired, r.Version)
		}
	}
	slices.Sort(s.Expired)
	for b := range revokedBases {
		if _, chosen := best[b]; !chosen {
			s.Tombstones = append(s.Tombstones, b)
		}
	}
	slices.Sort(s.Tombstones)
	if len(best) > 0 {
		s.Hotfixes = make(map[string]string, len(best))
		bases := make([]string, 0, len(best))
		for b, v := range best {
			s.Hotfixes[b] = v.String()
			bases = append(bases, b)
		}
		slices.Sort(bases)
		for _, b := range bases {
			s.Releases = append(s.Releases, env[b])
		}
	}
	return s
}

// Decision explains one release's outcome for a node.
type Decision struct {
	Version  string `json:"version"`
	Base     string `json:"base"`
	Included bool   `json:"included"`
	Chosen   bool   `json:"chosen"`
	Rules    []Rule `json:"rules"`
}

// Explain returns, for every release, whether it includes n and why, and
// which releases Select would choose.
func Explain(releases []Release, n Node) ([]Decision, Selection) {
	sel := Select(releases, n)
	out := make([]Decision, 0, len(releases))
	for _, r := range releases {
		ok, rules := r.Includes(n)
		out = append(out, Decision{
			Version:  r.Version,
			Base:     r.Base,
			Included: ok,
			Chosen:   ok && sel.Hotfixes[r.Base] == r.Version,
			Rules:    rules,
		})
	}
	slices.SortFunc(out, func(a, b Decision) int { return strings.Compare(a.Version, b.Version) })
	return out, sel
}

// Compare orders releases by base, then numerically by patch (202604.01.9
// before 202604.01.10); unparsable versions sort by their text. It is the
// order stores list releases in.
func Compare(a, b Release) int {
	va, errA := hotfix.ParseVersion(a.Version)
	vb, errB := hotfix.ParseVersion(b.Version)
	if errA != nil || errB != nil {
		return strings.Compare(a.Version, b.Version)
	}
	return cmp.Or(strings.Compare(va.Base(), vb.Base()), cmp.Compare(va.Patch(), vb.Patch()))
}

// DescribeChange summarises, for people, what an audit entry's change did
// to a release's (or a component configuration's) rollout: its before and after records as the audit log
// holds them (JSON; before empty for a publish). lpsctl's audit table and
// the dashboard both print it. Strings from the records are printed as they
// are: callers quote them for their medium.
func DescribeChange(beforeJSON, afterJSON string) string {
	// Only the rollout is read, so a component configuration's records
	// (Config) describe the same way.
	var before, after struct {
		Rollout        Rollout   `json:"rollout"`
		Revoked        bool      `json:"revoked"`
		ExpiryRecorded bool      `json:"expiry_recorded"`
		NotAfter       time.Time `json:"not_after"`
	}
	if json.Unmarshal([]byte(afterJSON), &after) != nil {
		return "?"
	}
	if beforeJSON == "" {
		return fmt.Sprintf("published as %s", after.Rollout.State)
	}
	if json.Unmarshal([]byte(beforeJSON), &before) != nil {
		return "?"
	}
	var parts []string
	b, a := before.Rollout, after.Rollout
	if b.State != a.State {
		parts = append(parts, fmt.Sprintf("state %s→%s", b.State, a.State))
	}
	if b.Percent != a.Percent {
		parts = append(parts, fmt.Sprintf("percent %d→%d", b.Percent, a.Percent))
	}
	if !slices.Equal(b.Subscriptions, a.Subscriptions) {
		parts = append(parts, fmt.Sprintf("subscriptions %s→%s", ScopeText(b.Subscriptions), ScopeText(a.Subscriptions)))
	}
	if !slices.Equal(b.Regions, a.Regions) {
		parts = append(parts, fmt.Sprintf("regions %s→%s", ScopeText(b.Regions), ScopeText(a.Regions)))
	}
	switch bp, ap := b.Plan, a.Plan; {
	case bp == nil && ap != nil:
		parts = append(parts, fmt.Sprintf("plan of %d steps, at step %d/%d", len(ap.Steps), ap.Step+1, len(ap.Steps)))
	case bp != nil && ap == nil:
		parts = append(parts, "plan removed")
	case bp != nil && !slices.Equal(bp.Steps, ap.Steps):
		parts = append(parts, fmt.Sprintf("plan replaced by one of %d steps, at step %d/%d", len(ap.Steps), ap.Step+1, len(ap.Steps)))
	case bp != nil && bp.Step != ap.Step:
		parts = append(parts, fmt.Sprintf("plan step %d/%d→%d/%d", bp.Step+1, len(bp.Steps), ap.Step+1, len(ap.Steps)))
	}
	if !b.EvidenceSince.Equal(a.EvidenceSince) && !a.EvidenceSince.IsZero() {
		parts = append(parts, fmt.Sprintf("fresh evidence from %s (reports accepted before it do not count)", a.EvidenceSince.UTC().Format(time.RFC3339)))
	}
	if !slices.Equal(b.DeployEnvs, a.DeployEnvs) {
		parts = append(parts, fmt.Sprintf("deploy envs %s→%s", ScopeText(b.DeployEnvs), ScopeText(a.DeployEnvs)))
	}
	if !before.ExpiryRecorded && after.ExpiryRecorded {
		parts = append(parts, fmt.Sprintf("expired at %s: served to no node since", after.NotAfter.UTC().Format(time.RFC3339)))
	}
	if before.Revoked != after.Revoked {
		yes := map[bool]string{false: "no", true: "yes"}
		parts = append(parts, fmt.Sprintf("revoked %s→%s", yes[before.Revoked], yes[after.Revoked]))
	}
	if len(parts) == 0 {
		return "no rollout change"
	}
	return strings.Join(parts, ", ")
}
