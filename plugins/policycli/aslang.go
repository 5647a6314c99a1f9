package policycli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	sluice "github.com/sluice-gw/sluice"
	"github.com/sluice-gw/sluice/hostabi"
)

// ASCVersion is the AssemblyScript compiler (npm package assemblyscript) that
// `policy new --lang assemblyscript` pins and `policy build` installs into
// the user cache when it finds none. .ci/run pins the same version.
const ASCVersion = "0.28.20"

// Languages of `policy new -lang`.
const (
	LangGo = "go"
	LangAS = "assemblyscript"
)

var (
	asOnce  sync.Once
	asFiles []sdkFile
	asHash  string
)

// embeddedASSDK returns the AssemblyScript SDK carried by the binary
// (sdk/assemblyscript) by path inside it, and its digest.
func embeddedASSDK() ([]sdkFile, string) {
	asOnce.Do(func() {
		const root = "sdk/assemblyscript"
		_ = fs.WalkDir(sluice.ASSDKSource, root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := sluice.ASSDKSource.ReadFile(p)
			if err != nil {
				return err
			}
			asFiles = append(asFiles, sdkFile{strings.TrimPrefix(p, root+"/"), b})
			return nil
		})
		// The contract the SDK implements, for an author with only the
		// binary (the Go SDK carries it as hostabi/ABI.md).
		if abi, err := sluice.SDKSource.ReadFile("hostabi/ABI.md"); err == nil {
			asFiles = append(asFiles, sdkFile{"ABI.md", abi})
		}
		sort.Slice(asFiles, func(i, j int) bool { return asFiles[i].path < asFiles[j].path })
		h := sha256.New()
		for _, f := range asFiles {
			fmt.Fprintf(h, "%s\x00%d\x00", f.path, len(f.data))
			h.Write(f.data)
		}
		asHash = hex.EncodeToString(h.Sum(nil))[:16]
	})
	return asFiles, asHash
}

// writeASSDK writes the AssemblyScript SDK into dir (replacing what an
// earlier write put there) and returns its digest.
func writeASSDK(dir string) (string, error) {
	files, hash := embeddedASSDK()
	return writeSDKFiles(dir, files, fmt.Sprintf("sdk %s\nabi %d\nlang %s\n", hash, hostabi.ABIVersion, LangAS), hash)
}

// isASProject reports whether dir holds an AssemblyScript policy: an
// asconfig.json, or a package.json that depends on assemblyscript.
func isASProject(dir string) bool {
	if fileExists(filepath.Join(dir, "asconfig.json")) {
		return true
	}
	b, err := os.ReadFile(filepath.Join(dir, "package.json"))
	return err == nil && bytes.Contains(b, []byte(`"assemblyscript"`))
}

// ensureASSDK writes DIR/sluice-sdk from the binary when the policy uses it
// (its asconfig.json names it) and it is missing, or when update is set.
func ensureASSDK(dir string, update bool, stdout, stderr io.Writer) error {
	cfg, _ := os.ReadFile(filepath.Join(dir, "asconfig.json"))
	uses := bytes.Contains(cfg, []byte(SDKDir+"/"))
	if !uses {
		if update {
			return errors.New("-update-sdk: asconfig.json does not use ./" + SDKDir)
		}
		return nil
	}
	sdk := filepath.Join(dir, SDKDir)
	_, want := embeddedASSDK()
	have := readStamp(sdk)
	_, statErr := os.Stat(sdk)
	switch {
	case update || os.IsNotExist(statErr):
		if _, err := writeASSDK(sdk); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s (assemblyscript sdk %s, ABI %d)\n", sdk, want, hostabi.ABIVersion)
	case have != want:
		fmt.Fprintf(stderr, "note: %s is sdk %q, this sluice carries assemblyscript sdk %s (ABI %d); -update-sdk rewrites it\n", sdk, have, want, hostabi.ABIVersion)
	}
	return nil
}

// ascCacheDir is where `policy build` installs the pinned compiler:
// $XDG_CACHE_HOME/sluice-npm/assemblyscript-VERSION (else ~/.cache/…), the
// directory .ci/run uses too.
func ascCacheDir() string {
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "sluice-npm", "assemblyscript-"+ASCVersion)
}

// errNoNode is returned when an AssemblyScript build cannot run.
var errNoNode = errors.New("the AssemblyScript compiler needs Node.js: install node and npm (e.g. apt-get install -y nodejs npm), then run sluice policy build again")

// findASC returns the asc to run for the policy in dir: the policy's own
// node_modules, $SLUICE_ASC, the pinned copy in the user cache, or (when npm
// is installed) the pinned version installed there now.
func findASC(ctx context.Context, dir string, stdout, stderr io.Writer) (string, error) {
	if _, err := exec.LookPath("node"); err != nil {
		return "", errNoNode
	}
	if p := filepath.Join(dir, "node_modules", ".bin", "asc"); fileExists(p) {
		return p, nil
	}
	if p := os.Getenv("SLUICE_ASC"); p != "" {
		return p, nil
	}
	cache := ascCacheDir()
	if cache == "" {
		return "", errors.New("no user cache dir (HOME) to install the AssemblyScript compiler into: run npm install in " + dir)
	}
	asc := filepath.Join(cache, "node_modules", ".bin", "asc")
	if fileExists(asc) {
		return asc, nil
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", errNoNode
	}
	fmt.Fprintf(stdout, "installing assemblyscript@%s into %s (npm, once)\n", ASCVersion, cache)
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	// A package.json of its own, or npm would install into a parent project.
	if !fileExists(filepath.Join(cache, "package.json")) {
		if err := os.WriteFile(filepath.Join(cache, "package.json"), []byte(`{"private": true}`+"\n"), 0o644); err != nil {
			return "", err
		}
	}
	ictx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ictx, npm, "install", "--no-audit", "--no-fund", "--silent", "assemblyscript@"+ASCVersion)
	cmd.Dir = cache
	if out, err := cmd.CombinedOutput(); err != nil {
		stderr.Write(out)
		return "", fmt.Errorf("npm install assemblyscript@%s (is the npm registry reachable?): %w", ASCVersion, err)
	}
	if !fileExists(asc) {
		return "", fmt.Errorf("npm installed assemblyscript@%s but %s is missing", ASCVersion, asc)
	}
	return asc, nil
}

// buildAS compiles the AssemblyScript policy in dir to out.
func buildAS(ctx context.Context, dir, out string, stdout, stderr io.Writer) error {
	asc, err := findASC(ctx, dir, stdout, stderr)
	if err != nil {
		return err
	}
	entry := filepath.Join("assembly", "index.ts")
	if !fileExists(filepath.Join(dir, entry)) {
		return fmt.Errorf("%s: no %s (the policy's entry file)", dir, entry)
	}
	args := []string{entry, "-o", out}
	if fileExists(filepath.Join(dir, "asconfig.json")) {
		args = append(args, "--config", "asconfig.json")
	}
	cmd := exec.CommandContext(ctx, asc, args...)
	cmd.Dir = dir
	msg, err := cmd.CombinedOutput()
	stderr.Write(msg)
	if err != nil {
		return fmt.Errorf("asc: %w", err)
	}
	return nil
}

// newAS writes an AssemblyScript policy into dir (which must not exist).
func newAS(name, dir string, stdout io.Writer) error {
	if err := os.MkdirAll(filepath.Join(dir, "assembly"), 0o755); err != nil {
		return err
	}
	data := scaffold{Name: name}
	files := map[string]scaffoldText{
		"package.json":      asPackageTmpl,
		"asconfig.json":     asConfigTmpl,
		".gitignore":        asIgnoreTmpl,
		"assembly/index.ts": asMainTmpl,
	}
	for fname, tmpl := range files {
		if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(fname)), tmpl.render(data), 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "created %s (AssemblyScript)\n", dir)
	hash, err := writeASSDK(filepath.Join(dir, SDKDir))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s (assemblyscript sdk %s, ABI %d)\n", filepath.Join(dir, SDKDir), hash, hostabi.ABIVersion)
	fmt.Fprintf(stdout, "next:\n  sluice policy build %s   (needs node and npm: assemblyscript@%s is installed into the user cache once)\n", dir, ASCVersion)
	return nil
}

var asPackageTmpl = scaffoldText(`{
  "name": "{{.Name}}",
  "private": true,
  "scripts": {
    "build": "sluice policy build ."
  },
  "devDependencies": {
    "assemblyscript": "` + ASCVersion + `"
  }
}
`)

var asConfigTmpl = scaffoldText(`{
  "extends": "./` + SDKDir + `/asconfig.json",
  "entries": ["assembly/index.ts"],
  "options": {
    "outFile": "build/policy.wasm",
    "use": ["abort=` + SDKDir + `/assembly/index/sluiceAbort"]
  }
}
`)

var asIgnoreTmpl = scaffoldText(SDKDir + "/\nnode_modules/\nbuild/\n")

var asMainTmpl = scaffoldText(`// {{.Name}}: a Sluice policy in AssemblyScript (the SDK: ` + SDKDir + `/README.md;
// the ABI: ` + SDKDir + `/ABI.md).
//
// Build:  sluice policy build .
// Deploy: copy {{.Name}}.wasm into the gateway's policy_dir; it is picked up
// without a restart. Files are asked in name order: call it e.g.
// 10-{{.Name}}.wasm to be asked before the embedded defaults.
import {
  Policy,
  RecoverInput,
  RecoverOutput,
  RecoverVerdict,
  register,
  ReplayInput,
  ReplayOutput,
  ReplayVerdict,
  replaceDelta,
  StreamEvent,
  StreamEventOutput,
} from "../` + SDKDir + `/assembly/index";
export * from "../` + SDKDir + `/assembly/exports";

// Recover: is this upstream error recoverable? This example recovers a
// vendor-specific code and defers everything else (null) to the next policy
// and finally the built-in default.
function recover(in_: RecoverInput): RecoverOutput | null {
  if (in_.code == "vendor_context_lost") return new RecoverOutput(RecoverVerdict.Recover);
  return null;
}

// Replay: may a failed attempt be tried again? This example sends a vendor's
// own overload code to the next target with a 10 s cooldown on this one.
function replay(in_: ReplayInput): ReplayOutput | null {
  if (in_.code == "vendor_overloaded" && in_.hasNextTarget) return new ReplayOutput(ReplayVerdict.OtherUpstream, 10000);
  return null;
}

// StreamEvent (optional, hostabi/ABI.md §3.5) sees each text delta of a
// Responses stream just before the client does and may pass it (null),
// drop it (dropEvent()) or replace it (replaceDelta, replaceText). It is
// called once per event, so it is not registered below: a policy without it
// costs streams nothing. Uncomment "p.streamEvent = streamEvent" to redact
// a word (a word split across two deltas is not seen whole).
function streamEvent(ev: StreamEvent): StreamEventOutput | null {
  if (ev.type != "response.output_text.delta" || !ev.delta.includes("secret")) return null;
  return replaceDelta(ev.delta.replaceAll("secret", "[redacted]"));
}

// SelfTest runs before the gateway swaps this policy in.
function selfTest(): bool {
  const in_ = new RecoverInput();
  in_.code = "vendor_context_lost";
  const out = recover(in_);
  return out != null && out.verdict == RecoverVerdict.Recover;
}

const p = new Policy();
p.recover = recover;
p.replay = replay;
p.selfTest = selfTest;
// p.streamEvent = streamEvent;
register(p);
`)
