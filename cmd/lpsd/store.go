package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"nodehotfix/internal/store"
	"nodehotfix/internal/store/boltstore"
	"nodehotfix/internal/store/etcdstore"
	"nodehotfix/internal/store/memstore"
)

// defaultStore keeps state in a local bbolt file.
const defaultStore = "bolt:/var/lib/lpsd/lpsd.db"

// openStore opens the backend a --store value names:
//
//	bolt:PATH            a local bbolt file (the default)
//	etcd:HOST:PORT,...   an etcd cluster; every replica watches it
//	mem:                 in memory, lost on exit (tests, demos)
func openStore(ctx context.Context, spec string) (store.Store, error) {
	kind, arg, _ := strings.Cut(spec, ":")
	switch kind {
	case "bolt":
		if arg == "" {
			return nil, fmt.Errorf("--store %q: bolt needs a file path", spec)
		}
		return boltstore.Open(arg)
	case "etcd":
		var endpoints []string
		for _, e := range strings.Split(arg, ",") {
			if e = strings.TrimSpace(e); e != "" {
				endpoints = append(endpoints, e)
			}
		}
		if len(endpoints) == 0 {
			return nil, fmt.Errorf("--store %q: etcd needs host:port endpoints", spec)
		}
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return etcdstore.Open(ctx, endpoints, etcdstore.Config{})
	case "mem":
		return memstore.New(), nil
	}
	return nil, fmt.Errorf("--store %q: want bolt:PATH, mem: or etcd:HOST:PORT[,...]", spec)
}
