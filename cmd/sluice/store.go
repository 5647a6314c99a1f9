package main

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-gw/sluice/gateway/config"
	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/store"
)

// openedStore is the state backend assemble wires in.
type openedStore struct {
	st     store.Store             // nil: continuity off
	inputs store.InputSessionStore // nil: streaming-input sessions in memory only
	shared upstream.SharedHealth   // nil: target health stays per replica
	health func() error            // reports nil while the store works, else why not (/readyz, sluice_store_up)
	close  func()
}

// openStore opens the backend store: selects (store.backend): Pebble in
// data_dir, or Redis shared by every replica pointed at it.
func openStore(ctx context.Context, cfg config.Config, logger hclog.Logger) (openedStore, error) {
	if cfg.Continuity.Disabled {
		return openedStore{close: func() {}}, nil
	}
	common := store.Options{AnchorTTL: cfg.Continuity.AnchorTTL.D(), Logger: logger} // the store names its own logger "store"
	closeWith := func(name string, c interface{ Close() error }) func() {
		return func() {
			if err := c.Close(); err != nil {
				logger.Error("closing the store", "backend", name, "error", err)
			}
		}
	}
	if cfg.Store.Backend == "redis" {
		r := cfg.Store.Redis
		rs, err := store.OpenRedis(ctx, store.RedisOptions{URL: r.URL, Username: r.Username, Password: r.Password, KeyPrefix: r.KeyPrefix,
			Timeout: r.Timeout.D(), WaitReplicas: r.WaitReplicas, WaitTimeout: r.WaitTimeout.D(), Options: common,
			TLS: store.RedisTLS{CAFile: r.TLS.CAFile, CertFile: r.TLS.CertFile, KeyFile: r.TLS.KeyFile, ServerName: r.TLS.ServerName}})
		if err != nil {
			return openedStore{}, fmt.Errorf("opening the redis store: %w", err)
		}
		logger.Info("config", "store", "redis", "addr", rs.Addr(), "key_prefix", rs.KeyPrefix(), "wait_replicas", r.WaitReplicas)
		return openedStore{st: rs, inputs: rs, shared: rs, health: rs.Health, close: closeWith("redis", rs)}, nil
	}
	common.Dir = filepath.Join(cfg.DataDir, "store")
	ps, err := store.Open(ctx, common)
	if err != nil {
		return openedStore{}, fmt.Errorf("opening the continuity store in %s: %w", cfg.DataDir, err)
	}
	return openedStore{st: ps, inputs: ps, health: ps.Health, close: closeWith("pebble", ps)}, nil
}

// storeCollectors export the store's health: sluice_store_up (1 while the
// backend answers; Pebble is down from a fatal write error, such as a full
// disk, until it has reopened its database) and, for Redis, the round trip
// of its last health ping.
func storeCollectors(cfg config.Config, o openedStore) []prometheus.Collector {
	if o.st == nil {
		return nil
	}
	backend := cfg.Store.Backend
	up := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_store_up", Help: "1 while the state store answers (0: continuity fails closed, streaming input answers 503).",
		ConstLabels: prometheus.Labels{"backend": backend}}, func() float64 {
		if o.health != nil && o.health() != nil {
			return 0
		}
		return 1
	})
	out := []prometheus.Collector{up}
	if rs, ok := o.st.(*store.RedisStore); ok {
		out = append(out, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_store_ping_seconds",
			Help: "Round trip of the last successful health ping of the state store.", ConstLabels: prometheus.Labels{"backend": backend}},
			func() float64 { return rs.PingLatency().Seconds() }))
	}
	return out
}
