package plugins_test

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/plugins"
	"github.com/sluice-gw/sluice/plugins/policycli"
)

// inCI reports whether CI is set: there the AssemblyScript compiler must be
// reachable (.ci/run installs it), so a missing one fails instead of
// skipping.
func inCI() bool {
	ci := os.Getenv("CI")
	return ci != "" && ci != "0" && ci != "false"
}

// buildAS compiles the AssemblyScript policy in src with `sluice policy
// build` (the pinned compiler: the project's node_modules, $SLUICE_ASC, the
// user cache, else npm installs it there) against the SDK this tree carries
// (sdk/assemblyscript), from a copy of src, and returns the module. It
// skips when node or npm is missing or npm cannot install the compiler,
// except in CI.
func buildAS(t *testing.T, src string) []byte {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			if inCI() {
				t.Fatalf("%s is not installed and CI is set: the AssemblyScript tests must run", tool)
			}
			t.Skipf("%s is not installed: cannot compile %s (the AssemblyScript compiler is unreachable; CI runs this)", tool, src)
		}
	}
	dir := filepath.Join(t.TempDir(), filepath.Base(src))
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		switch first, _, _ := strings.Cut(filepath.ToSlash(rel), "/"); first {
		case policycli.SDKDir, "node_modules", "build": // written fresh / not sources
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dir, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out.wasm")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	if code := policycli.Run(ctx, policycli.Options{}, []string{"build", dir, "-o", out}, &stdout, &stderr); code != 0 {
		if !inCI() && strings.Contains(stdout.String()+stderr.String(), "npm install") {
			t.Skipf("npm could not install the AssemblyScript compiler (registry unreachable?): %s", stderr.String())
		}
		t.Fatalf("policy build %s: exit %d\n%s\n%s", src, code, stdout.String(), stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestASFixturesFromSource compiles the committed AssemblyScript guests
// from their sources with the SDK of this tree: the bytes must be the
// committed ones (the plugins and gateway tests load those without a
// compiler; rebuild with plugins/testdata/build.sh and
// examples/policies/build.sh), and the fresh stream_event fixture redacts
// a delta.
func TestASFixturesFromSource(t *testing.T) {
	for _, c := range []struct{ src, wasm string }{
		{filepath.Join("testdata", "asfixture"), filepath.Join("testdata", "asfixture.wasm")},
		{filepath.Join("..", "examples", "policies", "as-replay"), filepath.Join("..", "examples", "policies", "20-as-replay.wasm")},
	} {
		t.Run(filepath.Base(c.src), func(t *testing.T) {
			fresh := buildAS(t, c.src)
			committed, err := os.ReadFile(c.wasm)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(fresh, committed) {
				t.Fatalf("%s is not what %s compiles to with this SDK (%d bytes, committed %d): rebuild it (plugins/testdata/build.sh, examples/policies/build.sh)",
					c.wasm, c.src, len(fresh), len(committed))
			}
			if filepath.Base(c.src) != "asfixture" {
				return
			}
			ctx := context.Background()
			// CallTimeout: the call waits for the module's first instance no
			// longer than its deadline, and the default is short for a
			// machine busy compiling (or running the race detector).
			rt, err := plugins.New(ctx, plugins.Options{Embedded: map[string][]byte{"as.wasm": fresh}, Logger: hclog.NewNullLogger(), PoolSize: 1,
				CallTimeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer rt.Close(ctx)
			out := rt.StreamEvent(ctx, hostabi.StreamEventInput{Surface: hostabi.SurfaceResponsesStream, Upstream: "u",
				Type: "response.output_text.delta", SequenceNumber: 3, OutputIndex: 0, ContentIndex: 0, Delta: "a secret", HasDelta: true})
			if out.Verdict != hostabi.StreamReplace || out.Delta != "a [redacted]" {
				t.Fatalf("fresh asfixture: %+v", out)
			}
		})
	}
}
