// Command sluice is a streaming edge gateway for OpenAI-compatible LLM APIs.
//
//	sluice serve --config sluice.yaml          run the gateway
//	sluice serve --upstream https://api.openai.com/v1
//	sluice demo                                 run on an embedded fake upstream
//	sluice policy new|build|check|test …        write and check Wasm policies
//	sluice version                              version, commit, Go and ABI versions
//	sluice help [COMMAND]                       (or sluice COMMAND --help)
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is main without the process: it returns the exit code (0 success,
// 1 failure, 2 usage error).
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
	case "version", "--version", "-version", "-v":
		if len(args) > 1 {
			if args[1] == "-h" || args[1] == "--help" || args[1] == "-help" {
				fmt.Fprint(stdout, versionHelp)
				return 0
			}
			fmt.Fprintf(stderr, "sluice version: unexpected argument %q\n(sluice version --help for more)\n", args[1])
			return 2
		}
		printVersion(stdout)
		return 0
	case "help", "--help", "-help", "-h":
		return runHelp(ctx, args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "sluice: unknown command %q\n\n%s", args[0], usage)
	return 2
}

// runHelp is `sluice help [COMMAND [SUBCOMMAND]]`.
func runHelp(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stdout, usage)
		return 0
	}
	switch args[0] {
	case "serve", "demo":
		if len(args) == 1 {
			return run(ctx, []string{args[0], "--help"}, stdout, stderr)
		}
	case "version":
		if len(args) == 1 {
			fmt.Fprint(stdout, versionHelp)
			return 0
		}
	case "policy":
		return runPolicy(ctx, append([]string{"help"}, args[1:]...), stdout, stderr)
	case "help", "--help", "-help", "-h": // help's own help, as every command answers --help
		if len(args) == 1 {
			fmt.Fprint(stdout, usage)
			return 0
		}
	}
	fmt.Fprintf(stderr, "sluice help: unknown command %q\n\n%s", strings.Join(args, " "), usage)
	return 2
}
