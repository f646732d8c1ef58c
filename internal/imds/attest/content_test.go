package attest

import (
	"strings"
	"testing"
	"time"

	"nodehotfix/internal/uuid"

	"github.com/google/go-cmp/cmp"
)

func TestParseContent(t *testing.T) {
	t.Parallel()
	in := `{"licenseType":"Windows_Server","nonce":"n","plan":{"name":"a","product":"b","publisher":"c"},` +
		`"sku":"s","subscriptionId":"8D10DA13-8125-4BA9-A717-BF7490507B3D",` +
		`"timeStamp":{"createdOn":"11/20/18 22:07:39 -0000","expiresOn":"11/20/18 22:08:24 -0000"},` +
		`"vmId":"02aab8a4-74ef-476e-8182-f6d2ba4166a6"}`
	got, err := parseContent([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := document{
		vmID:           "02aab8a4-74ef-476e-8182-f6d2ba4166a6",
		subscriptionID: "8d10da13-8125-4ba9-a717-bf7490507b3d",
		sku:            "s",
		licenseType:    "Windows_Server",
		nonce:          "n",
		plan:           Plan{Name: "a", Product: "b", Publisher: "c"},
		createdOn:      time.Date(2018, 11, 20, 22, 7, 39, 0, time.UTC),
		expiresOn:      time.Date(2018, 11, 20, 22, 8, 24, 0, time.UTC),
	}
	opts := []cmp.Option{cmp.AllowUnexported(document{}), cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })}
	if diff := cmp.Diff(want, got, opts...); diff != "" {
		t.Errorf("parseContent mismatch (-want +got):\n%s", diff)
	}
}

func TestParseContentRejects(t *testing.T) {
	t.Parallel()
	const ids = `"vmId":"02aab8a4-74ef-476e-8182-f6d2ba4166a6","subscriptionId":"8d10da13-8125-4ba9-a717-bf7490507b3d"`
	const ts = `"timeStamp":{"createdOn":"11/20/18 22:07:39 -0000","expiresOn":"11/20/18 22:08:24 -0000"}`
	for _, tc := range []struct{ name, in string }{
		{"empty", ``},
		{"null", `null`},
		{"array", `[` + ids + `]`},
		{"truncated", `{` + ids + `,` + ts},
		{"trailing-garbage", `{` + ids + `,` + ts + `} x`},
		{"two-objects", `{` + ids + `,` + ts + `}{}`},
		{"bom", "\ufeff{" + ids + `,` + ts + `}`},
		{"dup-vmId-escaped", `{` + ids + `,"vm\u0049d":"02aab8a4-74ef-476e-8182-f6d2ba4166a6",` + ts + `}`},
		{"fold-kelvin", `{` + ids + `,"s\u212Au":"x",` + ts + `}`},
		{"case-variant-timestamp", `{` + ids + `,` + ts + `,"timestamp":{}}`},
		{"dup-plan-name", `{` + ids + `,"plan":{"name":"a","name":"b"},` + ts + `}`},
		{"plan-null", `{` + ids + `,"plan":null,` + ts + `}`},
		{"sku-number", `{` + ids + `,"sku":1,` + ts + `}`},
		{"nonce-object", `{` + ids + `,"nonce":{},` + ts + `}`},
		{"timestamp-array", `{` + ids + `,"timeStamp":[]}`},
		{"two-digit-offset", `{` + ids + `,"timeStamp":{"createdOn":"11/20/18 22:07:39 -00","expiresOn":"11/20/18 22:08:24 -0000"}}`},
		{"single-digit-month", `{` + ids + `,"timeStamp":{"createdOn":"1/20/18 22:07:39 -0000","expiresOn":"11/20/18 22:08:24 -0000"}}`},
		{"four-digit-year", `{` + ids + `,"timeStamp":{"createdOn":"11/20/2018 22:07:39 -0000","expiresOn":"11/20/18 22:08:24 -0000"}}`},
		{"uuid-no-hyphens", `{"vmId":"02aab8a474ef476e8182f6d2ba4166a6","subscriptionId":"8d10da13-8125-4ba9-a717-bf7490507b3d",` + ts + `}`},
		{"uuid-non-hex", `{"vmId":"02aab8a4-74ef-476e-8182-f6d2ba4166zz","subscriptionId":"8d10da13-8125-4ba9-a717-bf7490507b3d",` + ts + `}`},
		{"deep-nesting", `{` + ids + `,` + ts + `,"x":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}`},
	} {
		if d, err := parseContent([]byte(tc.in)); err == nil {
			t.Errorf("parseContent(%s) = %+v, want error", tc.name, d)
		}
	}
}

func FuzzParseContent(f *testing.F) {
	f.Add(`{"vmId":"02aab8a4-74ef-476e-8182-f6d2ba4166a6","subscriptionId":"8d10da13-8125-4ba9-a717-bf7490507b3d",` +
		`"timeStamp":{"createdOn":"11/20/18 22:07:39 -0000","expiresOn":"11/20/18 22:08:24 -0000"}}`)
	f.Add(`{"vmId":1,"vmId":2}`)
	f.Add(`[`)
	f.Fuzz(func(t *testing.T, in string) {
		d, err := parseContent([]byte(in))
		if err != nil {
			return
		}
		if _, ok := uuid.Canonical(d.vmID); !ok || d.vmID != strings.ToLower(d.vmID) {
			t.Fatalf("accepted vmId %q, want a lower-case UUID", d.vmID)
		}
		if d.createdOn.IsZero() || d.expiresOn.Before(d.createdOn) {
			t.Fatalf("accepted window %v..%v", d.createdOn, d.expiresOn)
		}
	})
}
