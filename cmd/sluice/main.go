// Command sluice is a streaming edge gateway for OpenAI-compatible LLM APIs.
//
//	sluice serve --config sluice.yaml          run the gateway
//	sluice serve --upstream https://api.openai.com/v1
//	sluice demo                                 run on an embedded fake upstream
//	sluice policy new|build|check|test …        write and check Wasm policies
//	sluice version
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

// version is stamped at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = `usage: sluice <command> [flags]

commands:
  serve     run the gateway (sluice serve --config FILE, or --upstream URL …)
  demo      run the gateway on an embedded fake upstream and print a curl line
  policy    write, build, check and test Wasm policies (sluice policy --help)
  version   print the version
`

// run is main without the process: it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return runServe(ctx, args[1:], stdout, stderr)
	case "demo":
		return runDemo(ctx, args[1:], stdout, stderr)
	case "policy":
		return runPolicy(ctx, args[1:], stdout, stderr)
	case "version", "--version", "-v":
		fmt.Fprintln(stdout, "sluice", versionString())
		return 0
	case "help", "--help", "-h":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "sluice: unknown command %q\n\n%s", args[0], usage)
	return 2
}

func versionString() string {
	v := version
	if info, ok := debug.ReadBuildInfo(); ok && v == "dev" && info.Main.Version != "" && info.Main.Version != "(devel)" {
		v = info.Main.Version
	}
	return v
}
