package gateway

import (
	"context"

	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/internal/eventring"
)

// recordingPolicy is implemented by a Policy that records its hook calls
// (the plugin runtime with record_dir; README "Recorded traffic as
// tests"). While it records, every upstream attempt keeps its last
// eventring.Size events, and the recover and replay calls about the
// attempt's failure carry them in their context, so a recorded failure
// shows the upstream stream that led to it. While it does not, no ring is
// made and no event is copied.
type recordingPolicy interface {
	Recording() (dir string, on bool)
}

// startEvents readies req's attempt in flight to keep its upstream events:
// a cleared ring while hook calls are recorded, none otherwise.
func (s *Server) startEvents(req *clientRequest) {
	try := tryOf(req)
	try.events = nil
	if rp, ok := s.policy.(recordingPolicy); ok {
		if _, on := rp.Recording(); on {
			// A ring of its own: a pump that outlives a continuation's
			// attempt still names its own events (pump.hookCtx).
			try.events = new(eventring.Ring)
		}
	}
}

// recordEvents makes the attempt's stream (if any) feed its ring.
func recordEvents(req *clientRequest, ans *upstreamAnswer) {
	if r := tryOf(req).events; r != nil && ans != nil && ans.src != nil {
		ans.src = recordedSource{src: ans.src, r: r}
	}
}

// recordedSource keeps each event it reads in the attempt's ring.
type recordedSource struct {
	src eventSource
	r   *eventring.Ring
}

func (x recordedSource) wrapped() eventSource { return x.src } // chatSourceOf

func (x recordedSource) Next() (sse.Event, error) {
	ev, err := x.src.Next()
	if err == nil {
		x.r.Add(ev.Name, ev.Data, ev.Error, ev.Done)
	}
	return ev, err
}

// hookCtx is ctx carrying the recent upstream events of req's attempt in
// flight for the recording, when there are any (ctx itself otherwise).
func hookCtx(ctx context.Context, req *clientRequest) context.Context {
	if req == nil || req.try == nil || req.try.events.Len() == 0 {
		return ctx
	}
	return eventring.NewContext(ctx, req.try.events)
}

// hookCtx is the client's context carrying the recent events of this
// pump's own attempt for the recording, when it keeps them.
func (p *pump) hookCtx() context.Context {
	if x, ok := p.src.(recordedSource); ok && x.r.Len() > 0 {
		return eventring.NewContext(p.ctx, x.r)
	}
	return p.ctx
}
