package memstore_test

import (
	"testing"

	"nodehotfix/internal/store"
	"nodehotfix/internal/store/memstore"
	"nodehotfix/internal/store/storetest"
)

func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return memstore.New() })
}

func TestFreeze(t *testing.T) {
	storetest.RunFreeze(t, func(t *testing.T) store.Store { return memstore.New() })
}
