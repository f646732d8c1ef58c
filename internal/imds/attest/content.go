package attest

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"nodehotfix/internal/jsonobj"
	"nodehotfix/internal/uuid"
)

// TimeLayout is the Go layout of the document's timeStamp values, e.g.
// "11/20/18 22:07:39 -0000".
const TimeLayout = "01/02/06 15:04:05 -0700"

// document is the part of the signed JSON that Verify uses.
type document struct {
	vmID, subscriptionID    string // canonical lower-case UUIDs
	sku, licenseType, nonce string
	plan                    Plan
	createdOn, expiresOn    time.Time
}

// parseContent parses the signed JSON strictly where it matters and leniently
// where Microsoft may extend it: the fields we use must appear at most once
// (encoding/json would silently keep the last one) and must not have a
// case-variant twin (encoding/json matches names case-insensitively), while
// unknown fields are ignored. Required: vmId and subscriptionId (UUIDs) and
// both timeStamp values in TimeLayout.
func parseContent(data []byte) (document, error) {
	var d document
	top, err := members(data, "vmId", "subscriptionId", "sku", "licenseType", "nonce", "plan", "timeStamp")
	if err != nil {
		return d, err
	}
	for _, f := range []struct {
		name string
		dst  *string
	}{
		{"vmId", &d.vmID}, {"subscriptionId", &d.subscriptionID},
		{"sku", &d.sku}, {"licenseType", &d.licenseType}, {"nonce", &d.nonce},
	} {
		if *f.dst, err = stringValue(top[f.name]); err != nil {
			return d, fmt.Errorf("%s: %w", f.name, err)
		}
	}
	var ok bool
	if d.vmID, ok = uuid.Canonical(d.vmID); !ok {
		return d, errors.New("vmId: missing or not a UUID")
	}
	if d.subscriptionID, ok = uuid.Canonical(d.subscriptionID); !ok {
		return d, errors.New("subscriptionId: missing or not a UUID")
	}

	if raw, present := top["plan"]; present {
		plan, err := members(raw, "name", "product", "publisher")
		if err != nil {
			return d, fmt.Errorf("plan: %w", err)
		}
		for _, f := range []struct {
			name string
			dst  *string
		}{{"name", &d.plan.Name}, {"product", &d.plan.Product}, {"publisher", &d.plan.Publisher}} {
			if *f.dst, err = stringValue(plan[f.name]); err != nil {
				return d, fmt.Errorf("plan.%s: %w", f.name, err)
			}
		}
	}

	raw, present := top["timeStamp"]
	if !present {
		return d, errors.New("timeStamp: missing")
	}
	ts, err := members(raw, "createdOn", "expiresOn")
	if err != nil {
		return d, fmt.Errorf("timeStamp: %w", err)
	}
	if d.createdOn, err = timeValue(ts["createdOn"]); err != nil {
		return d, fmt.Errorf("timeStamp.createdOn: %w", err)
	}
	if d.expiresOn, err = timeValue(ts["expiresOn"]); err != nil {
		return d, fmt.Errorf("timeStamp.expiresOn: %w", err)
	}
	if d.expiresOn.Before(d.createdOn) {
		return d, errors.New("timeStamp: expiresOn before createdOn")
	}
	return d, nil
}

// members returns the raw values of the known keys of the JSON object data.
// Any duplicate key, an unknown key equal to a known one under case folding
// (encoding/json would match it), or trailing data is an error; other
// unknown keys are skipped.
func members(data []byte, known ...string) (map[string]json.RawMessage, error) {
	all, err := jsonobj.Members(data)
	if err != nil {
		return nil, err
	}
	out := make(map[string]json.RawMessage, len(known))
	for _, m := range all {
		if slices.Contains(known, m.Key) {
			out[m.Key] = m.Value
			continue
		}
		for _, k := range known {
			if strings.EqualFold(k, m.Key) {
				return nil, fmt.Errorf("key differs from %q only in case", k)
			}
		}
	}
	return out, nil
}

// stringValue decodes a JSON string; an absent value is "", null or any
// other type is an error.
func stringValue(raw json.RawMessage) (string, error) {
	if len(raw) == 0 {
		return "", nil
	}
	if raw[0] != '"' {
		return "", errors.New("not a string")
	}
	var s string
	err := json.Unmarshal(raw, &s)
	return s, err
}

// timeValue decodes a required timestamp in exactly TimeLayout. The length
// check rejects the fractional seconds that time.Parse tolerates.
func timeValue(raw json.RawMessage) (time.Time, error) {
	if len(raw) == 0 {
		return time.Time{}, errors.New("missing")
	}
	s, err := stringValue(raw)
	if err != nil {
		return time.Time{}, err
	}
	if len(s) != len(TimeLayout) {
		return time.Time{}, fmt.Errorf("not in layout %q", TimeLayout)
	}
	t, err := time.Parse(TimeLayout, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("not in layout %q", TimeLayout)
	}
	return t, nil
}
