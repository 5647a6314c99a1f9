package plugins

import (
	"context"
	"os"
	"testing"
)

func BenchmarkProbe(b *testing.B) {
	data, _ := os.ReadFile("/tmp/probe.wasm")
	r := benchRuntime(b, map[string][]byte{"probe.wasm": data})
	v := r.active.Load().all[0]
	inst, err := v.get(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	ctx := withState(context.Background(), &callState{v: v, hook: "x"})
	for _, name := range []string{"p_nothing", "p_str20", "p_call10", "p_loop10"} {
		fn := inst.mod.ExportedFunction(name)
		stack := make([]uint64, 2)
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if err := fn.CallWithStack(ctx, stack); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
