// Package agentversion reads the version stamped into an agent binary
// (`-ldflags "-X main.version=V"`, as make build does) without running it:
// lpsctl checks a release's binaries on the machine that holds the release
// key, where running an artifact would hand that key to whoever built it.
package agentversion

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
)

// Symbol is the stamped variable, in the Go linker's spelling.
const Symbol = "main.version"

// maxVersion caps the stamped string: versions are YYYYMM.DD.PATCH.
const maxVersion = 256

// ErrNotStamped is returned (wrapped) for a binary without the symbol: a
// stripped binary, one built without the stamp, or not a Go agent.
var ErrNotStamped = errors.New("no stamped version")

// Read returns the value of main.version in the ELF binary at path. The
// linker writes a stamped string's header (pointer, length) into the
// variable's data and its bytes into read-only data; both are read from the
// file's sections, never executed. A malformed file is an error, not a
// panic.
func Read(path string) (v string, err error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", fmt.Errorf("read the version of %s: %w", path, err)
	}
	defer f.Close()
	defer func() {
		// debug/elf trusts header fields; a hostile file must not crash
		// the signer.
		if p := recover(); p != nil {
			v, err = "", fmt.Errorf("read the version of %s: malformed ELF: %v", path, p)
		}
	}()
	syms, err := f.Symbols()
	if err != nil {
		return "", fmt.Errorf("read the version of %s: %w: %w", path, ErrNotStamped, err)
	}
	word := 8
	if f.Class == elf.ELFCLASS32 {
		word = 4
	}
	for _, s := range syms {
		if s.Name != Symbol {
			continue
		}
		hdr, err := readAt(f, s.Value, 2*word)
		if err != nil {
			return "", fmt.Errorf("read the version of %s: %s: %w", path, Symbol, err)
		}
		ptr, n := f.ByteOrder.Uint64(pad(hdr[:word])), f.ByteOrder.Uint64(pad(hdr[word:]))
		if word == 4 {
			ptr, n = uint64(f.ByteOrder.Uint32(hdr[:4])), uint64(f.ByteOrder.Uint32(hdr[4:]))
		}
		if n > maxVersion {
			return "", fmt.Errorf("read the version of %s: %s is %d bytes, more than a version", path, Symbol, n)
		}
		b, err := readAt(f, ptr, int(n))
		if err != nil {
			return "", fmt.Errorf("read the version of %s: %s's bytes: %w", path, Symbol, err)
		}
		return string(b), nil
	}
	return "", fmt.Errorf("read the version of %s: %w (no %s symbol: stripped, or not built with -X %s=…)", path, ErrNotStamped, Symbol, Symbol)
}

// pad returns b as 8 bytes for Uint64 (b is already 8 on 64-bit files).
func pad(b []byte) []byte {
	if len(b) == 8 {
		return b
	}
	return make([]byte, 8)
}

// readAt reads n bytes at virtual address addr from the section holding
// them.
func readAt(f *elf.File, addr uint64, n int) ([]byte, error) {
	if n == 0 {
		return nil, nil
	}
	for _, s := range f.Sections {
		if s.Type == elf.SHT_NOBITS || addr < s.Addr || addr-s.Addr >= s.Size || uint64(n) > s.Size-(addr-s.Addr) {
			continue
		}
		b := make([]byte, n)
		if _, err := s.ReadAt(b, int64(addr-s.Addr)); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		return b, nil
	}
	return nil, fmt.Errorf("address %#x (%d bytes) is in no section with contents", addr, n)
}
