package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

const usage = `usage: sluice <command> [flags]

Sluice is a streaming gateway for OpenAI-compatible APIs: it proxies
/v1/responses, /v1/chat/completions and /v1/models to a pool of upstreams.

commands:
  serve     run the gateway (sluice serve --config FILE, or --upstream URL …)
  demo      run the gateway on an embedded fake upstream and print curl lines
  policy    write, build, check and test Wasm policies
  version   print the version, commit, Go version and policy ABI version
  help      print a command's help (sluice help serve)

'sluice <command> --help' (or -h) prints a command's flags, defaults,
environment and examples.

examples:
  sluice serve --upstream https://api.openai.com/v1
  sluice serve --upstream chat+http://127.0.0.1:8081/v1
  sluice demo
`

const serveAbout = `usage: sluice serve [flags]

Run the gateway until SIGTERM or SIGINT, then drain: in-flight streams get up
to timeouts.drain_grace and their terminal event, and the process exits 0; a
second signal ends the grace at once (streams still get terminal events).
SIGHUP is logged and ignored (the config is read once; policies hot-swap).
Flags override the config file; without --config the built-in defaults apply
and --upstream is required. A config error names each bad key and exits 1,
as a flag value refused does (--log-level bogus); a malformed command line
(an unknown flag, a missing value) exits 2.
Before serving, it logs a summary: config file, data dir, policy dir, listen
address, upstreams and routes.
`

const serveEnv = `
environment:
  SLUICE_UPSTREAM_API_KEY
        the API key of every --upstream URL without one in its userinfo
        (unset: the client's Authorization header passes through)
  SLUICE_ADMIN_TOKEN
        the admin token when the config sets no admin_token: /admin/* (and
        /metrics unless metrics_public) then need "Authorization: Bearer TOKEN"
  ${VAR}, ${VAR:-default}
        a config file may reference any variable; an unset one without a
        default is an error naming its key
  XDG_CACHE_HOME, HOME
        locate the user cache dir, the default wasm_cache_dir

examples:
  # drop-in in front of OpenAI (the client's key passes through)
  sluice serve --upstream https://api.openai.com/v1

  # /v1/responses in front of llama.cpp's server, which speaks only Chat Completions
  sluice serve --upstream chat+http://127.0.0.1:8081/v1 --listen 127.0.0.1:8080

  # a config file, the admin token from the environment, JSON logs
  SLUICE_ADMIN_TOKEN=change-me sluice serve --config sluice.yaml --log-json
`

const demoAbout = `usage: sluice demo [flags]

Run the gateway in front of an embedded fake upstream, with a temporary data
dir (removed on exit), and print curl lines to try. Ctrl-C drains and stops.
`

const demoEnv = `
environment:
  TMPDIR
        where the temporary data dir is made (default /tmp)
  XDG_CACHE_HOME, HOME
        locate the user cache dir for the Wasm compilation cache (unwritable:
        the temporary data dir)

examples:
  sluice demo
  sluice demo --listen 127.0.0.1:0 --upstream-protocol chat
`

const versionHelp = `usage: sluice version

Print the version, the commit it was built from, the Go version and the
policy host ABI version (what a policy's sluice_abi_version export must
return; hostabi/ABI.md). Release builds are stamped with
-ldflags "-X main.version=… -X main.commit=…"; other builds fall back to
the Go build info, then to "devel" and "unknown".

environment: none

examples:
  sluice version
  sluice --version
`

// commandHelp writes a command's help: about, its flags (with their
// defaults), then env (environment and examples).
func commandHelp(w io.Writer, about string, fs *flag.FlagSet, env string) {
	fmt.Fprint(w, about)
	fmt.Fprint(w, "\nflags:\n")
	fs.VisitAll(func(f *flag.Flag) {
		arg, text := flag.UnquoteUsage(f) // arg: the `WORD` in the usage, "" for a bool
		fmt.Fprintf(w, "  --%s", f.Name)
		if arg != "" {
			fmt.Fprintf(w, " %s", arg)
		}
		if f.DefValue != "" && f.DefValue != "false" && !strings.Contains(text, "(default") {
			text += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(w, "\n        %s\n", strings.ReplaceAll(text, "\n", "\n        "))
	})
	fmt.Fprint(w, env)
}

// parseFlags parses a command's flags: -h/--help prints help on stdout
// (done, 0); a bad flag or a stray argument is reported on stderr (done, 2).
func parseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer, help func(io.Writer)) (done bool, code int) {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	if err == flag.ErrHelp {
		help(stdout)
		return true, 0
	}
	if err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice %s: %v\n(sluice %s --help for the flags and examples)\n", fs.Name(), err, fs.Name())
		return true, 2
	}
	return false, 0
}
