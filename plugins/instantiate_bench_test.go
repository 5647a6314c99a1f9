package plugins

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/policies"
)

// BenchmarkInstantiate measures what a lazily created instance costs the
// first call that needs it: instantiating an embedded Go policy (its
// _initialize included) from the compiled module, per policy.
func BenchmarkInstantiate(b *testing.B) {
	r := newRuntime(b, Options{Embedded: policies.Defaults(), Config: benchConfig, CallTimeout: time.Second})
	for _, name := range []string{"recover", "replay", "rewrite"} {
		e := r.entry(name)
		b.Run(name, func(b *testing.B) {
			r.mu.Lock()
			v := e.cur
			r.mu.Unlock()
			if v == nil {
				b.Skip("not loaded")
			}
			b.ReportAllocs()
			for b.Loop() {
				i, err := v.newInstance(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				i.close()
			}
		})
	}
}
