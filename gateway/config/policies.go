package config

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
)

// validatePolicies checks that every policy's config (policies:) can be
// handed to its policy as JSON, which is what the config host function
// gives the guest (hostabi/ABI.md). YAML allows what JSON cannot hold: a
// key that is a number, a boolean or null (2024: note), and the floats
// .inf and .nan. Such a config would be dropped whole when rendered, and
// the policy would run without it, so it is a config error naming where.
func (c *Config) validatePolicies(bad func(key, format string, args ...any)) {
	for _, name := range slices.Sorted(maps.Keys(c.Policies)) {
		if path, problem := jsonUnrepresentable(c.Policies[name], "policies."+name); problem != "" {
			bad(path, "%s", problem)
		}
	}
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
