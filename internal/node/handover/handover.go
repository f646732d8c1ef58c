// Package handover is the same-boot contract of a launch: how launch hands
// provisioning over, to a hotfix agent or the baked one, as the launcher
// shim's few lines of shell mirror it (handover_test pins them).
//
// Launch records the handover in LaunchFile before anything provisions;
// the shim, finding one with its launch ID (EnvLaunchID), never provisions
// a second time. A hotfix agent's provision, told by EnvBakedFallback that
// the baked agent follows, records its phases in StartFile; from
// PhaseBootstrap on a failure is the bootstrap's and nothing runs again.
package handover

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"nodehotfix/internal/atomicfile"
	"nodehotfix/internal/capfile"
	"nodehotfix/internal/node/layout"
)

// Environment launch's children receive: the shim gives launch EnvLaunchID,
// launch gives all three to a hotfix agent's provision.
const (
	// EnvLaunchID identifies this launch; provision records it when the
	// bootstrap starts, which is how launch (and the shell shim) tell a
	// failed bootstrap from an agent that died before it.
	EnvLaunchID = "AKS_NODE_CONTROLLER_LAUNCH_ID"
	// EnvAgent says which agent provision runs as ("hotfix").
	EnvAgent = "AKS_NODE_CONTROLLER_AGENT"
	// EnvBakedFallback, "1", tells provision that the baked agent provisions
	// if it fails before the bootstrap starts, so it leaves the status files
	// that provision-wait watches to that run.
	EnvBakedFallback = "AKS_NODE_CONTROLLER_BAKED_FALLBACK"
)

// The records' paths under the root, the reference's status directory.
const (
	launchFile = "var/log/azure/aks/launch.json"
	startFile  = "var/log/azure/aks/provision-started.json"
)

// LaunchFile is launch.json: launch handed the node over to a provision,
// for which launch ID. After that the launcher shim never provisions again.
func LaunchFile(root layout.Root) string { return filepath.Join(string(root), launchFile) }

// StartFile is provision-started.json: which phase a provision under a
// launch reached, by which agent; PhaseBootstrap is written just before the
// bootstrap runs.
func StartFile(root layout.Root) string { return filepath.Join(string(root), startFile) }

// Phases of a Record in StartFile.
const (
	PhasePreflight = "preflight"
	PhaseBootstrap = "bootstrap"
)

// Record is launch.json and provision-started.json. The shim matches the
// compact JSON of LaunchID, `"LaunchID":"<id>"`, in launch.json.
type Record struct {
	// LaunchID is the launch this record is of; empty outside one.
	LaunchID string `json:"LaunchID"`
	// Phase is PhasePreflight once a provision under launch has begun,
	// PhaseBootstrap once the bootstrap is about to start; empty in
	// launch.json.
	Phase        string `json:"Phase,omitempty"`
	Agent        string `json:"Agent,omitempty"`
	AgentVersion string `json:"AgentVersion"`
	Pid          int    `json:"Pid"`
	Time         string `json:"Time"` // RFC 3339, UTC
}

// maxRecord caps a record, as the shim's read does; ours are about 150
// bytes.
const maxRecord = 4 << 10

// Write writes r to path (LaunchFile or StartFile), filling in the pid and
// the time. It is for this boot only, so an atomic rename without fsync is
// enough.
func Write(path string, r Record) error {
	r.Pid, r.Time = os.Getpid(), time.Now().UTC().Format(time.RFC3339Nano)
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode %s: %w", filepath.Base(path), err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create status directory: %w", err)
	}
	if err := atomicfile.Replace(path, data, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	return nil
}

// Read returns the record at path if it is launchID's. A symlink, FIFO or
// oversized file there is no record, nor is any record for an empty ID.
func Read(path, launchID string) (Record, bool) {
	if launchID == "" {
		return Record{}, false
	}
	data, err := capfile.ReadNoFollow(path, maxRecord)
	if err != nil {
		return Record{}, false
	}
	var r Record
	if json.Unmarshal(data, &r) != nil || r.LaunchID != launchID {
		return Record{}, false
	}
	return r, true
}

// Started reports whether the bootstrap started under the launch launchID,
// as provision recorded it in StartFile.
func Started(root layout.Root, launchID string) bool {
	r, ok := Read(StartFile(root), launchID)
	return ok && r.Phase == PhaseBootstrap
}

// StatusMark identifies provision.complete and provision.json as they
// are at one moment.
type StatusMark struct {
	complete, status fileMark
}

// fileMark identifies one file: whether it exists, and its identity.
type fileMark struct {
	exists bool
	ino    uint64
	mtime  int64 // ns
	size   int64
}

func markFile(path string) fileMark {
	fi, err := os.Lstat(path)
	if err != nil {
		return fileMark{}
	}
	m := fileMark{exists: true, mtime: fi.ModTime().UnixNano(), size: fi.Size()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		m.ino = st.Ino
	}
	return m
}

// MarkStatus returns the status files' mark now.
func MarkStatus(root layout.Root) StatusMark {
	return StatusMark{complete: markFile(root.ProvisionComplete()), status: markFile(root.ProvisionJSON())}
}

// Changed reports whether provision.complete was written (or removed)
// since m was taken, by any agent (one that keeps no start record, such
// as the reference's, included). It compares the file's identity, not
// the clock, which may jump while a node boots.
func (m StatusMark) Changed(root layout.Root) bool {
	return markFile(root.ProvisionComplete()) != m.complete
}

// Written reports whether an agent recorded its provisioning since m was
// taken: provision.json and provision.complete both exist and are both
// not the files m saw. A stale provision.complete removed, or one
// written beside an old provision.json, is not a record.
func (m StatusMark) Written(root layout.Root) bool {
	c, s := markFile(root.ProvisionComplete()), markFile(root.ProvisionJSON())
	return c.exists && s.exists && c != m.complete && s != m.status
}
