package downloadhotfix

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// checkStagingDir refuses a staging directory that someone other than this
// process's user could write: whoever can write it can swap the staged binary
// between its verification and launch's exec. The image's directory is
// root-owned and 0755. A missing directory is fine: lock creates it.
func checkStagingDir(dir string) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("staging directory: %w", err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return fmt.Errorf("staging directory %s is a symlink; not staging", dir)
	}
	if !fi.IsDir() {
		return fmt.Errorf("staging directory %s is not a directory (%s); not staging", dir, fi.Mode().Type())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("staging directory %s is owned by uid %d, not %d; not staging", dir, st.Uid, os.Geteuid())
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("staging directory %s is writable by group or others (mode %#o); not staging", dir, fi.Mode().Perm())
	}
	return nil
}
