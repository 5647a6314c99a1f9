// Command mutants is a coverage-guided mutation tester for packages whose
// tests are too slow to run whole once per mutant (gateway/: 80–120 s).
//
// It makes the same mutants as gremlins v0.6.0 with its default types
// (ARITHMETIC_BASE, CONDITIONALS_BOUNDARY, CONDITIONALS_NEGATION,
// INCREMENT_DECREMENT, INVERT_NEGATIVES) and judges them as gremlins does,
// by the mutant's own package's tests, with one difference: a mutant runs
// only the tests that executed its line. It first runs every test of each
// package alone with coverage on, to learn which tests reach which blocks.
// A test that never executes a line cannot see it changed, so the verdict is
// the one a whole run would give, for a fraction of the time (README,
// "Mutation testing").
//
// The mutated file is never written into the tree: each mutant is built
// with `go test -c -overlay`, so runs can proceed in parallel and the
// checkout stays clean.
//
// Usage:
//
//	go run ./scripts/mutants [-sample N -seed S] [-skip FILE] [-match RE] [-workers W] [-coverage FILE] [-out FILE] [-dry] PKG...
//
// Without -sample every covered mutant runs. -match keeps mutants whose
// "file:line:col" matches RE. -skip names a file of earlier results whose
// mutants are left out of the draw (so a second sample measures tests
// written for the first). The results are printed one per line and, with
// -out, written as JSON lines.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A mutant is one operator replaced at one position.
type mutant struct {
	Pkg    string `json:"pkg"`  // import path
	File   string `json:"file"` // path relative to the module root
	Line   int    `json:"line"`
	Col    int    `json:"col"`
	Type   string `json:"type"`
	From   string `json:"from"`
	To     string `json:"to"`
	Status string `json:"status"`           // KILLED, LIVED, TIMED OUT, NOT VIABLE, NOT COVERED
	Killer string `json:"killer,omitempty"` // the first failing test
	Tests  int    `json:"tests"`            // how many tests reached the line

	abs    string // absolute file path
	offset int    // byte offset of the operator
}

func (m *mutant) key() string { return fmt.Sprintf("%s:%d:%d %s", m.File, m.Line, m.Col, m.Type) }

// kinds maps an operator to the gremlins default types that replace it, in
// gremlins' order, and their replacements.
var kinds = map[token.Token][][2]string{
	token.ADD: {{"ARITHMETIC_BASE", "-"}},
	token.SUB: {{"ARITHMETIC_BASE", "+"}},
	token.MUL: {{"ARITHMETIC_BASE", "/"}},
	token.QUO: {{"ARITHMETIC_BASE", "*"}},
	token.REM: {{"ARITHMETIC_BASE", "*"}},
	token.GEQ: {{"CONDITIONALS_BOUNDARY", ">"}, {"CONDITIONALS_NEGATION", "<"}},
	token.GTR: {{"CONDITIONALS_BOUNDARY", ">="}, {"CONDITIONALS_NEGATION", "<="}},
	token.LEQ: {{"CONDITIONALS_BOUNDARY", "<"}, {"CONDITIONALS_NEGATION", ">"}},
	token.LSS: {{"CONDITIONALS_BOUNDARY", "<="}, {"CONDITIONALS_NEGATION", ">="}},
	token.EQL: {{"CONDITIONALS_NEGATION", "!="}},
	token.NEQ: {{"CONDITIONALS_NEGATION", "=="}},
	token.INC: {{"INCREMENT_DECREMENT", "--"}},
	token.DEC: {{"INCREMENT_DECREMENT", "++"}},
}

// findMutants lists the mutants of one Go source file.
func findMutants(pkg, root, path string, src []byte) ([]*mutant, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	if ast.IsGenerated(f) {
		return nil, nil
	}
	rel, _ := filepath.Rel(root, path)
	var out []*mutant
	add := func(pos token.Pos, op token.Token, replace [][2]string) {
		p := fset.Position(pos)
		for _, r := range replace {
			out = append(out, &mutant{Pkg: pkg, File: rel, Line: p.Line, Col: p.Column, Type: r[0],
				From: op.String(), To: r[1], abs: path, offset: p.Offset})
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BinaryExpr:
			add(n.OpPos, n.Op, kinds[n.Op])
		case *ast.IncDecStmt:
			add(n.TokPos, n.Tok, kinds[n.Tok])
		case *ast.UnaryExpr:
			if n.Op == token.SUB {
				add(n.OpPos, n.Op, [][2]string{{"INVERT_NEGATIVES", "+"}})
			}
		}
		return true
	})
	return out, nil
}

// apply returns src with m's operator replaced.
func (m *mutant) apply(src []byte) []byte {
	out := make([]byte, 0, len(src)+1)
	out = append(out, src[:m.offset]...)
	out = append(out, m.To...)
	return append(out, src[m.offset+len(m.From):]...)
}

// A block is one coverage profile block that a test executed.
type block [4]int // start line, start column, end line, end column

func (b block) holds(line, col int) bool {
	if line < b[0] || line > b[2] {
		return false
	}
	if line == b[0] && col < b[1] {
		return false
	}
	return line != b[2] || col <= b[3]
}

// A testRun is what one test did alone: how long it took and which blocks
// of its package's files it executed.
type testRun struct {
	Name    string             `json:"name"`
	Elapsed time.Duration      `json:"elapsed"`
	Blocks  map[string][]block `json:"blocks"` // by file, relative to the module root
}

type pkgInfo struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Module     struct{ Dir, Path string }
}

type runner struct {
	tmp     string
	workers int
	tests   map[string][]*testRun // by package
	log     *os.File
}

func main() {
	sample := flag.Int("sample", 0, "run a uniform sample of this many covered mutants (0: all)")
	seed := flag.Uint64("seed", 1, "the sample's seed")
	skip := flag.String("skip", "", "a JSON-lines result file whose mutants are left out of the draw")
	match := flag.String("match", "", "keep mutants whose file:line:col matches this regexp")
	workers := flag.Int("workers", 2, "mutants (and coverage runs) in parallel")
	out := flag.String("out", "", "write the results here as JSON lines")
	dry := flag.Bool("dry", false, "only count the covered mutants per file")
	cache := flag.String("coverage", "", "read the per-test coverage from this file if it exists, else write it there")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: mutants [flags] PKG...")
		os.Exit(2)
	}
	if err := run(context.Background(), flag.Args(), *sample, *seed, *skip, *match, *workers, *out, *cache, *dry); err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, patterns []string, sample int, seed uint64, skipFile, match string, workers int, outFile, cacheFile string, dry bool) error {
	pkgs, err := listPackages(ctx, patterns)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "mutants-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	r := &runner{tmp: tmp, workers: max(1, workers), tests: map[string][]*testRun{}, log: os.Stderr}

	var all []*mutant
	for _, p := range pkgs {
		for _, name := range p.GoFiles {
			path := filepath.Join(p.Dir, name)
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			ms, err := findMutants(p.ImportPath, p.Module.Dir, path, src)
			if err != nil {
				return err
			}
			all = append(all, ms...)
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].key() < all[j].key() })
	if match != "" {
		re, err := regexp.Compile(match)
		if err != nil {
			return err
		}
		kept := all[:0]
		for _, m := range all {
			if re.MatchString(fmt.Sprintf("%s:%d:%d", m.File, m.Line, m.Col)) {
				kept = append(kept, m)
			}
		}
		all = kept
	}

	if err := r.loadCoverage(ctx, pkgs, cacheFile); err != nil {
		return err
	}
	var covered []*mutant
	notCovered := 0
	for _, m := range all {
		if len(r.reaching(m)) == 0 {
			m.Status = "NOT COVERED"
			notCovered++
			continue
		}
		covered = append(covered, m)
	}
	if dry {
		perFile := map[string][2]int{}
		for _, m := range all {
			c := perFile[m.File]
			if m.Status == "NOT COVERED" {
				c[1]++
			} else {
				c[0]++
			}
			perFile[m.File] = c
		}
		files := make([]string, 0, len(perFile))
		for f := range perFile {
			files = append(files, f)
		}
		sort.Strings(files)
		for _, f := range files {
			fmt.Printf("%5d covered %5d not covered  %s\n", perFile[f][0], perFile[f][1], f)
		}
		return nil
	}
	skipped := map[string]bool{}
	if skipFile != "" {
		prev, err := readResults(skipFile)
		if err != nil {
			return err
		}
		for _, m := range prev {
			skipped[m.key()] = true
		}
	}
	pool := covered[:0:0]
	for _, m := range covered {
		if !skipped[m.key()] {
			pool = append(pool, m)
		}
	}
	fmt.Fprintf(r.log, "%d mutants: %d not covered, %d covered, %d left out by -skip\n",
		len(all), notCovered, len(covered), len(covered)-len(pool))
	todo := pool
	if sample > 0 && sample < len(pool) {
		rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
		perm := rng.Perm(len(pool))[:sample]
		sort.Ints(perm)
		todo = make([]*mutant, len(perm))
		for i, j := range perm {
			todo[i] = pool[j]
		}
	}

	var enc *json.Encoder
	if outFile != "" {
		f, err := os.Create(outFile)
		if err != nil {
			return err
		}
		defer f.Close()
		enc = json.NewEncoder(f)
	}
	var mu sync.Mutex
	counts := map[string]int{}
	done := 0
	r.parallel(len(todo), func(i int) {
		m := todo[i]
		r.test(ctx, m, i)
		mu.Lock()
		defer mu.Unlock()
		done++
		counts[m.Status]++
		fmt.Printf("[%d/%d] %-10s %s %s→%s %s\n", done, len(todo), m.Status, m.key(), m.From, m.To, m.Killer)
		if enc != nil {
			_ = enc.Encode(m)
		}
	})
	killed, lived, timedOut := counts["KILLED"], counts["LIVED"], counts["TIMED OUT"]
	fmt.Printf("killed %d, lived %d, timed out %d, not viable %d (of %d run; %d not covered in all)\n",
		killed, lived, timedOut, counts["NOT VIABLE"], len(todo), notCovered)
	if n := killed + lived + timedOut; n > 0 {
		fmt.Printf("kill rate (timed out counts as killed): %.1f%%\n", 100*float64(killed+timedOut)/float64(n))
	}
	return nil
}

func listPackages(ctx context.Context, patterns []string) ([]pkgInfo, error) {
	out, err := exec.CommandContext(ctx, "go", append([]string{"list", "-json"}, patterns...)...).Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", err)
	}
	var pkgs []pkgInfo
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p pkgInfo
		if err := dec.Decode(&p); err != nil {
			return nil, err
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, nil
}

// parallel calls f(0..n-1) on r.workers goroutines.
func (r *runner) parallel(n int, f func(int)) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range r.workers {
		wg.Go(func() {
			for i := range next {
				f(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// loadCoverage fills r.tests from cacheFile, or by running every test of
// pkgs (then saved to cacheFile). A stale cache misses new tests: delete it
// after editing tests.
func (r *runner) loadCoverage(ctx context.Context, pkgs []pkgInfo, cacheFile string) error {
	if cacheFile != "" {
		if data, err := os.ReadFile(cacheFile); err == nil {
			return json.Unmarshal(data, &r.tests)
		}
	}
	for _, p := range pkgs {
		if err := r.coverage(ctx, p); err != nil {
			return fmt.Errorf("coverage of %s: %w", p.ImportPath, err)
		}
	}
	if cacheFile == "" {
		return nil
	}
	data, err := json.Marshal(r.tests)
	if err != nil {
		return err
	}
	return os.WriteFile(cacheFile, data, 0o644)
}

var testNames = regexp.MustCompile(`^(Test|Fuzz|Example)`)

// coverage runs each test of p alone with coverage on and records what it
// reached. A test that fails on the unmutated code is left out, and said.
func (r *runner) coverage(ctx context.Context, p pkgInfo) error {
	bin := filepath.Join(r.tmp, strings.ReplaceAll(p.ImportPath, "/", "_")+".cover.test")
	build := exec.CommandContext(ctx, "go", "test", "-c", "-cover", "-covermode=set", "-o", bin, p.ImportPath)
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	if _, err := os.Stat(bin); err != nil {
		return nil // no test files
	}
	list, err := exec.CommandContext(ctx, bin, "-test.list", ".").Output()
	if err != nil {
		return fmt.Errorf("listing tests: %w", err)
	}
	var names []string
	for _, n := range strings.Fields(string(list)) {
		if testNames.MatchString(n) {
			names = append(names, n)
		}
	}
	fmt.Fprintf(r.log, "coverage: %s, %d tests\n", p.ImportPath, len(names))
	runs := make([]*testRun, len(names))
	r.parallel(len(names), func(i int) {
		prof := fmt.Sprintf("%s.%d.cover", bin, i)
		cmd := exec.CommandContext(ctx, bin, "-test.run", "^"+regexp.QuoteMeta(names[i])+"$", "-test.count=1",
			"-test.timeout=10m", "-test.coverprofile="+prof)
		cmd.Dir = p.Dir
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			fmt.Fprintf(r.log, "coverage: %s %s fails unmutated, left out: %v\n%s\n", p.ImportPath, names[i], err, tail(out))
			return
		}
		blocks, err := readProfile(prof, p.Module.Path)
		if err != nil {
			fmt.Fprintf(r.log, "coverage: %s %s: %v\n", p.ImportPath, names[i], err)
			return
		}
		runs[i] = &testRun{Name: names[i], Elapsed: time.Since(start), Blocks: blocks}
	})
	for _, t := range runs {
		if t != nil {
			r.tests[p.ImportPath] = append(r.tests[p.ImportPath], t)
		}
	}
	return nil
}

// readProfile reads the executed blocks of a coverage profile, keyed by
// file path relative to the module root.
func readProfile(path, module string) (map[string][]block, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	blocks := map[string][]block{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// name.go:l0.c0,l1.c1 statements count
		line := sc.Text()
		colon := strings.LastIndexByte(line, ':')
		fields := strings.Fields(line[colon+1:])
		if colon < 0 || len(fields) != 3 || fields[2] == "0" {
			continue
		}
		var b block
		if _, err := fmt.Sscanf(fields[0], "%d.%d,%d.%d", &b[0], &b[1], &b[2], &b[3]); err != nil {
			return nil, fmt.Errorf("%q: %w", line, err)
		}
		file := strings.TrimPrefix(strings.TrimPrefix(line[:colon], module), "/")
		blocks[file] = append(blocks[file], b)
	}
	return blocks, sc.Err()
}

// reaching lists the tests of m's package that executed m's position.
func (r *runner) reaching(m *mutant) []*testRun {
	var out []*testRun
	for _, t := range r.tests[m.Pkg] {
		for _, b := range t.Blocks[m.File] {
			if b.holds(m.Line, m.Col) {
				out = append(out, t)
				break
			}
		}
	}
	return out
}

var failLine = regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)

// test builds m's package with m applied and runs the tests that reach it.
func (r *runner) test(ctx context.Context, m *mutant, i int) {
	tests := r.reaching(m)
	m.Tests = len(tests)
	src, err := os.ReadFile(m.abs)
	if err != nil {
		m.Status, m.Killer = "NOT VIABLE", err.Error()
		return
	}
	dir := filepath.Join(r.tmp, "m"+strconv.Itoa(i))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		m.Status, m.Killer = "NOT VIABLE", err.Error()
		return
	}
	defer os.RemoveAll(dir)
	mutated := filepath.Join(dir, filepath.Base(m.abs))
	overlay := filepath.Join(dir, "overlay.json")
	ov, _ := json.Marshal(map[string]map[string]string{"Replace": {m.abs: mutated}})
	if os.WriteFile(mutated, m.apply(src), 0o644) != nil || os.WriteFile(overlay, ov, 0o644) != nil {
		m.Status = "NOT VIABLE"
		return
	}
	bin := filepath.Join(dir, "pkg.test")
	if out, err := exec.CommandContext(ctx, "go", "test", "-c", "-overlay", overlay, "-o", bin, m.Pkg).CombinedOutput(); err != nil {
		m.Status, m.Killer = "NOT VIABLE", firstLine(out)
		return
	}
	// The fastest tests first, in batches of growing length, so that a
	// mutant a quick test kills does not wait for the slow ones.
	sort.SliceStable(tests, func(a, b int) bool { return tests[a].Elapsed < tests[b].Elapsed })
	m.Status = "LIVED"
	for len(tests) > 0 && m.Status == "LIVED" {
		n, sum := 0, time.Duration(0)
		for n < len(tests) && (n == 0 || sum+tests[n].Elapsed <= batchLimit(sum)) {
			sum += tests[n].Elapsed
			n++
		}
		r.runBatch(ctx, m, bin, tests[:n], sum)
		tests = tests[n:]
	}
}

// batchLimit grows the batches geometrically: 1 s, then double what ran.
func batchLimit(sum time.Duration) time.Duration { return max(time.Second, 2*sum) }

// runBatch runs tests against m's binary and records a kill or time-out.
func (r *runner) runBatch(ctx context.Context, m *mutant, bin string, tests []*testRun, elapsed time.Duration) {
	names := make([]string, len(tests))
	for j, t := range tests {
		names[j] = regexp.QuoteMeta(t.Name)
	}
	// As gremlins' --timeout-coefficient 10, plus room for a loaded machine.
	budget := 10*elapsed + 30*time.Second
	tctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	cmd := exec.CommandContext(tctx, bin, "-test.run", "^("+strings.Join(names, "|")+")$", "-test.count=1",
		"-test.failfast", "-test.timeout="+(budget+5*time.Second).String())
	cmd.Dir = filepath.Dir(m.abs)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case tctx.Err() != nil:
		m.Status = "TIMED OUT"
	case err == nil:
	case errors.As(err, &exit):
		m.Status = "KILLED"
		if f := failLine.FindSubmatch(out); f != nil {
			m.Killer = string(f[1])
		} else {
			m.Killer = firstLine(tail(out))
		}
	default:
		m.Status, m.Killer = "NOT VIABLE", err.Error()
	}
}

func readResults(path string) ([]*mutant, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []*mutant
	dec := json.NewDecoder(bytes.NewReader(data))
	for dec.More() {
		var m mutant
		if err := dec.Decode(&m); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, &m)
	}
	return out, nil
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return s
}

func tail(b []byte) []byte {
	if len(b) > 2000 {
		return b[len(b)-2000:]
	}
	return b
}
