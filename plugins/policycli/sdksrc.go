package policycli

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	sluice "github.com/sluice-gw/sluice"
	"github.com/sluice-gw/sluice/hostabi"
)

// SDKDir is the directory, next to a policy's go.mod, that `policy new`
// writes the SDK carried by the binary into; the policy's go.mod replaces
// SluiceModule with it, so the policy builds offline with only Go installed.
const SDKDir = "sluice-sdk"

// sdkStamp is the file in SDKDir that records which SDK was written.
const sdkStamp = "SLUICE_SDK"

// sdkFile is one file of the embedded SDK module, by slash path inside it.
type sdkFile struct {
	path string
	data []byte
}

var (
	sdkOnce  sync.Once
	sdkFiles []sdkFile
	sdkHash  string
)

// embeddedSDK returns the files of the SDK module carried by the binary
// (go.mod, sdk/*.go, hostabi/*.go and ABI.md, internal/jsonx/*.go, no tests)
// and their digest.
func embeddedSDK() ([]sdkFile, string) {
	sdkOnce.Do(func() {
		_ = fs.WalkDir(sluice.SDKSource, ".", func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || strings.HasSuffix(p, "_test.go") {
				return err
			}
			b, err := sluice.SDKSource.ReadFile(p)
			if err != nil {
				return err
			}
			sdkFiles = append(sdkFiles, sdkFile{p, b})
			return nil
		})
		sdkFiles = append(sdkFiles, sdkFile{"go.mod", []byte("// The Sluice policy SDK (sdk, hostabi and internal/jsonx only), written by `sluice policy new`\n" +
			"// from the sources carried by the sluice binary. Do not edit: `sluice policy\n" +
			"// build -update-sdk` rewrites it.\nmodule " + SluiceModule + "\n\ngo 1.26\n")})
		sort.Slice(sdkFiles, func(i, j int) bool { return sdkFiles[i].path < sdkFiles[j].path })
		h := sha256.New()
		for _, f := range sdkFiles {
			fmt.Fprintf(h, "%s\x00%d\x00", f.path, len(f.data))
			h.Write(f.data)
		}
		sdkHash = hex.EncodeToString(h.Sum(nil))[:16]
	})
	return sdkFiles, sdkHash
}

// writeSDK writes the embedded SDK module into dir (replacing what an earlier
// writeSDK put there) and returns its digest.
func writeSDK(dir string) (string, error) {
	files, hash := embeddedSDK()
	return writeSDKFiles(dir, files, fmt.Sprintf("sdk %s\nabi %d\n", hash, hostabi.ABIVersion), hash)
}

// writeSDKFiles replaces dir (only if an earlier write of ours made it: it
// has the stamp) with files and the stamp, and returns hash.
func writeSDKFiles(dir string, files []sdkFile, stamp, hash string) (string, error) {
	if _, err := os.Stat(dir); err == nil {
		if _, err := os.Stat(filepath.Join(dir, sdkStamp)); err != nil {
			return "", fmt.Errorf("%s exists and was not written by sluice; move it away", dir)
		}
		if err := os.RemoveAll(dir); err != nil {
			return "", err
		}
	}
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f.path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(p, f.data, 0o644); err != nil {
			return "", err
		}
	}
	return hash, os.WriteFile(filepath.Join(dir, sdkStamp), []byte(stamp), 0o644)
}

// readStamp returns the digest recorded in dir's stamp, "" when there is none.
func readStamp(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, sdkStamp))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if h, ok := strings.CutPrefix(line, "sdk "); ok {
			return strings.TrimSpace(h)
		}
	}
	return ""
}

// sdkReplace reports whether the go.mod in dir replaces SluiceModule with
// the local SDKDir copy.
func sdkReplace(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(string(line)), "replace"))
		if len(f) >= 3 && f[0] == SluiceModule && f[1] == "=>" && path.Clean(filepath.ToSlash(f[2])) == SDKDir {
			return true
		}
	}
	return false
}

// ensureSDK makes the SDK copy of the policy in dir ready for a build: it
// writes it when go.mod uses it and it is missing (or update is set), and
// notes when it differs from the binary's.
func ensureSDK(dir string, update bool, stdout, stderr interface{ Write([]byte) (int, error) }) error {
	if !sdkReplace(dir) {
		if update {
			return errors.New("-update-sdk: go.mod does not replace " + SluiceModule + " => ./" + SDKDir)
		}
		return nil
	}
	sdk := filepath.Join(dir, SDKDir)
	_, want := embeddedSDK()
	have := readStamp(sdk)
	_, statErr := os.Stat(sdk)
	switch {
	case update || os.IsNotExist(statErr):
		if _, err := writeSDK(sdk); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s (sdk %s, ABI %d)\n", sdk, want, hostabi.ABIVersion)
	case have != want:
		fmt.Fprintf(stderr, "note: %s is sdk %q, this sluice carries sdk %s (ABI %d); -update-sdk rewrites it\n", sdk, have, want, hostabi.ABIVersion)
	}
	return nil
}
