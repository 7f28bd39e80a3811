package session

import (
	"context"
	"math"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
	"unsafe"

	pb "github.com/hearth-dev/hearth/sdk-go/hearthpb"
)

// Kind is what a call runs.
type Kind uint8

const (
	// KindTool is an InvokeTool.
	KindTool Kind = iota + 1
	// KindStage is a RunStage.
	KindStage
	// KindEvent is a HandleEvent.
	KindEvent
)

// Caller is who a call is made for (the wire's Sender; LinkZone's `sender`).
type Caller struct {
	// UserID is the user's id.
	UserID string
	// GroupID is the group's id; empty outside groups.
	GroupID string
	// Channel is the input channel, e.g. "cli", "qq".
	Channel string
	// SessionID is the conversation / session id.
	SessionID string
}

func callerOf(s *pb.Sender) Caller {
	if s == nil {
		return Caller{}
	}
	return Caller{UserID: s.UserId, GroupID: s.GroupId, Channel: s.Channel, SessionID: s.SessionId}
}

// Call is one running tool call, stage hook or event handler: its context
// (cancelled when the broker sends Cancel for it or the plugin shuts down — never by
// a local deadline: Progress extends the broker's timeout), its id, caller, trace
// context, and Progress. Methods are safe for concurrent use; a Call outside any
// session (CallFrom on a map the SDK did not pass) has a background context and
// drops progress.
type Call struct {
	cctx   callCtx
	cancel context.CancelFunc
	s      *Session

	id      uint64
	kind    Kind
	name    string // tool name, hook id or trigger text
	caller  Caller
	timeout time.Duration
	tp, ts  string
	args    string // the tool call's arguments as JSON text
	ended   atomic.Bool
}

// callCtx is the call's context: the cancellable context plus the Call itself as a
// value (CallFromContext), without another allocation.
type callCtx struct {
	context.Context
	c *Call
}

type callKey struct{}

func (x *callCtx) Value(key any) any {
	if key == (callKey{}) {
		return x.c
	}
	return x.Context.Value(key)
}

var detached = func() *Call {
	c := &Call{}
	c.cctx = callCtx{Context: context.Background(), c: c}
	c.ended.Store(true)
	return c
}()

// Detached is the Call of code not running under a session (unit tests calling a
// handler directly): background context, no id, progress dropped.
func Detached() *Call { return detached }

// FromContext is the Call whose context ctx is or derives from; nil when none.
func FromContext(ctx context.Context) *Call {
	if ctx == nil {
		return nil
	}
	c, _ := ctx.Value(callKey{}).(*Call)
	return c
}

// Context is the call's context: done when the broker cancels the call (timeout,
// caller gone) or the plugin shuts down. It carries the broker's span as an
// OpenTelemetry remote span context when the broker traces. Pass it to work the
// handler does (host calls, HTTP requests) so a cancel stops them.
func (c *Call) Context() context.Context { return &c.cctx }

// ID is the call's id, unique within the session (0 for a detached Call).
func (c *Call) ID() uint64 { return c.id }

// Tool is the name of the tool being called; "" for stage hooks and events.
func (c *Call) Tool() string {
	if c.kind == KindTool {
		return c.name
	}
	return ""
}

// RawArgs is a tool call's arguments as the JSON text the broker sent ("" for
// stage hooks and events): for exact numbers where the decoded map has float64
// (integers beyond 2^53 lose digits there).
func (c *Call) RawArgs() string { return c.args }

// HookID is the id of the stage hook being run (`on_input#0` …); "" otherwise.
func (c *Call) HookID() string {
	if c.kind == KindStage {
		return c.name
	}
	return ""
}

// Plugin is the name the broker knows this plugin by.
func (c *Call) Plugin() string {
	if c.s == nil {
		return ""
	}
	return c.s.name
}

// Caller is who the call is made for (empty for stage hooks: their context has the
// user and group).
func (c *Call) Caller() Caller { return c.caller }

// Timeout is the time the broker gives the call before it answers the caller with
// a timeout (Progress extends it); 0 = not given. The call's context has no
// deadline from it.
func (c *Call) Timeout() time.Duration { return c.timeout }

// TraceParent is the W3C traceparent of the broker span this call belongs to
// (`00-<trace id>-<span id>-<flags>`); "" when the broker does not trace.
func (c *Call) TraceParent() string { return c.tp }

// TraceState is the W3C tracestate sent with TraceParent; often "".
func (c *Call) TraceState() string { return c.ts }

// Progress tells the broker the call is alive and how far it is, which extends
// its timeout (bounded by the broker). fraction is 0..1 when known, negative when
// not. Returns false when nothing was sent: the call has ended or was cancelled,
// or the Call is detached.
func (c *Call) Progress(message string, fraction float64) bool {
	if math.IsNaN(fraction) {
		fraction = -1
	}
	return c.sendProgress(message, fraction, 0, 0)
}

// ProgressCount is Progress as a count: done units of work of total ("3 of 10
// pages": 3, 10); total 0 = unknown. The broker passes both on to callers (MCP
// progress / total); the fraction is done/total when total is known. Returns false
// as Progress does.
func (c *Call) ProgressCount(message string, done, total float64) bool {
	fraction := -1.0
	if total > 0 {
		fraction = min(max(done/total, 0), 1)
	}
	return c.sendProgress(message, fraction, done, total)
}

func (c *Call) sendProgress(message string, fraction, done, total float64) bool {
	if c == nil || c.s == nil || c.ended.Load() || c.cctx.Err() != nil {
		return false
	}
	if !utf8.ValidString(message) {
		message = strings.ToValidUTF8(message, "\uFFFD")
	}
	return c.s.w.send(&pb.PluginMessage{Msg: &pb.PluginMessage_Progress{Progress: &pb.Progress{
		CallId: c.id, Message: message, Fraction: fraction, Progress: done, Total: total,
	}}})
}

// bound maps the identity of a value the SDK passed to a handler (the args map, the
// StageContext pointer) to its Call, for handlers without a ctx (hearth.CallFrom).
var bound sync.Map

// Bind makes Lookup(p) answer c until the returned function is called.
func (c *Call) Bind(p unsafe.Pointer) (unbind func()) {
	bound.Store(p, c)
	return func() { bound.CompareAndDelete(p, c) }
}

// BindMap is Bind for a map's identity (a map value is a pointer to its header,
// which does not move when the map grows).
func (c *Call) BindMap(m map[string]any) (unbind func()) {
	return c.Bind(MapKey(m))
}

// MapKey is the identity of m (nil for a nil map).
func MapKey(m map[string]any) unsafe.Pointer {
	return reflect.ValueOf(m).UnsafePointer()
}

// Lookup is the Call bound to p, or nil.
func Lookup(p unsafe.Pointer) *Call {
	if p == nil {
		return nil
	}
	c, _ := bound.Load(p)
	call, _ := c.(*Call)
	return call
}
