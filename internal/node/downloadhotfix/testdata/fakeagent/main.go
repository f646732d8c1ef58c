// Command fakeagent stands in for a hotfix agent binary in tests: it prints
// its stamped version for "version".
package main

import (
	"fmt"
	"os"
)

var version = "dev"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "version" {
		fmt.Println(version)
		return
	}
	os.Exit(3)
}
