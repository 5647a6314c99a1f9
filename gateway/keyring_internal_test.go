package gateway

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sluice-gw/sluice/store"
)

// memKeyStore is a store.KeyStore in memory. afterRead, when set, runs in
// ListKeys once the keys are read and before they are returned: a test
// holds a reload there, with what it read, while others run.
type memKeyStore struct {
	mu        sync.Mutex
	keys      map[string]store.KeyRecord
	afterRead func()
}

var _ store.KeyStore = (*memKeyStore)(nil)

func newMemKeyStore() *memKeyStore { return &memKeyStore{keys: map[string]store.KeyRecord{}} }

func (m *memKeyStore) CreateKey(_ context.Context, k store.KeyRecord) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.keys[k.Name]; ok {
		return fmt.Errorf("create key %q: %w", k.Name, store.ErrExists)
	}
	m.keys[k.Name] = k
	return nil
}

func (m *memKeyStore) UpdateKey(_ context.Context, k store.KeyRecord) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur, ok := m.keys[k.Name]; !ok || cur.SHA256 != k.SHA256 {
		return fmt.Errorf("update key %q: %w", k.Name, store.ErrNotFound)
	}
	m.keys[k.Name] = k
	return nil
}

func (m *memKeyStore) GetKey(_ context.Context, name string) (store.KeyRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k, ok := m.keys[name]
	if !ok {
		return k, fmt.Errorf("get key %q: %w", name, store.ErrNotFound)
	}
	return k, nil
}

func (m *memKeyStore) DeleteKey(_ context.Context, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.keys[name]; !ok {
		return fmt.Errorf("delete key %q: %w", name, store.ErrNotFound)
	}
	delete(m.keys, name)
	return nil
}

func (m *memKeyStore) ListKeys(context.Context) ([]store.KeyRecord, error) {
	m.mu.Lock()
	out := make([]store.KeyRecord, 0, len(m.keys))
	for _, k := range m.keys {
		out = append(out, k)
	}
	after := m.afterRead
	m.afterRead = nil
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b store.KeyRecord) int { return strings.Compare(a.Name, b.Name) })
	if after != nil {
		after()
	}
	return out, nil
}

// TestKeyringNeverInstallsAnOlderSnapshot: reloads overlap and finish in
// any order. One that read the keys before a delete and finishes after a
// reload that read them after it must not install its keys: the deleted
// key would work again until the next reload.
func TestKeyringNeverInstallsAnOlderSnapshot(t *testing.T) {
	ctx := context.Background()
	st := newMemKeyStore()
	const secret = "sk-sluice-kept-in-a-slow-reload"
	if err := st.CreateKey(ctx, store.KeyRecord{Name: "k", SHA256: HashKey(secret)}); err != nil {
		t.Fatal(err)
	}
	kr, err := newKeyring(nil, st, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	read, release := make(chan struct{}), make(chan struct{})
	st.afterRead = func() { close(read); <-release }
	slow := make(chan error, 1)
	go func() { slow <- kr.reload(ctx) }() // reads k, then waits
	<-read
	if err := st.DeleteKey(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if err := kr.reload(ctx); err != nil { // reads no k, installs
		t.Fatal(err)
	}
	if kr.get("k") != nil {
		t.Fatal("the key is known after a reload that read the keys after its delete")
	}
	close(release)
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	if kr.get("k") != nil {
		t.Fatal("a reload that read the keys before the delete installed them after a later one: the deleted key is back")
	}
	// A reload begun after both still installs.
	if err := st.CreateKey(ctx, store.KeyRecord{Name: "k2", SHA256: HashKey(secret + "2")}); err != nil {
		t.Fatal(err)
	}
	if err := kr.reload(ctx); err != nil || kr.get("k2") == nil {
		t.Fatalf("a later reload did not install its keys: %v", err)
	}
}

// TestKeyringConfigKeyWinsItsSecret: two config keys with one secret are
// refused, naming both; a stored key with a config key's secret (or name)
// is left out and the operator told once, with names only.
func TestKeyringConfigKeyWinsItsSecret(t *testing.T) {
	const secret = "sk-config-secret-0123456789"
	cfg := store.KeyRecord{Name: "from-config", SHA256: HashKey(secret), Models: []string{"gpt-*"}}
	if _, err := newKeyring([]store.KeyRecord{cfg, {Name: "second", SHA256: HashKey(secret)}}, nil, time.Hour); err == nil ||
		err.Error() != `gateway: keys "from-config" and "second" have the same secret` {
		t.Fatalf("two config keys with one secret: %v", err)
	}

	ctx := context.Background()
	st := newMemKeyStore()
	for _, k := range []store.KeyRecord{
		{Name: "copied", SHA256: HashKey(secret), Models: []string{"other-*"}},
		{Name: "from-config", SHA256: HashKey("sk-stored-under-a-config-name")},
		{Name: "own", SHA256: HashKey("sk-stored-own-secret-000000")},
	} {
		if err := st.CreateKey(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	kr, err := newKeyring([]store.KeyRecord{cfg}, st, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	kr.log = hclog.New(&hclog.LoggerOptions{Output: &logs})
	for range 2 {
		if err := kr.reload(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if found, _ := kr.lookup(secret); len(found) != 1 || found[0].name != "from-config" || !found[0].fromConfig || !found[0].allows("gpt-5") {
		t.Fatalf("the config key's secret finds %+v", found)
	}
	if kr.get("copied") != nil || kr.get("own") == nil || !kr.get("from-config").fromConfig {
		t.Fatalf("keys: %+v", kr.list())
	}
	got := logs.String()
	for _, want := range []string{
		"a stored key is ignored: the config has a key with its secret; the config's key applies: stored_key=copied config_key=from-config",
		"a stored key is ignored: the config has a key with its name; the config's key applies: stored_key=from-config config_key=from-config",
	} {
		if strings.Count(got, want) != 1 {
			t.Fatalf("want once %q in the log:\n%s", want, got)
		}
	}
	if strings.Count(got, "\n") != 2 || strings.Contains(got, secret) || strings.Contains(got, HashKey(secret)) {
		t.Fatalf("log:\n%s", got)
	}
}

// TestDeletedKeysLimiterStateIsDropped: a key deleted from the store (by
// this replica or another) and re-created under its name leaves nothing of
// the deleted key in the limiter (its limitKey is never used again), once
// its last request in flight ends; the key that replaced it and a config
// key are kept.
func TestDeletedKeysLimiterStateIsDropped(t *testing.T) {
	ctx := context.Background()
	st := newMemKeyStore()
	lim := &LocalLimiter{}
	kr, err := newKeyring([]store.KeyRecord{{Name: "cfg", SHA256: HashKey("sk-config")}}, st, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	kr.forget = lim.Forget
	limits := store.KeyLimits{RPM: 10, Concurrent: 2}
	admit := func(name string) Admission {
		t.Helper()
		k := kr.get(name)
		if k == nil {
			t.Fatalf("key %q unknown", name)
		}
		adm, lerr := lim.Admit(ctx, k.limitKey, limits, 1)
		if lerr != nil {
			t.Fatalf("admit %s: %s", name, lerr.Message)
		}
		return adm
	}
	entries := func() []string {
		lim.mu.Lock()
		defer lim.mu.Unlock()
		var out []string
		for k := range lim.keys {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	for i, id := range []string{"id1", "id2", "id3"} {
		if err := st.CreateKey(ctx, store.KeyRecord{Name: "k", ID: id, SHA256: HashKey("sk-" + id)}); err != nil {
			t.Fatal(err)
		}
		if err := kr.reload(ctx); err != nil {
			t.Fatal(err)
		}
		admit("cfg").Done(1)
		inFlight := admit("k")
		if i == 2 {
			inFlight.Done(1)
			break
		}
		if err := st.DeleteKey(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		if err := kr.reload(ctx); err != nil {
			t.Fatal(err)
		}
		want := []string{"cfg", "k/" + id}
		if got := entries(); !slices.Equal(got, want) {
			t.Fatalf("deleted with a request in flight: entries %v, want %v (kept until it ends)", got, want)
		}
		inFlight.Done(1)
	}
	if got, want := entries(), []string{"cfg", "k/id3"}; !slices.Equal(got, want) {
		t.Fatalf("after two deletes and re-creates: entries %v, want %v", got, want)
	}
	if err := st.DeleteKey(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if err := kr.reload(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := entries(), []string{"cfg"}; !slices.Equal(got, want) {
		t.Fatalf("deleted with nothing in flight: entries %v, want %v", got, want)
	}
}
