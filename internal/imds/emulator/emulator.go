// Package emulator serves the parts of the cloud's instance metadata service
// that provisioning uses, signing attested documents with a local CA, for
// development, demos and tests off-cloud.
package emulator

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"nodehotfix/internal/imds/imdssign"
	"nodehotfix/internal/uuid"
)

// VM is the identity the emulator attests.
type VM struct {
	VMID           string
	SubscriptionID string
	SKU            string
	Location       string
}

// Config configures a Handler.
type Config struct {
	VM VM
	// CA signs documents.
	CA *imdssign.CA
	// Validity is how long a document is valid; zero means 6 hours, the
	// cloud's usual lifetime.
	Validity time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Log receives one line per request; nil discards.
	Log *slog.Logger
}

// AIAPath is where the intermediate certificate is served (DER) when the CA
// has one.
const AIAPath = "/aia/intermediate.crt"

// Handler returns the emulator's HTTP handler.
func Handler(cfg Config) http.Handler {
	if cfg.Validity <= 0 {
		cfg.Validity = 6 * time.Hour
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	attested := func(vm VM) http.Handler {
		return metadataOnly(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			now := cfg.Now().UTC()
			nonce := r.URL.Query().Get("nonce")
			if nonce == "" {
				// Without a nonce the service puts a UTC timestamp there.
				nonce = now.Format("20060102-150405")
			}
			doc := imdssign.Document{
				Nonce:          nonce,
				SKU:            vm.SKU,
				SubscriptionID: vm.SubscriptionID,
				VMID:           vm.VMID,
				TimeStamp:      imdssign.TimeStamp{CreatedOn: now, ExpiresOn: now.Add(cfg.Validity)},
			}
			content, err := json.Marshal(doc)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			sig, err := cfg.CA.Sign(content)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			cfg.Log.Info("attested document", "vmId", vm.VMID, "nonce", nonce)
			writeJSON(w, map[string]string{"encoding": "pkcs7", "signature": sig})
		}))
	}
	instance := func(vm VM) http.Handler {
		return metadataOnly(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, map[string]any{
				"compute": map[string]string{
					"vmId":           vm.VMID,
					"subscriptionId": vm.SubscriptionID,
					"sku":            vm.SKU,
					"location":       vm.Location,
					"osType":         "Linux",
				},
				"network": map[string]any{"interface": []any{}},
			})
		}))
	}
	mux.Handle("GET /metadata/attested/document", attested(cfg.VM))
	mux.Handle("GET /metadata/instance", instance(cfg.VM))
	// A fleet: under /vm/<vmId>/ the same service speaks for another VM of
	// the same subscription, so one emulator stands in for many nodes'
	// metadata services (each node's base URL names its VM).
	other := func(h func(VM) http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id := r.PathValue("vmid")
			// Lower case only: the path names the VM exactly as its
			// documents will.
			if c, ok := uuid.Canonical(id); !ok || c != id {
				errorJSON(w, http.StatusNotFound, "unknown VM "+id)
				return
			}
			vm := cfg.VM
			vm.VMID = id
			http.StripPrefix("/vm/"+id, h(vm)).ServeHTTP(w, r)
		})
	}
	mux.Handle("GET /vm/{vmid}/metadata/attested/document", other(attested))
	mux.Handle("GET /vm/{vmid}/metadata/instance", other(instance))
	if cfg.CA.Intermediate != nil {
		mux.HandleFunc("GET "+AIAPath, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/pkix-cert")
			w.Write(cfg.CA.Intermediate.Raw)
		})
	}
	return mux
}

// metadataOnly enforces the metadata service's request rules: the Metadata
// header, no X-Forwarded-For, and an api-version.
func metadataOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Header.Get("Metadata") != "true":
			errorJSON(w, http.StatusBadRequest, "Bad request. Required metadata header not specified")
		case r.Header.Get("X-Forwarded-For") != "":
			errorJSON(w, http.StatusBadRequest, "Bad request. X-Forwarded-For header is not allowed")
		case r.URL.Query().Get("api-version") == "":
			errorJSON(w, http.StatusBadRequest, "Bad request. api-version was not specified in the request")
		default:
			h.ServeHTTP(w, r)
		}
	})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		fmt.Fprintln(w)
	}
}

func errorJSON(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
