package main

import (
	"context"
	"fmt"
	"io"
)

func runPolicy(_ context.Context, _ []string, _, stderr io.Writer) int {
	fmt.Fprintln(stderr, "sluice policy: the policy tools are not wired yet")
	return 2
}
