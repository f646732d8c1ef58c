// Command badagent stands in for a misbehaving hotfix agent in tests. Its
// behaviour on "version" is fixed at build time with -ldflags -X:
//
//	main.mode=hang   start a child that keeps stdout open, write the child's
//	                 pid to main.pidFile, then block forever
//	main.mode=spew   print 100 MiB before the version
//	main.mode=fail   print the version and exit 1
package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"time"
)

var (
	version = "dev"
	mode    = ""
	pidFile = ""
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "hold" {
		time.Sleep(time.Hour)
		return
	}
	if len(os.Args) < 2 || os.Args[1] != "version" {
		os.Exit(3)
	}
	switch mode {
	case "hang":
		child := exec.Command(os.Args[0], "hold")
		child.Stdout = os.Stdout
		if err := child.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(4)
		}
		if err := os.WriteFile(pidFile, fmt.Appendf(nil, "%d", child.Process.Pid), 0o600); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(4)
		}
		time.Sleep(time.Hour)
	case "spew":
		chunk := bytes.Repeat([]byte("x"), 64<<10)
		for range (100 << 20) / len(chunk) {
			if _, err := os.Stdout.Write(chunk); err != nil {
				os.Exit(5)
			}
		}
		fmt.Println(version)
	case "fail":
		fmt.Println(version)
		os.Exit(1)
	default:
		fmt.Println(version)
	}
}
