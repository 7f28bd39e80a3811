package session

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
)

// traceCarrier holds the two W3C headers of a call without a map.
type traceCarrier struct{ parent, state string }

func (t *traceCarrier) Get(key string) string {
	switch key {
	case "traceparent":
		return t.parent
	case "tracestate":
		return t.state
	}
	return ""
}

func (t *traceCarrier) Set(key, value string) {}

func (t *traceCarrier) Keys() []string { return []string{"traceparent", "tracestate"} }

// withTrace is ctx carrying the broker's span (traceparent, tracestate) as an
// OpenTelemetry remote span context, so spans a handler starts from it continue the
// broker's trace. The W3C propagator is used directly (OTEL_PROPAGATORS cannot turn
// it off); a malformed traceparent leaves ctx as it is — never an error.
func withTrace(ctx context.Context, traceparent, tracestate string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, &traceCarrier{traceparent, tracestate})
}
