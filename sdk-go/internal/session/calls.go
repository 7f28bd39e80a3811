package session

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"
	"unicode/utf8"

	pb "github.com/hearth-dev/hearth/sdk-go/hearthpb"
)

// begin registers a call in flight and makes its Call; nil when the session is
// closing or the id is already in flight (logged).
func (s *Session) begin(id uint64, kind Kind, name string, sender *pb.Sender, timeoutMs uint32, tp, ts string) *Call {
	c := &Call{s: s, id: id, kind: kind, name: name, caller: callerOf(sender), tp: tp, ts: ts}
	if timeoutMs > 0 {
		c.timeout = time.Duration(timeoutMs) * time.Millisecond
	}
	var ctx context.Context
	ctx, c.cancel = context.WithCancel(withTrace(s.base, tp, ts))
	c.cctx = callCtx{Context: ctx, c: c}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.cancel()
		return nil
	}
	if _, dup := s.calls[id]; dup {
		s.mu.Unlock()
		c.cancel()
		s.logf("ignoring a call with id %d, already in flight", id)
		return nil
	}
	s.calls[id] = c
	s.mu.Unlock()
	return c
}

// end takes c out of the calls in flight and cancels its context; false when it was
// cancelled before (its answer is then not sent: the broker has moved on).
func (s *Session) end(c *Call) bool {
	s.mu.Lock()
	ok := s.calls[c.id] == c
	if ok {
		delete(s.calls, c.id)
	}
	s.mu.Unlock()
	c.ended.Store(true)
	c.cancel()
	return ok
}

// cancelCall is the broker's Cancel: the call's context is cancelled and its answer
// will not be sent.
func (s *Session) cancelCall(id uint64) {
	s.mu.Lock()
	c := s.calls[id]
	delete(s.calls, id)
	s.mu.Unlock()
	if c != nil {
		c.cancel()
	}
}

// panicked logs a handler's panic with its stack and returns the error text.
func (s *Session) panicked(what string, c *Call, v any) string {
	msg := fmt.Sprintf("%s panicked: %v", what, v)
	s.logf("call %d: %s\n%s", c.id, msg, debug.Stack())
	return msg
}

func (s *Session) invoke(m *pb.InvokeTool) {
	t := (*s.tools.Load())[m.GetTool()]
	if t == nil {
		s.w.send(&pb.PluginMessage{Msg: &pb.PluginMessage_ToolResult{ToolResult: &pb.ToolResult{
			CallId: m.GetCallId(), Error: fmt.Sprintf("plugin %s has no tool named %q", s.name, m.GetTool()),
		}}})
		return
	}
	c := s.begin(m.GetCallId(), KindTool, m.GetTool(), m.GetSender(), m.GetTimeoutMs(), m.GetTraceparent(), m.GetTracestate())
	if c == nil {
		return
	}
	c.args = m.GetArgsJson()
	s.workers.run(func() { s.runTool(c, t, c.args) })
}

func (s *Session) runTool(c *Call, t *Tool, argsJSON string) {
	r := s.execTool(c, t, argsJSON)
	if !s.end(c) {
		return
	}
	s.w.send(s.toolResultMessage(c, r))
}

func (s *Session) execTool(c *Call, t *Tool, argsJSON string) (r Result) {
	defer func() {
		if v := recover(); v != nil {
			r = Fail(s.panicked("tool "+c.name, c, v))
		}
	}()
	args, err := DecodeArgs(argsJSON)
	if err != nil {
		return Fail(fmt.Sprintf("tool %s: %v", c.name, err))
	}
	return t.Run(c, args)
}

func (s *Session) runStage(m *pb.RunStage) {
	h := s.hooks[m.GetHookId()]
	if h == nil {
		s.w.send(&pb.PluginMessage{Msg: &pb.PluginMessage_StageResult{StageResult: &pb.StageResult{
			CallId: m.GetCallId(), Context: m.GetContext(),
			Error: fmt.Sprintf("plugin %s has no stage hook %q", s.name, m.GetHookId()),
		}}})
		return
	}
	c := s.begin(m.GetCallId(), KindStage, m.GetHookId(), nil, m.GetTimeoutMs(), m.GetTraceparent(), m.GetTracestate())
	if c == nil {
		return
	}
	ctx := m.GetContext()
	if ctx == nil {
		ctx = &pb.StageContext{Phase: m.GetStage()}
	}
	s.workers.run(func() { s.execStage(c, h, ctx) })
}

func (s *Session) execStage(c *Call, h *Hook, in *pb.StageContext) {
	out, failure := func() (out *pb.StageContext, failure string) {
		defer func() {
			if v := recover(); v != nil {
				out, failure = nil, s.panicked("stage hook "+c.name, c, v)
			}
		}()
		out, err := h.Run(c, in)
		if err != nil {
			return nil, fmt.Sprintf("stage hook %s: %s", c.name, errText(err))
		}
		if out == nil {
			out = in
		}
		return out, ""
	}()
	if !s.end(c) {
		return
	}
	s.w.send(s.stageResultMessage(c, out, failure))
}

func (s *Session) handleEvent(m *pb.HandleEvent) {
	var trig Trigger
	if t := m.GetTrigger(); t != nil {
		trig = Trigger{Type: TriggerType(t.GetType()), Pattern: t.GetPattern()}
	}
	e := s.events[trig]
	if e == nil || m.GetTrigger() == nil {
		what := "(none given)"
		if m.GetTrigger() != nil {
			what = trig.String()
		}
		s.w.send(&pb.PluginMessage{Msg: &pb.PluginMessage_EventDone{EventDone: &pb.EventDone{
			CallId: m.GetCallId(), Error: fmt.Sprintf("plugin %s has no event handler for trigger %s", s.name, what),
		}}})
		return
	}
	c := s.begin(m.GetCallId(), KindEvent, trig.String(), m.GetSender(), m.GetTimeoutMs(), m.GetTraceparent(), m.GetTracestate())
	if c == nil {
		return
	}
	snd := &Sender{c: c, message: m.GetMessage(), params: m.GetParams(), trigger: trig}
	s.workers.run(func() { s.execEvent(c, e, snd) })
}

func (s *Session) execEvent(c *Call, e *Event, snd *Sender) {
	failure := func() (failure string) {
		defer func() {
			if v := recover(); v != nil {
				failure = s.panicked("event handler of trigger "+c.name, c, v)
			}
		}()
		if err := e.Handle(snd); err != nil {
			return fmt.Sprintf("event handler of trigger %s: %s", c.name, errText(err))
		}
		return ""
	}()
	if !s.end(c) {
		return
	}
	msg := &pb.EventDone{CallId: c.id, Error: failure}
	if !utf8.ValidString(failure) {
		msg.Error = fmt.Sprintf("event handler of trigger %s failed; its error text is not valid UTF-8", c.name)
	}
	s.w.send(&pb.PluginMessage{Msg: &pb.PluginMessage_EventDone{EventDone: msg}})
}
