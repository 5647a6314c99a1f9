package gateway

import (
	"net/http"

	"github.com/sluice-gw/sluice/internal/apierr"
)

// ModelAllowed is the 403 model_not_allowed the gateway would answer r
// (a request its key gate passed) for model, or nil: the key's models
// rule, for a caller that must refuse before it has a whole request, such
// as a streaming-input session whose template names the model
// (gateway/streaminput/README.md).
func (s *Server) ModelAllowed(r *http.Request, model string) *apierr.Error {
	return modelAllowed(keyOf(r), model)
}
