package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"path"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/julienschmidt/httprouter"
	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway/config"
	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/sluice-gw/sluice/store"
)

// The admin keys API (admin token required when one is set):
//
//	POST   /admin/keys         {"name","models","limits"} → 201 {"name","key",…}: the secret, shown once
//	GET    /admin/keys         every key: name, models, limits, source (config|store), created_at
//	PATCH  /admin/keys/{name}  {"models"?, "limits"?} → the key (limits merge field by field)
//	DELETE /admin/keys/{name}  → 204
//
// Keys from the config are listed but cannot be changed here (409); a
// DELETE of a config key's name removes a stored key of that name, which
// the config's hides (deleteHiddenKey).

var keyNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

type keyView struct {
	Name      string          `json:"name"`
	Key       string          `json:"key,omitempty"` // only in the answer to POST
	Models    []string        `json:"models"`
	Limits    store.KeyLimits `json:"limits"`
	Source    string          `json:"source"`
	CreatedAt *time.Time      `json:"created_at,omitempty"`
}

func viewOf(e *keyEntry) keyView {
	v := keyView{Name: e.name, Models: e.models, Limits: e.limits, Source: "store"}
	if v.Models == nil {
		v.Models = []string{}
	}
	if e.fromConfig {
		v.Source = "config"
	} else if !e.created.IsZero() {
		c := e.created
		v.CreatedAt = &c
	}
	return v
}

func (s *Server) mountAdminKeys(r *httprouter.Router) {
	r.GET("/admin/keys", s.admin(s.handleListKeys))
	r.POST("/admin/keys", s.admin(s.handleCreateKey))
	r.PATCH("/admin/keys/:name", s.admin(s.handlePatchKey))
	r.DELETE("/admin/keys/:name", s.admin(s.handleDeleteKey))
	r.GET("/admin/usage", s.admin(usageQueryChecked(s.handleUsage)))
}

// usageQueryChecked refuses a GET /admin/usage whose query string
// handleUsage would read otherwise than its caller meant: a parameter
// given twice (handleUsage reads the first: ?key=u1&key=u2 would answer
// for u1 alone), one it does not take (a misspelt ?form= would answer for
// today), or a query string that does not parse (url.ParseQuery drops the
// pair it cannot read). Each is a 400 invalid_value naming the parameter,
// as a repeated member of an admin body is refused.
func usageQueryChecked(h httprouter.Handle) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
		q, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			apierr.Invalid("", apierr.CodeInvalidValue, "the query string cannot be parsed: %s", label(err.Error())).Write(w)
			return
		}
		names := slices.Sorted(maps.Keys(q)) // the answer names the same one whichever order they came in
		for _, name := range names {
			if !usageParam(name) {
				apierr.Invalid(label(name), apierr.CodeInvalidValue, "unknown query parameter %q: /admin/usage takes key, from, to and anonymous", label(name)).Write(w)
				return
			}
		}
		for _, name := range names {
			if n := len(q[name]); n > 1 {
				apierr.Invalid(name, apierr.CodeInvalidValue, "%s is given %d times: give it once", name, n).Write(w)
				return
			}
		}
		h(w, r, ps)
	}
}

// usageParam reports whether name is a query parameter of GET /admin/usage
// (handleUsage; README "Usage").
func usageParam(name string) bool {
	switch name {
	case "key", "from", "to", "anonymous":
		return true
	}
	return false
}

func (s *Server) handleListKeys(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	_ = s.acct.keys.reload(r.Context())
	out := []keyView{}
	for _, e := range s.acct.keys.list() {
		out = append(out, viewOf(e))
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": out})
}

// keyPatch is the body of POST and PATCH.
type keyPatch struct {
	Name   string           `json:"name"`
	Models *[]string        `json:"models"`
	Limits *store.KeyLimits `json:"limits"`
}

// readKeyPatch decodes the body of POST or PATCH onto p: a PATCH passes the
// key's current limits in p.Limits, so that the limits named in the body
// change and the others stay (a JSON merge: {"limits":{"tpm":0}} lifts only
// the tpm limit). A repeated key, trailing data, an unknown field or a value
// of the wrong type is refused, naming the field.
func (s *Server) readKeyPatch(w http.ResponseWriter, r *http.Request, p *keyPatch) bool {
	body, aerr := s.readBodyUpTo(w, r, maxAdminBody) // within read_body, as every body
	if aerr != nil && aerr.Code == apierr.CodePayloadTooLarge {
		aerr.Param = "" // a key's body has no input: the whole body is too large
	}
	if aerr == nil {
		// Its depth is checked before any recursive parser sees it, as for
		// every JSON document the gateway reads (SECURITY.md "Limits").
		aerr = validJSON(r.Context(), body, s.opts.MaxJSONDepth, "the body")
	}
	switch {
	case aerr != nil && aerr.Code != apierr.CodeInvalidJSON:
		aerr.Write(w)
		return false
	case aerr != nil || !gjson.ParseBytes(body).IsObject():
		apierr.Invalid("", apierr.CodeInvalidJSON, `the body must be one JSON object {"name","models","limits"}`).Write(w)
		return false
	}
	root := gjson.ParseBytes(body)
	for _, param := range []string{repeatedKey(root, ""), repeatedKey(root.Get("limits"), "limits.")} {
		if param != "" {
			apierr.Invalid(param, apierr.CodeDuplicateKey, "%s is given twice", param).Write(w)
			return false
		}
	}
	// encoding/json matches a field's name in any case; the config does
	// not, and neither does this API: "Rpm" is an unknown field.
	for _, param := range []string{miscasedField(root, "", keyPatch{}), miscasedField(root.Get("limits"), "limits.", store.KeyLimits{})} {
		if param != "" {
			apierr.Invalid(param, apierr.CodeInvalidJSON, "unknown field %q", param).Write(w)
			return false
		}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(p); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			field := te.Field
			if field == "models" { // encoding/json does not say which element: name it
				for i, m := range root.Get("models").Array() {
					if m.Type != gjson.String {
						field = fmt.Sprintf("models[%d]", i)
						break
					}
				}
			}
			apierr.Invalid(field, apierr.CodeInvalidType, "%s must be %s, got a JSON %s", field, goKindInJSON(te.Type), te.Value).Write(w)
		} else {
			msg := strings.TrimPrefix(err.Error(), "json: ")
			if name, ok := strings.CutPrefix(msg, `unknown field "`); ok { // encoding/json names no other field
				param := strings.TrimSuffix(name, `"`)
				root.Get("limits").ForEach(func(k, _ gjson.Result) bool {
					if k.Str == param { // an unknown limit: name it by its path
						param = "limits." + param
						return false
					}
					return true
				})
				apierr.Invalid(param, apierr.CodeInvalidJSON, "%s", msg).Write(w)
				return false
			}
			apierr.Invalid("", apierr.CodeInvalidJSON, "%s", msg).Write(w)
		}
		return false
	}
	// encoding/json takes null as "leave it": a PATCH would answer 200 and
	// change nothing where the client may have meant "lift it", and
	// {"models":[null]} would be judged as the pattern "". Refused instead,
	// saying what lifts the limit or the model list (README).
	if param, msg := nullField(root); param != "" {
		apierr.Invalid(param, apierr.CodeInvalidType, "%s", msg).Write(w)
		return false
	}
	if p.Models != nil {
		for i, m := range *p.Models {
			if _, err := path.Match(m, ""); err != nil || strings.TrimSpace(m) == "" {
				apierr.Invalid(fmt.Sprintf("models[%d]", i), "invalid_pattern", "%q is not a model pattern", m).Write(w)
				return false
			}
		}
	}
	if p.Limits != nil {
		if problems := config.KeyLimits(*p.Limits).Problems(); len(problems) > 0 {
			param := "limits." + problems[0].Field
			apierr.Invalid(param, apierr.CodeInvalidLimit, "%s %s", param, problems[0].Problem).Write(w)
			return false
		}
	}
	return true
}

// nullField is the first field of a POST or PATCH body (already decoded:
// every field known) that is JSON null, with the message refusing it; ""
// when none is.
func nullField(root gjson.Result) (param, msg string) {
	root.ForEach(func(k, v gjson.Result) bool {
		switch {
		case v.Type == gjson.Null && k.Str == "models":
			param, msg = "models", "models must be an array of model patterns, got a JSON null; [] allows every model"
		case v.Type == gjson.Null && k.Str == "limits":
			param, msg = "limits", `limits must be an object, got a JSON null; a limit is lifted by setting it to 0 ({"limits":{"rpm":0}})`
		case v.Type == gjson.Null && k.Str == "name":
			param, msg = "name", "name must be a string, got a JSON null"
		case v.Type == gjson.Null:
			param, msg = k.Str, k.Str+" must not be null"
		case k.Str == "models" && v.IsArray():
			for i, m := range v.Array() {
				if m.Type == gjson.Null {
					param = fmt.Sprintf("models[%d]", i)
					msg = param + " must be a string, got a JSON null"
					break
				}
			}
		case k.Str == "limits" && v.IsObject():
			v.ForEach(func(limit, lv gjson.Result) bool {
				if lv.Type == gjson.Null {
					param = "limits." + limit.Str
					msg = param + " must be an integer, got a JSON null; 0 lifts the limit"
				}
				return param == ""
			})
		}
		return param == ""
	})
	return param, msg
}

// maxAdminBody bounds an admin API body.
const maxAdminBody = 1 << 20

// repeatedKey is prefix plus the first key obj has twice, or "". Keys
// that differ only in case count as one: encoding/json matches a field's
// name without regard to case, so {"rpm":5,"RPM":0} sets one field twice.
func repeatedKey(obj gjson.Result, prefix string) string {
	if !obj.IsObject() {
		return ""
	}
	var seen keySet
	dup := ""
	obj.ForEach(func(key, _ gjson.Result) bool {
		if !seen.add(strings.ToLower(key.Str)) {
			dup = prefix + key.Str
			return false
		}
		return true
	})
	return dup
}

// miscasedField is prefix plus the first key of obj that names a field of
// the struct v only in another case (its json tag spelled otherwise), or "".
func miscasedField(obj gjson.Result, prefix string, v any) string {
	if !obj.IsObject() {
		return ""
	}
	t := reflect.TypeOf(v)
	exact := make(map[string]bool, t.NumField())
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		exact[name] = true
	}
	bad := ""
	obj.ForEach(func(key, _ gjson.Result) bool {
		if !exact[key.Str] {
			for name := range exact {
				if strings.EqualFold(key.Str, name) {
					bad = prefix + key.Str
					return false
				}
			}
		}
		return true
	})
	return bad
}

// goKindInJSON names the JSON a Go field of type t takes.
func goKindInJSON(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Bool:
		return "a boolean"
	}
	return "an object"
}

func (s *Server) keyStoreOrFail(w http.ResponseWriter) store.KeyStore {
	if s.acct.opts.KeyStore == nil {
		(&apierr.Error{Status: http.StatusNotImplemented, Type: apierr.TypeInvalidRequest, Code: apierr.CodeKeysNotStored,
			Message: "keys cannot be managed at run time: the gateway has no store (continuity.disabled)"}).Write(w)
	}
	return s.acct.opts.KeyStore
}

func (s *Server) handleCreateKey(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	st := s.keyStoreOrFail(w)
	if st == nil {
		return
	}
	var p keyPatch
	if !s.readKeyPatch(w, r, &p) {
		return
	}
	if !keyNameRE.MatchString(p.Name) {
		apierr.Invalid("name", apierr.CodeInvalidName, "name must be letters, digits, . _ - (at most 64), starting with a letter or digit").Write(w)
		return
	}
	if e := s.acct.keys.get(p.Name); e != nil && e.fromConfig {
		keyConflict(w, p.Name, "is defined in the config")
		return
	}
	secret := newSecret()
	rec := store.KeyRecord{Name: p.Name, SHA256: HashKey(secret), ID: newKeyID(), CreatedAt: time.Now().UTC().Truncate(time.Second)}
	if p.Models != nil {
		rec.Models = *p.Models
	}
	if p.Limits != nil {
		rec.Limits = *p.Limits
	}
	if err := st.CreateKey(r.Context(), rec); err != nil {
		if errors.Is(err, store.ErrExists) {
			keyConflict(w, p.Name, "exists")
			return
		}
		s.storeFailed(w, err)
		return
	}
	_ = s.acct.keys.reload(context.WithoutCancel(r.Context()))
	s.log.Info("key created", "key", p.Name)
	v := viewOf(&keyEntry{name: rec.Name, models: rec.Models, limits: rec.Limits, created: rec.CreatedAt})
	v.Key = secret
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, v)
}

func (s *Server) handlePatchKey(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
	st := s.keyStoreOrFail(w)
	if st == nil {
		return
	}
	name := ps.ByName("name")
	if e := s.acct.keys.get(name); e != nil && e.fromConfig {
		keyConflict(w, name, "is defined in the config; change it there")
		return
	}
	rec, err := st.GetKey(r.Context(), name)
	if err != nil {
		s.keyLookupFailed(w, name, err)
		return
	}
	limits := rec.Limits
	p := keyPatch{Limits: &limits}
	if !s.readKeyPatch(w, r, &p) {
		return
	}
	if p.Name != "" && p.Name != name {
		apierr.Invalid("name", apierr.CodeInvalidValue, "a key cannot be renamed (the body names %q, the path %q)", p.Name, name).Write(w)
		return
	}
	if p.Models != nil {
		rec.Models = *p.Models
	}
	if p.Limits != nil {
		rec.Limits = *p.Limits
	}
	// Conditional: a key deleted since GetKey (or deleted and created again
	// with another secret) is a 404, not brought back by this write.
	if err := st.UpdateKey(r.Context(), rec); err != nil {
		s.keyLookupFailed(w, name, err)
		return
	}
	_ = s.acct.keys.reload(context.WithoutCancel(r.Context()))
	s.log.Info("key changed", "key", name)
	writeJSON(w, http.StatusOK, viewOf(&keyEntry{name: rec.Name, models: rec.Models, limits: rec.Limits, created: rec.CreatedAt}))
}

func (s *Server) handleDeleteKey(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
	st := s.keyStoreOrFail(w)
	if st == nil {
		return
	}
	name := ps.ByName("name")
	if e := s.acct.keys.get(name); e != nil && e.fromConfig {
		s.deleteHiddenKey(w, r, st, name)
		return
	}
	if err := st.DeleteKey(r.Context(), name); err != nil {
		s.keyLookupFailed(w, name, err)
		return
	}
	_ = s.acct.keys.reload(context.WithoutCancel(r.Context()))
	s.log.Info("key deleted", "key", name)
	w.WriteHeader(http.StatusNoContent)
}

// deleteHiddenKey serves DELETE /admin/keys/{name} for a name the config
// has. A stored key under that name is ignored while the config has it
// (README "Keys at run time"), but would be served again, its old secret
// with it, once the config entry is removed: it is deleted here, and the
// answer says so and that the config's key, which only the config
// changes, still applies. With no stored key of the name, the config's key
// is all there is: 409, as for a PATCH.
func (s *Server) deleteHiddenKey(w http.ResponseWriter, r *http.Request, st store.KeyStore, name string) {
	if err := st.DeleteKey(r.Context(), name); err != nil {
		if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrInvalid) {
			keyConflict(w, name, "is defined in the config; remove it there")
			return
		}
		s.storeFailed(w, err)
		return
	}
	s.log.Info("a stored key hidden by the config's key of its name was deleted", "key", name)
	writeJSON(w, http.StatusOK, map[string]any{"name": name, "deleted": true, "source": "store",
		"message": fmt.Sprintf("the stored key %q, ignored while the config has a key of that name, was deleted; the config's key %q still applies, unchanged", name, name)})
}

func keyConflict(w http.ResponseWriter, name, why string) {
	(&apierr.Error{Status: http.StatusConflict, Type: apierr.TypeInvalidRequest, Code: apierr.CodeKeyConflict, Param: "name",
		Message: fmt.Sprintf("the key %q %s", name, why)}).Write(w)
}

func (s *Server) keyLookupFailed(w http.ResponseWriter, name string, err error) {
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrInvalid) {
		(&apierr.Error{Status: http.StatusNotFound, Type: apierr.TypeInvalidRequest, Code: apierr.CodeNotFound,
			Message: fmt.Sprintf("no key named %q", name)}).Write(w)
		return
	}
	s.storeFailed(w, err)
}

// storeFailed answers a key store failure: the gateway's own store, so
// store_unavailable, as streaming input answers for it, with the
// Retry-After the key gate's 503 gives in the same outage
// (apierr.StoreUnavailable's rule, README "Scale-out with Redis"). The
// store's error (its address, the dial error) stays in the log
// (SECURITY.md).
func (s *Server) storeFailed(w http.ResponseWriter, err error) {
	s.log.Error("the key store failed", "error", err)
	apierr.StoreUnavailable(apierr.CodeStoreUnavailable, store.ClientRetryAfter(err), "the key store could not be reached (see the gateway log)").Write(w)
}

// newKeyID is a new key's id (store.KeyRecord.ID): random, so that a key
// created under the name of a deleted one, even within the same second,
// has limits and budgets of its own (limitKey).
func newKeyID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newSecret is a new key: "sk-sluice-" and 32 random bytes, base64url.
func newSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return sluiceKeyPrefix + base64.RawURLEncoding.EncodeToString(b)
}
