package policycli

import (
	"errors"
	"fmt"
	"strings"
)

// checkModulePath reports why the go command would refuse path as the
// module path of a policy's go.mod, or nil. `policy new` checks it before
// writing anything: a go.mod it cannot read would only fail later, at
// `policy build`, with "invalid module path".
//
// The rules are the go command's for a main module (what `go mod init`
// accepts: golang.org/x/mod/module.CheckImportPath plus its reserved
// paths), written out here because Sluice does not depend on x/mod.
func checkModulePath(path string) error {
	switch path {
	case "":
		return errors.New("empty module path")
	case "go", "toolchain":
		return errors.New("reserved by the go command for the Go toolchain")
	case "std", "cmd":
		return errors.New("names the standard library's packages, so go build . would build those")
	}
	switch {
	case path[0] == '-':
		return errors.New("leading dash")
	case strings.Contains(path, "//"):
		// go.mod would read the rest of the line as a comment.
		return errors.New("double slash")
	case path[0] == '/':
		return errors.New("leading slash")
	case path[len(path)-1] == '/':
		return errors.New("trailing slash")
	}
	for elem := range strings.SplitSeq(path, "/") {
		if err := checkModulePathElem(elem); err != nil {
			return fmt.Errorf("path element %q: %w", elem, err)
		}
	}
	return nil
}

// checkModulePathElem checks one slash-separated element of a module path.
func checkModulePathElem(elem string) error {
	if strings.Trim(elem, ".") == "" {
		return errors.New("only dots")
	}
	if elem[len(elem)-1] == '.' {
		return errors.New("trailing dot")
	}
	for _, c := range elem {
		if !modulePathChar(c) {
			return fmt.Errorf("invalid character %q (allowed: ASCII letters, digits and - . _ ~ +)", c)
		}
	}
	// Elements must also work as Windows file names, where the part before
	// the first dot must not be a device name nor look like a short name
	// (PROGRA~1).
	short, _, _ := strings.Cut(elem, ".")
	if windowsDeviceName(short) {
		return fmt.Errorf("%q is a device name on Windows", short)
	}
	if i := strings.LastIndexByte(short, '~'); i >= 0 && i < len(short)-1 && strings.Trim(short[i+1:], "0123456789") == "" {
		return errors.New("ends in a tilde and digits, like a Windows short name")
	}
	return nil
}

func modulePathChar(c rune) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.ContainsRune("-._~+", c)
}

// windowsDeviceName reports whether name is one of the names Windows
// reserves for devices, in any case.
func windowsDeviceName(name string) bool {
	switch strings.ToUpper(name) {
	case "CON", "PRN", "AUX", "NUL":
		return true
	}
	if len(name) == 4 && name[3] >= '1' && name[3] <= '9' {
		switch strings.ToUpper(name[:3]) {
		case "COM", "LPT":
			return true
		}
	}
	return false
}
