package streaminput

import (
	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/sent"
)

// follow records what the event ev (a parsed JSON object) of a Responses
// answer said about the output its readers were sent. The response.failed a
// session writes after the answer began renders it (terminalAtLocked), so
// that the event agrees with what came before it (README, "What it
// promises": a response.failed Sluice writes carries a complete Response
// object whose output holds the items already streamed). The rules are
// internal/sent's, which the gateway's client stream follows too for the
// events it writes: the events followed here.
func follow(o *sent.Output, ev gjson.Result) {
	var f sent.Fields
	f.Read(ev)
	o.Track(&f)
}
