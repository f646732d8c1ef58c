// Package lpswire names the gRPC metadata keys a node sends with GetComponentConfig, for the node client and the service alike.
package lpswire

// Metadata keys our node client sends (the reference sends none of them);
// internal/lps documents what the service does with each.
const (
	BaseMetadata    = "nodehotfix-base"
	ReportsMetadata = "nodehotfix-reports"
	BootMetadata    = "nodehotfix-boot"
	KeySetMetadata  = "nodehotfix-keyset-version"
	LogSizeMetadata = "nodehotfix-log-size"
)
