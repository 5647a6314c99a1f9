package main

import (
	"context"
	"io"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/config"
	"github.com/sluice-gw/sluice/plugins/policycli"
)

// runPolicy is `sluice policy …`: scaffold, build, check and test policies.
// test gets the gateway's own check of a rewritten body, so that it
// reports as invalid what the gateway discards, and check and test the
// gateway's default policy_limits, so that their -memory-mib and
// -call-timeout default to what a gateway without policy_limits uses.
func runPolicy(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return policycli.Run(ctx, policycli.Options{
		CheckRewrite:     gateway.CheckRewrittenBody,
		GatewayUpstreams: gatewayUpstreams,
		Limits:           policyLimits(config.Defaults().PolicyLimits),
	}, args, stdout, stderr)
}

// gatewayUpstreams is the upstream names of the gateway config file path,
// loaded as `sluice serve` loads it (its ${VAR}s from the environment): a
// file serve would refuse names no upstream a rewrite could reach.
func gatewayUpstreams(path string) ([]string, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(cfg.Upstreams))
	for i, u := range cfg.Upstreams {
		names[i] = u.Name
	}
	return names, nil
}

// policyLimits is the part of policy_limits that `sluice policy` takes.
func policyLimits(l config.PolicyLimits) policycli.Limits {
	return policycli.Limits{CallTimeout: l.CallTimeout.D(), MemoryMiB: l.MemoryMiB}
}
