package main

import (
	"context"
	"io"

	"github.com/sluice-gw/sluice/plugins/policycli"
)

// runPolicy is `sluice policy …`: scaffold, build, check and test policies.
func runPolicy(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return policycli.Run(ctx, args, stdout, stderr)
}
