package sdk

import (
	"context"
	"fmt"
	"sync"
	"unsafe"

	pb "github.com/hearth-dev/hearth/sdk-go/hearthpb"
	"github.com/hearth-dev/hearth/sdk-go/internal/session"
)

// Stage is a stage of the seed's message pipeline.
type Stage string

// The seed's stages, in pipeline order.
const (
	// StageOnInput: a message arrived, untouched (RawMessage writable).
	StageOnInput Stage = "on_input"
	// StagePreAction: before the LLM call, context ready (ContextMsgs writable).
	StagePreAction Stage = "pre_action"
	// StagePostAction: the LLM answered (LLMText, ToolCalls writable).
	StagePostAction Stage = "post_action"
	// StageBeforeToolcall: before one tool call (ToolCalls and their Deny writable).
	StageBeforeToolcall Stage = "before_toolcall"
	// StageAfterToolcall: after one tool call (ToolResults writable).
	StageAfterToolcall Stage = "after_toolcall"
	// StageBeforeOutput: the final text is ready (FinalText writable).
	StageBeforeOutput Stage = "before_output"
	// StageAfterOutput: the reply was sent (read only).
	StageAfterOutput Stage = "after_output"
)

// stages are the stages in wire order (pb.Stage value - 1).
var stages = [...]Stage{StageOnInput, StagePreAction, StagePostAction, StageBeforeToolcall,
	StageAfterToolcall, StageBeforeOutput, StageAfterOutput}

func (st Stage) wire() pb.Stage {
	for i, s := range stages {
		if s == st {
			return pb.Stage(i + 1)
		}
	}
	return pb.Stage_STAGE_UNSPECIFIED
}

func stageOf(w pb.Stage) Stage {
	if w >= 1 && int(w) <= len(stages) {
		return stages[w-1]
	}
	return ""
}

// StageHandler is the seed's stage hook: it reads and changes ctx in place. A
// returned error (or a panic) is logged by the broker, and the pipeline goes on
// without this hook's writes. hearth.StageCall(ctx) reaches the running call.
type StageHandler func(ctx *StageContext) error

// StageHandlerContext is a StageHandler that also gets the call's context
// (Hearth): cancelled when the broker cancels the hook (its timeout) or the plugin
// shuts down, carrying the broker's trace.
type StageHandlerContext func(ctx context.Context, sc *StageContext) error

// StageOptions are Hearth's options of a stage hook.
type StageOptions struct {
	// OwnToolsOnly: in before_toolcall / after_toolcall the hook sees only calls of
	// this plugin's own tools (the seed's RegisterStageOwnTools).
	OwnToolsOnly bool
	// NoContextMsgs: a pre_action hook that does not read ContextMsgs; the broker
	// does not send the history to it and ignores what it leaves there.
	NoContextMsgs bool
}

// StageContext is the seed's stage context. A hook receives the fields its stage
// may read (the permission matrix) plus UserID, GroupID, TokenUsage, Phase,
// NoMemory, Extra and Response; after it returns the broker keeps only what the
// stage may write:
//
//	field          on_input pre_action post_action before_toolcall after_toolcall before_output after_output
//	RawMessage     rw       -          -           -               -              -             -
//	ContextMsgs    -        rw         -           -               -              -             -
//	LLMText        -        -          rw          -               -              -             -
//	ToolCalls      -        -          rw          rw              -              -             -
//	ToolCall.Deny  -        -          -           rw              -              -             -
//	ToolResults    -        -          -           -               rw             -             -
//	FinalText      -        -          -           -               -              rw            r
//	Response       rw       rw         rw          rw              rw             rw            -
//
// Extra is writable in every stage but after_output (Hearth), so hooks can pass data
// along a turn. Setting Response at any stage short-circuits the pipeline to
// after_output with that text as the reply. JSON values (ContextMsgs, Extra, tool
// arguments and results) are decoded with encoding/json: numbers are float64.
type StageContext struct {
	mu sync.RWMutex
	// RawMessage is the input text as it arrived (on_input may rewrite it).
	RawMessage string
	// UserID identifies the user.
	UserID string
	// GroupID identifies the group ("" outside groups).
	GroupID string
	// ContextMsgs are the messages sent to the LLM (pre_action may add some).
	ContextMsgs []map[string]interface{}
	// LLMText is the LLM's reply text (post_action may rewrite it).
	LLMText string
	// ReasoningContent is the LLM's reasoning text.
	ReasoningContent string
	// TokenUsage is the token counts of the turn so far.
	TokenUsage map[string]int
	// ToolCalls are the tool calls the LLM asked for (before_toolcall: the one).
	ToolCalls []ToolCall
	// ToolResults are the tool results (after_toolcall: the one).
	ToolResults []ToolResult
	// FinalText is the reply about to be sent (before_output may rewrite it).
	FinalText string
	// Response, when set, short-circuits the pipeline with this reply.
	Response *string
	// Phase is the stage running.
	Phase Stage
	// Memory is the recalled memory (pre_action).
	Memory []MemItem
	// NoMemory says the input is not recorded in memory.
	NoMemory bool
	// Extra is the extension map (never nil in a hook).
	Extra map[string]interface{}
}

// Lock locks the context for writing (the seed's ctx.Lock(), for hooks that hand
// it to goroutines of their own).
func (c *StageContext) Lock() { c.mu.Lock() }

// Unlock undoes Lock.
func (c *StageContext) Unlock() { c.mu.Unlock() }

// RLock locks the context for reading.
func (c *StageContext) RLock() { c.mu.RLock() }

// RUnlock undoes RLock.
func (c *StageContext) RUnlock() { c.mu.RUnlock() }

// ToolCall is the seed's tool call as stage hooks see it, plus Deny and DenyReason
// (Hearth: the permission matrix's ToolCall.deny).
type ToolCall struct {
	// ID is the call's id.
	ID string `json:"id"`
	// Name is the tool's name.
	Name string `json:"name"`
	// Plugin is the plugin the tool belongs to.
	Plugin string `json:"plugin,omitempty"`
	// Arguments are the call's arguments.
	Arguments map[string]interface{} `json:"arguments"`
	// Deny, set in before_toolcall, refuses this call only: the LLM gets "denied by
	// <plugin>" (with DenyReason) as its result and the loop goes on.
	Deny bool `json:"deny,omitempty"`
	// DenyReason says why, for the LLM.
	DenyReason string `json:"deny_reason,omitempty"`
}

// ToolResult is the seed's tool result as stage hooks see it.
type ToolResult struct {
	// CallID is the ToolCall's ID.
	CallID string `json:"call_id"`
	// Name is the tool's name.
	Name string `json:"name"`
	// Plugin is the plugin the tool belongs to.
	Plugin string `json:"plugin,omitempty"`
	// Success says whether the call succeeded.
	Success bool `json:"success"`
	// Result is the call's outcome as every SDK's after_toolcall hooks see it (the
	// broker's ToolResultInfo.result_json, decoded): a map {"success": bool,
	// "content": string (what the LLM reads), "data": the handler's value as JSON or
	// nil, "error": string}. A hook that changes the result writes that shape back;
	// anything else (a bare string) reads as a failed call.
	Result interface{} `json:"result"`
}

// MemItem is the seed's recalled memory item.
type MemItem struct {
	// Role is system / user / assistant.
	Role string `json:"role"`
	// Content is the text.
	Content string `json:"content"`
	// Score is the relevance score.
	Score float64 `json:"score"`
}

// RegisterStage is the seed's RegisterStage: handler runs at stage; hooks of one
// stage run in registration order, each seeing the previous one's writes. Only in
// Start (hooks travel in the Register message); an unknown stage or a call after
// Start is an error that makes serving fail (in Start) or is logged (after).
func (s *PluginSDK) RegisterStage(stage Stage, handler StageHandler) {
	s.registerStage(stage, StageOptions{}, seedHook(handler))
}

// RegisterStageOwnTools is the seed's RegisterStageOwnTools: in before_toolcall and
// after_toolcall the hook sees only calls of this plugin's own tools; at other
// stages it is RegisterStage.
func (s *PluginSDK) RegisterStageOwnTools(stage Stage, handler StageHandler) {
	s.registerStage(stage, StageOptions{OwnToolsOnly: true}, seedHook(handler))
}

// RegisterStageContext is RegisterStage for a handler that takes the call's
// context (Hearth).
func (s *PluginSDK) RegisterStageContext(stage Stage, handler StageHandlerContext) {
	s.registerStage(stage, StageOptions{}, ctxHook(handler))
}

// RegisterStageWith is RegisterStageContext with StageOptions (Hearth); it returns
// the error RegisterStage can only log.
func (s *PluginSDK) RegisterStageWith(stage Stage, opts StageOptions, handler StageHandlerContext) error {
	return s.addStage(stage, opts, ctxHook(handler))
}

type hookFunc func(c *session.Call, sc *StageContext) error

func seedHook(h StageHandler) hookFunc {
	if h == nil {
		return nil
	}
	return func(c *session.Call, sc *StageContext) error {
		defer c.Bind(unsafe.Pointer(sc))()
		return h(sc)
	}
}

func ctxHook(h StageHandlerContext) hookFunc {
	if h == nil {
		return nil
	}
	return func(c *session.Call, sc *StageContext) error { return h(c.Context(), sc) }
}

func (s *PluginSDK) registerStage(stage Stage, opts StageOptions, run hookFunc) {
	if err := s.addStage(stage, opts, run); err != nil {
		s.fail(err)
	}
}

func (s *PluginSDK) addStage(stage Stage, opts StageOptions, run hookFunc) error {
	w := stage.wire()
	if w == pb.Stage_STAGE_UNSPECIFIED {
		return fmt.Errorf("%s: RegisterStage: unknown stage %q (on_input, pre_action, post_action, before_toolcall, after_toolcall, before_output, after_output)", s.where(), string(stage))
	}
	if run == nil {
		return fmt.Errorf("%s: stage hook %s: handler is nil", s.where(), stage)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return fmt.Errorf("%s: stage hook %s: stage hooks can only be registered in Start", s.where(), stage)
	}
	id := fmt.Sprintf("%s#%d", stage, len(s.hooks))
	s.hooks = append(s.hooks, &session.Hook{
		Spec: &pb.StageHook{Stage: w, OwnToolsOnly: opts.OwnToolsOnly, HookId: id, NoContextMsgs: opts.NoContextMsgs},
		Run: func(c *session.Call, in *pb.StageContext) (*pb.StageContext, error) {
			sc, err := fromWire(in)
			if err != nil {
				return nil, err
			}
			if err := run(c, sc); err != nil {
				return nil, err
			}
			return toWire(sc, in)
		},
	})
	return nil
}

// fromWire decodes the broker's context; its JSON fields are decoded once here.
func fromWire(w *pb.StageContext) (*StageContext, error) {
	sc := &StageContext{
		RawMessage:       w.RawMessage,
		UserID:           w.UserId,
		GroupID:          w.GroupId,
		LLMText:          w.LlmText,
		ReasoningContent: w.ReasoningContent,
		FinalText:        w.FinalText,
		Phase:            stageOf(w.Phase),
		NoMemory:         w.NoMemory,
	}
	if w.Response != nil {
		r := *w.Response
		sc.Response = &r
	}
	if w.ContextMsgsJson != "" {
		if err := session.UnmarshalString(w.ContextMsgsJson, &sc.ContextMsgs); err != nil {
			return nil, fmt.Errorf("context_msgs_json is not a JSON array of objects: %v", err)
		}
	}
	if len(w.TokenUsage) > 0 {
		sc.TokenUsage = make(map[string]int, len(w.TokenUsage))
		for k, v := range w.TokenUsage {
			sc.TokenUsage[k] = int(v)
		}
	}
	if len(w.ToolCalls) > 0 {
		sc.ToolCalls = make([]ToolCall, len(w.ToolCalls))
		for i, t := range w.ToolCalls {
			tc := ToolCall{ID: t.Id, Name: t.Name, Plugin: t.Plugin, Deny: t.Deny, DenyReason: t.DenyReason}
			if t.ArgumentsJson != "" {
				if err := session.UnmarshalString(t.ArgumentsJson, &tc.Arguments); err != nil {
					return nil, fmt.Errorf("tool_calls[%d].arguments_json is not a JSON object: %v", i, err)
				}
			}
			if tc.Arguments == nil {
				tc.Arguments = map[string]interface{}{}
			}
			sc.ToolCalls[i] = tc
		}
	}
	if len(w.ToolResults) > 0 {
		sc.ToolResults = make([]ToolResult, len(w.ToolResults))
		for i, r := range w.ToolResults {
			tr := ToolResult{CallID: r.CallId, Name: r.Name, Plugin: r.Plugin, Success: r.Success}
			if r.ResultJson != "" {
				if err := session.UnmarshalString(r.ResultJson, &tr.Result); err != nil {
					return nil, fmt.Errorf("tool_results[%d].result_json is not JSON: %v", i, err)
				}
			}
			sc.ToolResults[i] = tr
		}
	}
	if len(w.Memory) > 0 {
		sc.Memory = make([]MemItem, len(w.Memory))
		for i, m := range w.Memory {
			sc.Memory[i] = MemItem{Role: m.Role, Content: m.Content, Score: m.Score}
		}
	}
	if w.ExtraJson != "" {
		if err := session.UnmarshalString(w.ExtraJson, &sc.Extra); err != nil {
			return nil, fmt.Errorf("extra_json is not a JSON object: %v", err)
		}
	}
	if sc.Extra == nil {
		sc.Extra = map[string]interface{}{}
	}
	return sc, nil
}

// toWire writes the hook's context back into w, the message the broker sent (which
// the session owns), and returns it. Every field goes back as the hook left it; the
// broker keeps what the stage may write. An empty JSON value whose wire text was
// empty stays empty, so a hook that touched nothing changes nothing.
func toWire(sc *StageContext, w *pb.StageContext) (*pb.StageContext, error) {
	w.RawMessage = sc.RawMessage
	w.UserId = sc.UserID
	w.GroupId = sc.GroupID
	w.LlmText = sc.LLMText
	w.ReasoningContent = sc.ReasoningContent
	w.FinalText = sc.FinalText
	if p := sc.Phase.wire(); p != pb.Stage_STAGE_UNSPECIFIED || sc.Phase != "" {
		w.Phase = p
	}
	w.NoMemory = sc.NoMemory
	w.Response = nil
	if sc.Response != nil {
		r := *sc.Response
		w.Response = &r
	}
	var err error
	if w.ContextMsgsJson, err = jsonField(len(sc.ContextMsgs) == 0, w.ContextMsgsJson, "[]", sc.ContextMsgs); err != nil {
		return nil, fmt.Errorf("ContextMsgs: %v", err)
	}
	if !sameUsage(sc.TokenUsage, w.TokenUsage) {
		w.TokenUsage = make(map[string]int64, len(sc.TokenUsage))
		for k, v := range sc.TokenUsage {
			w.TokenUsage[k] = int64(v)
		}
	}
	calls := make([]*pb.ToolCallInfo, len(sc.ToolCalls))
	for i, t := range sc.ToolCalls {
		ci := &pb.ToolCallInfo{}
		if i < len(w.ToolCalls) {
			ci = w.ToolCalls[i]
		}
		args, err := jsonField(len(t.Arguments) == 0, ci.ArgumentsJson, "{}", t.Arguments)
		if err != nil {
			return nil, fmt.Errorf("ToolCalls[%d].Arguments: %v", i, err)
		}
		ci.Id, ci.Name, ci.Plugin, ci.ArgumentsJson, ci.Deny, ci.DenyReason = t.ID, t.Name, t.Plugin, args, t.Deny, t.DenyReason
		calls[i] = ci
	}
	w.ToolCalls = calls
	results := make([]*pb.ToolResultInfo, len(sc.ToolResults))
	for i, r := range sc.ToolResults {
		ri := &pb.ToolResultInfo{}
		if i < len(w.ToolResults) {
			ri = w.ToolResults[i]
		}
		text, err := jsonField(r.Result == nil, ri.ResultJson, "null", r.Result)
		if err != nil {
			return nil, fmt.Errorf("ToolResults[%d].Result: %v", i, err)
		}
		ri.CallId, ri.Name, ri.Plugin, ri.Success, ri.ResultJson = r.CallID, r.Name, r.Plugin, r.Success, text
		results[i] = ri
	}
	w.ToolResults = results
	if !sameMemory(sc.Memory, w.Memory) {
		w.Memory = make([]*pb.MemItem, len(sc.Memory))
		for i, m := range sc.Memory {
			w.Memory[i] = &pb.MemItem{Role: m.Role, Content: m.Content, Score: m.Score}
		}
	}
	if w.ExtraJson, err = jsonField(len(sc.Extra) == 0, w.ExtraJson, "{}", sc.Extra); err != nil {
		return nil, fmt.Errorf("Extra: %v", err)
	}
	return w, nil
}

// jsonField is the JSON text of v for a field whose wire text was old: when v is
// empty, old if it was empty too, else empty (the JSON text of an empty value).
func jsonField(isEmpty bool, old, empty string, v any) (string, error) {
	if isEmpty {
		if old == "" {
			return "", nil
		}
		return empty, nil
	}
	return session.EncodeJSON(v)
}

func sameUsage(a map[string]int, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || int64(v) != w {
			return false
		}
	}
	return true
}

func sameMemory(a []MemItem, b []*pb.MemItem) bool {
	if len(a) != len(b) {
		return false
	}
	for i, m := range a {
		if b[i].Role != m.Role || b[i].Content != m.Content || b[i].Score != m.Score {
			return false
		}
	}
	return true
}
