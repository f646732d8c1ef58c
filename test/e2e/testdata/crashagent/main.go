// Command crashagent is a hotfix agent whose provision panics before the
// bootstrap starts, as a broken hotfix would: `version` reports its stamped
// version, so it verifies and stages like any release, and launch must fall
// back to the baked agent in the same boot.
package main

import (
	"fmt"
	"os"
)

// version is stamped at link time, as the real agent's is.
var version = "dev"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "version" {
		fmt.Println(version)
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "provision" {
		panic("injected: hotfix provision crashed before the bootstrap")
	}
	os.Exit(2)
}
