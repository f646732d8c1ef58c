// Package features is the codec of enabled_features.sh, the per-node
// KEY=VALUE file that turns node features on.
//
// Render is the producer side (custom data). Read is the one on-node reader,
// used by `aks-node-controller launch` to decide and by `explain` to show
// that decision; nothing else parses the file.
//
// # Threat model
//
// The boothook writes the file as root, mode 0600, from a map that producers
// fill with any identifier. Its content is data: it is never sourced,
// evaluated or executed, and nothing in it may change how the agent or the
// programs provisioning runs behave, beyond the flags those programs read.
//
//   - Read never opens anything but a regular file. It opens the directory
//     once and looks the file up and opens it relative to that directory,
//     without following a symlink and without blocking, so a symlink, FIFO,
//     directory or device at the path voids the file instead of hanging or
//     redirecting the read.
//   - The file and its directory must be owned by the reader's effective uid
//     (root on a node) and not be writable by group or others, so nobody else
//     can have written the file or can swap it after the checks.
//   - At most MaxSize+1 bytes are read, whatever fstat says.
//   - A file no producer writes is void as a whole, and every feature is off:
//     over MaxSize bytes or MaxLines lines, any CR (so "true\r" never turns a
//     flag on) or NUL, or a key set twice. No line of such a file is trusted.
//   - Lines are KEY=VALUE with KEY an ASCII identifier at column 1 and VALUE
//     everything after the first '=', byte for byte: no quote removal,
//     trimming, comment stripping or expansion. Only the exact value "true"
//     turns the hotfix path on. Blank and '#' lines are skipped; any other
//     line is skipped with a Note.
//   - Pairs never enter the agent's own environment. Env gives the accepted
//     pairs to the children that consume flags: the node bootstrap script,
//     the CSE scripts it runs, and a hotfix agent. Reserved keys, which would
//     change how those children or the programs they start behave (bash, the
//     dynamic loader and libc, the Go runtime, proxies, TLS trust of every
//     interpreter, systemd, package managers), are refused with a Note.
//
// The grammar is the launcher's, not the stricter one of security.md §4.3:
// producers already emit any identifier and any single-line value, and
// every node must keep reading those files as it did.
package features
