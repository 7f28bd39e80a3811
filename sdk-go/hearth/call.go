package hearth

import (
	"context"
	"unsafe"

	homeagent "github.com/hearth-dev/hearth/sdk-go/homeagent/sdk"
	"github.com/hearth-dev/hearth/sdk-go/internal/session"
)

// Call is one running tool call, stage hook or event handler:
//
//   - Context(): cancelled when the broker sends Cancel for the call (its timeout,
//     the caller gone) or the plugin shuts down; never by a local deadline
//     (Progress extends the broker's timeout). It carries the broker's span as an
//     OpenTelemetry remote span context, so otel.Tracer(…).Start(call.Context(), …)
//     continues the broker's trace.
//   - ID(), Tool() (or HookID()), Plugin(), Caller(), Timeout() (what the broker
//     allows; 0 = not given), TraceParent(), TraceState(), RawArgs() (a tool's
//     arguments as the JSON text the broker sent, for exact big integers).
//   - Progress(message, fraction) and ProgressCount(message, done, total): tell the
//     broker the call is alive (extending its timeout) and how far it is; false
//     when nothing was sent (the call ended or was cancelled).
//
// Handlers with a context get it with CallFromContext(ctx); seed handlers without
// one with CallFrom(args) (tools) or StageCall(ctx) (stage hooks).
type Call = session.Call

// Caller is who a call is made for: UserID, GroupID, Channel, SessionID.
type Caller = session.Caller

// Trigger is a LinkZone trigger (homeagent/sdk.Trigger).
type Trigger = session.Trigger

// Sender is a message that matched a trigger (homeagent/sdk.Sender).
type Sender = session.Sender

// CallFromContext is the Call whose context ctx is (or derives from): the ctx of a
// RegisterToolContext / RegisterStageContext handler, a Cyrene Execute, or
// sender.Context(). Outside a call it is a detached Call (background context, ID 0,
// progress dropped), so handlers also run in plain unit tests; never nil.
func CallFromContext(ctx context.Context) *Call {
	if c := session.FromContext(ctx); c != nil {
		return c
	}
	return session.Detached()
}

// CallFrom is the Call a seed ToolHandler (or RegisterAITool handler) is running,
// found by the identity of the args map the SDK passed it (valid until the handler
// returns; the map may grow meanwhile). For any other map it is a detached Call, as
// CallFromContext outside a call; never nil.
func CallFrom(args map[string]interface{}) *Call {
	if c := session.Lookup(session.MapKey(args)); c != nil {
		return c
	}
	return session.Detached()
}

// StageCall is the Call a seed StageHandler is running, found by the StageContext
// the SDK passed it (valid until the handler returns); a detached Call for any
// other. Never nil.
func StageCall(sc *homeagent.StageContext) *Call {
	if c := session.Lookup(unsafe.Pointer(sc)); c != nil {
		return c
	}
	return session.Detached()
}
