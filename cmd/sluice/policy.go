package main

import (
	"context"
	"io"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/plugins/policycli"
)

// runPolicy is `sluice policy …`: scaffold, build, check and test policies.
// test gets the gateway's own check of a rewritten body, so that it
// reports as invalid what the gateway discards.
func runPolicy(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return policycli.Run(ctx, policycli.Options{CheckRewrite: gateway.CheckRewrittenBody}, args, stdout, stderr)
}
