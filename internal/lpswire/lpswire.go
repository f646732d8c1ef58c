// Package lpswire is the contract between our node agent and the
// service that is not in the protos: the gRPC metadata keys a node sends
// with GetComponentConfig, and how long its reports still count. The node
// client and the service both use it.
package lpswire

import "time"

// ReportDeadline is how long after a boot was served its reports still
// count, so how long a node keeps resending one the service did not
// acknowledge: the longest silent-after a plan may set (24 h) stretched
// by the longest lpsd outage the tally forgives (24 h, tally.MaxStretch).
// A report that late still turns the boot's silent vote into its outcome;
// one later changes nothing.
const ReportDeadline = 48 * time.Hour

// Metadata keys our node client sends (the reference sends none of them);
// internal/lps documents what the service does with each.
const (
	BaseMetadata    = "nodehotfix-base"
	ReportsMetadata = "nodehotfix-reports"
	BootMetadata    = "nodehotfix-boot"
	KeySetMetadata  = "nodehotfix-keyset-version"
	LogSizeMetadata = "nodehotfix-log-size"
)
