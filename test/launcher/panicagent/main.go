// Command panicagent is a baked agent whose launch panics before
// provisioning, as a bug in launch would: the launcher shim must fall back to
// its provision. provision appends its argv to $FAKE_CALLS and exits
// $FAKE_EXIT_PROVISION (default 0).
package main

import (
	"os"
	"strconv"
	"strings"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "launch" {
		panic("injected: launch failed before provision")
	}
	f, err := os.OpenFile(os.Getenv("FAKE_CALLS"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		os.Exit(99)
	}
	f.WriteString("panicagent " + strings.Join(os.Args[1:], " ") + "\n")
	f.Close()
	code, _ := strconv.Atoi(os.Getenv("FAKE_EXIT_PROVISION"))
	os.Exit(code)
}
