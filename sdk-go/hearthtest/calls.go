package hearthtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hearth-dev/hearth/sdk-go/hearth"
	pb "github.com/hearth-dev/hearth/sdk-go/hearthpb"
)

// Result is a tool call's answer (the wire's ToolResult) and the progress the
// plugin reported while it ran.
type Result struct {
	// Success says whether the call succeeded.
	Success bool
	// Content is the text for the LLM.
	Content string
	// DataJSON is the structured result as JSON text ("" = none).
	DataJSON string
	// Error is the error text of a failed call.
	Error string
	// Progress is every Progress message of the call, in order.
	Progress []*pb.Progress
}

// Data decodes DataJSON into v (encoding/json); an error when there is none.
func (r *Result) Data(v any) error {
	if r.DataJSON == "" {
		return errors.New("the result has no data")
	}
	return json.Unmarshal([]byte(r.DataJSON), v)
}

// EventOutcome is an event's answer: the texts of sender.Reply and the handler's
// error text ("" = it succeeded).
type EventOutcome struct {
	// Replies are the texts of sender.Reply, in order.
	Replies []string
	// Error is the handler's error text; "" when it succeeded.
	Error string
}

// CallOption adjusts a call the broker sends.
type CallOption func(*callOpts)

type callOpts struct {
	sender    *pb.Sender
	tp, ts    string
	timeoutMs uint32
}

// WithCaller sets who the call is made for.
func WithCaller(c hearth.Caller) CallOption {
	return func(o *callOpts) {
		o.sender = &pb.Sender{UserId: c.UserID, GroupId: c.GroupID, Channel: c.Channel, SessionId: c.SessionID}
	}
}

// WithTrace sets the W3C trace context the broker sends with the call.
func WithTrace(traceparent, tracestate string) CallOption {
	return func(o *callOpts) { o.tp, o.ts = traceparent, tracestate }
}

// WithTimeout sets the call's timeout_ms (informative for the plugin; the fake
// broker does not time calls out).
func WithTimeout(d time.Duration) CallOption {
	return func(o *callOpts) { o.timeoutMs = uint32(d / time.Millisecond) }
}

// Pending is a call sent to the plugin and not yet answered.
type Pending struct {
	b    *Broker
	id   uint64
	what string

	mu        sync.Mutex
	progress  []*pb.Progress
	replies   []string
	answer    *pb.PluginMessage
	err       error
	cancelled bool
	changed   chan struct{} // closed and replaced on every change
	done      chan struct{}
}

func (b *Broker) newPending(what string) *Pending {
	p := &Pending{b: b, id: b.nextID.Add(1), what: what, changed: make(chan struct{}), done: make(chan struct{})}
	b.mu.Lock()
	ended := b.ended
	if ended == nil {
		b.pending[p.id] = p
	}
	b.mu.Unlock()
	if ended != nil {
		p.finish(nil, fmt.Errorf("the session has ended: %v", ended))
	}
	return p
}

func (p *Pending) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Pending) addProgress(m *pb.Progress) {
	p.mu.Lock()
	p.progress = append(p.progress, m)
	p.notifyLocked()
	p.mu.Unlock()
}

func (p *Pending) addReply(text string) {
	p.mu.Lock()
	p.replies = append(p.replies, text)
	p.notifyLocked()
	p.mu.Unlock()
}

func (p *Pending) finish(m *pb.PluginMessage, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		return
	default:
	}
	p.answer, p.err = m, err
	close(p.done)
	p.notifyLocked()
}

// ID is the call id the broker gave the call.
func (p *Pending) ID() uint64 { return p.id }

// Done is closed when the call was answered, cancelled, or the session ended.
func (p *Pending) Done() <-chan struct{} { return p.done }

// Progress is the Progress messages received so far.
func (p *Pending) Progress() []*pb.Progress {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*pb.Progress(nil), p.progress...)
}

// WaitProgress waits until at least n Progress messages arrived and returns them.
func (p *Pending) WaitProgress(n int) ([]*pb.Progress, error) {
	deadline := time.NewTimer(p.b.opts.Timeout)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		got, changed := len(p.progress), p.changed
		p.mu.Unlock()
		if got >= n {
			return p.Progress(), nil
		}
		select {
		case <-changed:
		case <-p.done:
			p.mu.Lock()
			got = len(p.progress)
			p.mu.Unlock()
			if got >= n {
				return p.Progress(), nil
			}
			return p.Progress(), fmt.Errorf("%s ended after %d of %d progress messages", p.what, got, n)
		case <-deadline.C:
			return p.Progress(), fmt.Errorf("%s: %d of %d progress messages within %v", p.what, got, n, p.b.opts.Timeout)
		}
	}
}

// Cancel sends the broker's Cancel for the call: the plugin cancels the handler's
// context and must not answer (a late answer shows in Broker.Late).
func (p *Pending) Cancel(reason string) error {
	p.b.mu.Lock()
	delete(p.b.pending, p.id)
	p.b.mu.Unlock()
	p.mu.Lock()
	p.cancelled = true
	p.mu.Unlock()
	p.finish(nil, fmt.Errorf("%s was cancelled", p.what))
	return p.b.Send(&pb.HostMessage{Msg: &pb.HostMessage_Cancel{Cancel: &pb.Cancel{CallId: p.id, Reason: reason}}})
}

// wait waits for the answer.
func (p *Pending) wait() (*pb.PluginMessage, error) {
	t := time.NewTimer(p.b.opts.Timeout)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		return nil, fmt.Errorf("%s: no answer within %v", p.what, p.b.opts.Timeout)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.answer, p.err
}

// Result waits for a tool call's answer.
func (p *Pending) Result() (*Result, error) {
	m, err := p.wait()
	if err != nil {
		return nil, err
	}
	r := m.GetToolResult()
	if r == nil {
		return nil, fmt.Errorf("%s: the plugin answered with %T, not a ToolResult", p.what, m.Msg)
	}
	return &Result{Success: r.Success, Content: r.Content, DataJSON: r.DataJson, Error: r.Error, Progress: p.Progress()}, nil
}

// StageResult waits for a stage hook's answer.
func (p *Pending) StageResult() (*pb.StageResult, error) {
	m, err := p.wait()
	if err != nil {
		return nil, err
	}
	r := m.GetStageResult()
	if r == nil {
		return nil, fmt.Errorf("%s: the plugin answered with %T, not a StageResult", p.what, m.Msg)
	}
	return r, nil
}

// EventResult waits for an event handler's end and returns its replies.
func (p *Pending) EventResult() (*EventOutcome, error) {
	m, err := p.wait()
	if err != nil {
		return nil, err
	}
	r := m.GetEventDone()
	if r == nil {
		return nil, fmt.Errorf("%s: the plugin answered with %T, not EventDone", p.what, m.Msg)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return &EventOutcome{Replies: append([]string(nil), p.replies...), Error: r.Error}, nil
}

// argsJSON is the JSON text of a call's arguments: nil = {}, a string or []byte is
// JSON text as is, anything else is encoded.
func argsJSON(args any) (string, error) {
	switch a := args.(type) {
	case nil:
		return "{}", nil
	case string:
		return a, nil
	case []byte:
		return string(a), nil
	case json.RawMessage:
		return string(a), nil
	}
	b, err := json.Marshal(args)
	if err != nil {
		return "", fmt.Errorf("hearthtest: arguments are not JSON: %w", err)
	}
	return string(b), nil
}

// Invoke sends a tool call and returns at once; args is nil, JSON text (string,
// []byte) or any value encoding/json encodes.
func (b *Broker) Invoke(tool string, args any, opts ...CallOption) (*Pending, error) {
	var o callOpts
	for _, f := range opts {
		f(&o)
	}
	text, err := argsJSON(args)
	if err != nil {
		return nil, err
	}
	p := b.newPending("")
	p.what = fmt.Sprintf("tool %s call %d", tool, p.id)
	if err := b.Send(&pb.HostMessage{Msg: &pb.HostMessage_InvokeTool{InvokeTool: &pb.InvokeTool{
		CallId: p.id, Tool: tool, ArgsJson: text, Sender: o.sender, TimeoutMs: o.timeoutMs,
		Traceparent: o.tp, Tracestate: o.ts,
	}}}); err != nil {
		return nil, err
	}
	return p, nil
}

// Call calls a tool and waits for its answer (see Invoke for args).
func (b *Broker) Call(tool string, args any, opts ...CallOption) (*Result, error) {
	p, err := b.Invoke(tool, args, opts...)
	if err != nil {
		return nil, err
	}
	return p.Result()
}

// StartHook sends RunStage for one hook (hookID as registered, e.g. `on_input#0`)
// with ctx as is (no permission matrix) and returns at once.
func (b *Broker) StartHook(hookID string, ctx *pb.StageContext, opts ...CallOption) (*Pending, error) {
	var o callOpts
	for _, f := range opts {
		f(&o)
	}
	stage := pb.Stage_STAGE_UNSPECIFIED
	for _, h := range b.Hooks() {
		if h.HookId == hookID {
			stage = h.Stage
		}
	}
	if ctx == nil {
		ctx = &pb.StageContext{Phase: stage}
	}
	p := b.newPending("")
	p.what = fmt.Sprintf("stage hook %s call %d", hookID, p.id)
	if err := b.Send(&pb.HostMessage{Msg: &pb.HostMessage_RunStage{RunStage: &pb.RunStage{
		CallId: p.id, Stage: stage, HookId: hookID, Context: clone(ctx), TimeoutMs: o.timeoutMs,
		Traceparent: o.tp, Tracestate: o.ts,
	}}}); err != nil {
		return nil, err
	}
	return p, nil
}

// RunHook runs one hook with ctx as is (no permission matrix) and returns its raw
// answer.
func (b *Broker) RunHook(hookID string, ctx *pb.StageContext, opts ...CallOption) (*pb.StageResult, error) {
	p, err := b.StartHook(hookID, ctx, opts...)
	if err != nil {
		return nil, err
	}
	return p.StageResult()
}

// DroppedWrite is a hook's change the permission matrix did not keep.
type DroppedWrite struct {
	// HookID is the hook that made it.
	HookID string
	// Field is the context field (raw_message, context_msgs, tool_calls,
	// tool_call.deny, user_id, extra, …).
	Field string
}

// StageOutcome is a stage run through every hook of the plugin.
type StageOutcome struct {
	// Context is the context the pipeline would go on with.
	Context *pb.StageContext
	// Dropped is the writes the matrix did not keep, in order.
	Dropped []DroppedWrite
	// Errors is the error of each hook that failed (its writes not applied).
	Errors []string
	// Ran is the ids of the hooks that ran, in order.
	Ran []string
}

// RunStage runs every hook the plugin registered for stage, in registration order,
// as the broker's pipeline does: each hook receives its stage's view of the context
// (the permission matrix), each sees the previous one's kept writes, writes the
// stage may not make are dropped (and listed), a failed hook's writes are not
// applied. Own-tools hooks of before_toolcall / after_toolcall run only when the
// tool call (result) names one of the plugin's tools.
func (b *Broker) RunStage(stage pb.Stage, ctx *pb.StageContext, opts ...CallOption) (*StageOutcome, error) {
	current := &pb.StageContext{}
	if ctx != nil {
		current = clone(ctx)
	}
	current.Phase = stage
	out := &StageOutcome{Context: current}
	tools := map[string]bool{}
	for _, t := range b.Tools() {
		tools[t] = true
	}
	for _, h := range b.Hooks() {
		if h.Stage != stage {
			continue
		}
		if h.OwnToolsOnly && !ownTool(stage, current, tools) {
			continue
		}
		vis := visibleOf(stage, !h.NoContextMsgs)
		res, err := b.RunHook(h.HookId, view(stage, current, vis), opts...)
		if err != nil {
			return out, err
		}
		out.Ran = append(out.Ran, h.HookId)
		if res.Error != "" {
			out.Errors = append(out.Errors, res.Error)
			continue
		}
		proposed := res.Context
		if proposed == nil {
			proposed = view(stage, current, vis)
		}
		for _, f := range apply(stage, vis, current, proposed) {
			out.Dropped = append(out.Dropped, DroppedWrite{HookID: h.HookId, Field: f})
		}
	}
	return out, nil
}

// ownTool: the context's tool call (before_toolcall) or result (after_toolcall)
// names one of the plugin's tools; other stages always run.
func ownTool(stage pb.Stage, ctx *pb.StageContext, tools map[string]bool) bool {
	switch stage {
	case pb.Stage_STAGE_BEFORE_TOOLCALL:
		return len(ctx.ToolCalls) > 0 && tools[ctx.ToolCalls[0].Name]
	case pb.Stage_STAGE_AFTER_TOOLCALL:
		return len(ctx.ToolResults) > 0 && tools[ctx.ToolResults[0].Name]
	}
	return true
}

// StartEvent sends HandleEvent for trigger t (one the plugin registered) with the
// message and its parsed params, and returns at once.
func (b *Broker) StartEvent(t hearth.Trigger, message string, params []string, opts ...CallOption) (*Pending, error) {
	var o callOpts
	for _, f := range opts {
		f(&o)
	}
	p := b.newPending("")
	p.what = fmt.Sprintf("event %d of trigger %s", p.id, t)
	if err := b.Send(&pb.HostMessage{Msg: &pb.HostMessage_HandleEvent{HandleEvent: &pb.HandleEvent{
		CallId: p.id, Message: message, Params: params, Sender: o.sender, Trigger: t.Wire(),
		TimeoutMs: o.timeoutMs, Traceparent: o.tp, Tracestate: o.ts,
	}}}); err != nil {
		return nil, err
	}
	return p, nil
}

// Event delivers a message for trigger t and waits for the handler to finish.
func (b *Broker) Event(t hearth.Trigger, message string, params ...string) (*EventOutcome, error) {
	p, err := b.StartEvent(t, message, params)
	if err != nil {
		return nil, err
	}
	return p.EventResult()
}
