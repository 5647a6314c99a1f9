// Command rewrite is Sluice's default request rewrite, embedded as
// rewrite.wasm. Without configuration it changes nothing. Its config:
//
//	{
//	  "model_aliases":    {"fast": "gpt-5-mini", "gpt-4": "gpt-4.1"},
//	  "strip_tool_types": ["web_search_preview", "web_search"]
//	}
//
// model_aliases renames the top-level model; strip_tool_types drops every
// entry of the top-level tools array whose type is listed (and resets a
// tool_choice that named a dropped type to "auto"). The body stays in the
// host: the policy only reads the model and edits by path.
package main

import (
	"errors"
	"fmt"

	"github.com/sluice-gw/sluice/sdk"
)

func init() {
	sdk.Register(sdk.Policy{Rewrite: rewrite, SelfTest: selfTest, Active: configured})
}

// configured reports whether the config asks for any edit; without one the
// gateway never calls this policy.
func configured() bool {
	cfg := sdk.Config()
	_, aliases := sdk.Lookup(cfg, "model_aliases")
	_, strip := sdk.Lookup(cfg, "strip_tool_types")
	return aliases || strip
}

func rewrite(req *sdk.Request) error {
	cfg := req.Config()
	if cfg == "" {
		return nil
	}
	// One pass over the config (every lookup costs loop iterations, which
	// are what a guest pays for under the host's interrupt checks).
	var aliases, strip string
	sdk.EachMember(cfg, func(k, v string) bool {
		switch k {
		case "model_aliases":
			aliases = v
		case "strip_tool_types":
			strip = v
		}
		return true
	})
	if model := req.Model(); model != "" && aliases != "" {
		if target, ok := sdk.LookupString(aliases, sdk.EscapeKey(model)); ok && target != "" && target != model {
			if err := req.SetString("model", target); err != nil {
				return err
			}
		}
	}
	if strip == "" {
		return nil
	}
	choice, hasChoice := req.GetString("tool_choice.type")
	var err error
	sdk.EachElement(strip, func(_ int, elem string) bool {
		typ, ok := sdk.Unquote(elem)
		if !ok || typ == "" {
			return true
		}
		q := "tools.#(type==" + elem + ")"
		for {
			// Not found (or no tools array): nothing (more) to strip.
			if removed, derr := req.Delete(q); derr != nil || !removed {
				break
			}
		}
		if hasChoice && choice == typ {
			if serr := req.SetString("tool_choice", "auto"); serr != nil {
				err = serr
				return false
			}
			hasChoice = false
		}
		return true
	})
	return err
}

// selfTest checks that the policy's config, if any, has the documented shape.
func selfTest() error {
	cfg := sdk.Config()
	if cfg == "" {
		return nil
	}
	// A misspelt key would leave the edit it meant silently off: refused,
	// as the gateway refuses an unknown key in its own config.
	unknown := ""
	if !sdk.EachMember(cfg, func(k, _ string) bool {
		if k != "model_aliases" && k != "strip_tool_types" && unknown == "" {
			unknown = k
		}
		return true
	}) {
		return errors.New("config is not a JSON object")
	}
	if unknown != "" {
		return fmt.Errorf("unknown key %q: the keys are model_aliases and strip_tool_types", unknown)
	}
	if m, ok := sdk.Lookup(cfg, "model_aliases"); ok {
		bad := false
		if !sdk.EachMember(m, func(_, v string) bool { _, ok := sdk.Unquote(v); bad = bad || !ok; return true }) || bad {
			return errors.New("model_aliases must map strings to strings")
		}
	}
	if s, ok := sdk.Lookup(cfg, "strip_tool_types"); ok {
		bad := false
		if !sdk.EachElement(s, func(_ int, v string) bool { _, ok := sdk.Unquote(v); bad = bad || !ok; return true }) || bad {
			return errors.New("strip_tool_types must be an array of strings")
		}
	}
	return nil
}

func main() {}
