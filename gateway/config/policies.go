package config

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sluice-gw/sluice/hostabi"
)

// PolicyLimits bounds the policies' hook calls (policy_limits:; the
// defaults are the plugins runtime's).
type PolicyLimits struct {
	// CallTimeout bounds each hook call; the request's own deadline applies
	// when it comes first.
	CallTimeout Duration `yaml:"call_timeout"`
	// MemoryMiB caps each instance's linear memory.
	MemoryMiB int `yaml:"memory_mib"`
	// FaultsBeforeRollback is how many faults in a row roll a policy back
	// (or trip it when it has no earlier version).
	FaultsBeforeRollback int `yaml:"faults_before_rollback"`
}

// Limits on policy_limits: a hook call runs on a request's path, so a
// minute is already far beyond any useful deadline; 4 GiB is all a 32-bit
// Wasm memory can address.
const (
	maxPolicyCallTimeout = time.Minute
	maxPolicyMemoryMiB   = 4096
)

// MemoryPages is MemoryMiB in 64 KiB Wasm pages.
func (l PolicyLimits) MemoryPages() uint32 { return uint32(l.MemoryMiB) * 16 }

// validatePolicies checks that every policy's config (policies:) can be
// handed to its policy as JSON, which is what the config host function
// gives the guest (hostabi/ABI.md). YAML allows what JSON cannot hold: a
// key that is a number, a boolean or null (2024: note), and the floats
// .inf and .nan. Such a config would be dropped whole when rendered, and
// the policy would run without it, so it is a config error naming where.
func (c *Config) validatePolicies(bad func(key, format string, args ...any)) {
	switch l := c.PolicyLimits; {
	case l.CallTimeout <= 0:
		bad("policy_limits.call_timeout", "must be positive")
	case l.CallTimeout.D() > maxPolicyCallTimeout:
		bad("policy_limits.call_timeout", "must be at most %s", maxPolicyCallTimeout)
	}
	if m := c.PolicyLimits.MemoryMiB; m <= 0 || m > maxPolicyMemoryMiB {
		bad("policy_limits.memory_mib", "must be between 1 and %d", maxPolicyMemoryMiB)
	}
	if c.PolicyLimits.FaultsBeforeRollback <= 0 {
		bad("policy_limits.faults_before_rollback", "must be positive")
	}
	for _, name := range slices.Sorted(maps.Keys(c.Policies)) {
		if path, problem := jsonUnrepresentable(c.Policies[name], "policies."+name); problem != "" {
			bad(path, "%s", problem)
		}
		if v, ok := policyMember(c.Policies[name], FailClosedKey); ok {
			if _, isBool := v.(bool); !isBool {
				bad("policies."+name+"."+FailClosedKey, "must be true or false")
			}
		}
	}
}

// FailClosedKey is the member of a policy's config (policies.NAME) that
// is the gateway's, not the policy's: true holds the policy's rewrite to
// its edits, so that a request it could not rewrite (no instance free in
// time, a fault, tripped, its error result) is refused with a 503
// policy_unavailable instead of going on unrewritten (README "Policies").
// The policy does not get it (PolicyConfigs).
const FailClosedKey = hostabi.FailClosedKey

// FailClosedRewrites names the policies whose config sets FailClosedKey,
// sorted.
func (c *Config) FailClosedRewrites() []string {
	var names []string
	for _, name := range slices.Sorted(maps.Keys(c.Policies)) {
		if v, _ := policyMember(c.Policies[name], FailClosedKey); v == true {
			names = append(names, name)
		}
	}
	return names
}

// PolicyConfigs is each policy's config as the policy gets it: without
// the gateway's own member (FailClosedKey). c.Policies is left as it is.
func (c *Config) PolicyConfigs() map[string]any {
	out := make(map[string]any, len(c.Policies))
	for name, v := range c.Policies {
		switch t := v.(type) {
		case map[string]any:
			if _, ok := t[FailClosedKey]; ok {
				t = maps.Clone(t)
				delete(t, FailClosedKey)
				v = t
			}
		case map[any]any:
			if _, ok := t[FailClosedKey]; ok {
				t = maps.Clone(t)
				delete(t, FailClosedKey)
				v = t
			}
		}
		out[name] = v
	}
	return out
}

// policyMember is the member key of a policy's config when it is a mapping.
func policyMember(cfg any, key string) (any, bool) {
	switch t := cfg.(type) {
	case map[string]any:
		v, ok := t[key]
		return v, ok
	case map[any]any:
		v, ok := t[key]
		return v, ok
	}
	return nil, false
}

// jsonUnrepresentable returns the path of the first value under v (in
// sorted key order) that JSON cannot represent, and why; "" when there is
// none.
func jsonUnrepresentable(v any, path string) (string, string) {
	switch t := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(t)) {
			if p, problem := jsonUnrepresentable(t[k], path+"."+k); problem != "" {
				return p, problem
			}
		}
	case map[any]any:
		keys := make([]string, 0, len(t))
		byKey := make(map[string]any, len(t))
		for k, e := range t {
			s, ok := k.(string)
			if !ok {
				text := fmt.Sprint(k)
				if k == nil {
					text = "null"
				}
				return path + "." + text, fmt.Sprintf("the key %s is a %s; a policy config's keys must be strings (quote it: %q)", text, yamlKind(k), text)
			}
			keys = append(keys, s)
			byKey[s] = e
		}
		slices.Sort(keys)
		for _, k := range keys {
			if p, problem := jsonUnrepresentable(byKey[k], path+"."+k); problem != "" {
				return p, problem
			}
		}
	case []any:
		for i, e := range t {
			if p, problem := jsonUnrepresentable(e, fmt.Sprintf("%s[%d]", path, i)); problem != "" {
				return p, problem
			}
		}
	case float64:
		if math.IsInf(t, 0) || math.IsNaN(t) {
			return path, fmt.Sprintf("%v cannot be handed to a policy (JSON has no infinity or NaN)", t)
		}
	}
	return "", ""
}

// yamlKind names the YAML type of a scalar map key for an error message.
func yamlKind(k any) string {
	switch k.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case int, int64, uint64, float64:
		return "number"
	default:
		return strings.TrimPrefix(fmt.Sprintf("%T", k), "*")
	}
}
