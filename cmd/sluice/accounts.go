package main

import (
	"strings"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/config"
	"github.com/sluice-gw/sluice/store"
)

// accountsOptions maps auth:, keys: and pricing: onto the gateway's options.
// A key given in clear (key: ${VAR}) is hashed here and not kept. Keys
// created at run time and the per-day usage totals live in st when it
// offers them (nil: config keys only, usage in metrics only).
func accountsOptions(cfg config.Config, st store.Store) gateway.AccountsOptions {
	o := gateway.AccountsOptions{Required: cfg.Auth.Required}
	for _, k := range cfg.Keys {
		sum := strings.ToLower(strings.TrimSpace(k.KeySHA256))
		if k.Key != "" {
			sum = gateway.HashKey(k.Key)
		}
		o.Keys = append(o.Keys, store.KeyRecord{Name: k.Name, SHA256: sum, Models: k.Models, Limits: store.KeyLimits{
			RPM: k.Limits.RPM, TPM: k.Limits.TPM, Concurrent: k.Limits.Concurrent,
			TokensPerDay: k.Limits.TokensPerDay, TokensPerMonth: k.Limits.TokensPerMonth}})
	}
	if ks, ok := st.(store.KeyStore); ok {
		o.KeyStore = ks
	}
	if us, ok := st.(store.UsageStore); ok {
		o.Usage = us
	}
	if rs, ok := st.(*store.RedisStore); ok { // limits shared by the replicas (fail open to local limits while Redis is down)
		o.Limiter = &gateway.RedisLimiter{Store: rs}
	}
	if len(cfg.Pricing) > 0 {
		o.Pricing = map[string]gateway.Price{}
		for m, p := range cfg.Pricing {
			o.Pricing[m] = gateway.Price{Input: p.Input, Output: p.Output, CachedInput: p.CachedInputPrice()}
		}
	}
	return o
}
