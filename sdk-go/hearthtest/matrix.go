package hearthtest

import (
	"encoding/json"
	"maps"
	"reflect"
	"strings"

	"google.golang.org/protobuf/proto"

	pb "github.com/hearth-dev/hearth/sdk-go/hearthpb"
)

// The stage permission matrix, as the broker applies it (hearth-proto's
// permissions.rs, the reference; seed homeagent-plugin-sdk-api.md "阶段权限矩阵"):
// what a hook of a stage receives (view) and which of its writes are kept (apply).

// visible is the stage-specific fields a hook receives; the fields every stage
// sees (user_id, group_id, token_usage, phase, no_memory, extra, response) are
// always sent.
type visible struct {
	rawMessage, contextMsgs, memory, llmText, toolCalls, toolResults, finalText bool
}

func visibleOf(stage pb.Stage, contextMsgs bool) visible {
	return visible{
		rawMessage:  stage == pb.Stage_STAGE_ON_INPUT,
		contextMsgs: stage == pb.Stage_STAGE_PRE_ACTION && contextMsgs,
		memory:      stage == pb.Stage_STAGE_PRE_ACTION,
		llmText:     stage == pb.Stage_STAGE_POST_ACTION,
		toolCalls:   stage == pb.Stage_STAGE_POST_ACTION || stage == pb.Stage_STAGE_BEFORE_TOOLCALL,
		toolResults: stage == pb.Stage_STAGE_AFTER_TOOLCALL,
		finalText:   stage == pb.Stage_STAGE_BEFORE_OUTPUT || stage == pb.Stage_STAGE_AFTER_OUTPUT,
	}
}

// view is the context a hook of stage receives: ctx with only the visible fields
// and those every stage sees.
func view(stage pb.Stage, ctx *pb.StageContext, v visible) *pb.StageContext {
	pick := func(on bool, s string) string {
		if on {
			return s
		}
		return ""
	}
	out := &pb.StageContext{
		RawMessage:       pick(v.rawMessage, ctx.RawMessage),
		UserId:           ctx.UserId,
		GroupId:          ctx.GroupId,
		ContextMsgsJson:  pick(v.contextMsgs, ctx.ContextMsgsJson),
		LlmText:          pick(v.llmText, ctx.LlmText),
		ReasoningContent: pick(v.llmText, ctx.ReasoningContent),
		TokenUsage:       maps.Clone(ctx.TokenUsage),
		FinalText:        pick(v.finalText, ctx.FinalText),
		Phase:            stage,
		NoMemory:         ctx.NoMemory,
		ExtraJson:        ctx.ExtraJson,
	}
	if ctx.Response != nil {
		r := *ctx.Response
		out.Response = &r
	}
	if v.toolCalls {
		for _, c := range ctx.ToolCalls {
			out.ToolCalls = append(out.ToolCalls, proto.Clone(c).(*pb.ToolCallInfo))
		}
	}
	if v.toolResults {
		for _, r := range ctx.ToolResults {
			out.ToolResults = append(out.ToolResults, proto.Clone(r).(*pb.ToolResultInfo))
		}
	}
	if v.memory {
		for _, m := range ctx.Memory {
			out.Memory = append(out.Memory, proto.Clone(m).(*pb.MemItem))
		}
	}
	return out
}

// sameJSON: JSON texts a and b hold the same value (SDKs re-encode JSON, so the
// texts may differ in spacing or key order); an empty text is null.
func sameJSON(a, b string) bool {
	if a == b {
		return true
	}
	parse := func(s string) any {
		if strings.TrimSpace(s) == "" {
			return nil
		}
		var v any
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			return s
		}
		return v
	}
	return reflect.DeepEqual(parse(a), parse(b))
}

func sameCallsIgnoringDeny(a, b []*pb.ToolCallInfo) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Id != y.Id || x.Name != y.Name || x.Plugin != y.Plugin || !sameJSON(x.ArgumentsJson, y.ArgumentsJson) {
			return false
		}
	}
	return true
}

// denyChanged: a call of proposed has a deny flag or reason other than the same
// call (by id) of current (a new call counts as not denied).
func denyChanged(current, proposed []*pb.ToolCallInfo) bool {
	for _, p := range proposed {
		deny, reason := false, ""
		for _, c := range current {
			if c.Id == p.Id {
				deny, reason = c.Deny, c.DenyReason
				break
			}
		}
		if p.Deny != deny || p.DenyReason != reason {
			return true
		}
	}
	return false
}

func sameResults(a, b []*pb.ToolResultInfo) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.CallId != y.CallId || x.Name != y.Name || x.Plugin != y.Plugin || x.Success != y.Success || !sameJSON(x.ResultJson, y.ResultJson) {
			return false
		}
	}
	return true
}

func sameMemory(a, b []*pb.MemItem) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// apply applies the writes of proposed (a hook's answer) to current as stage allows
// and returns the names of the fields whose changes were dropped. Only the fields the
// hook received are looked at.
func apply(stage pb.Stage, v visible, current, proposed *pb.StageContext) []string {
	var dropped []string
	take := func(allowed, changed bool, name string) bool {
		if changed && !allowed {
			dropped = append(dropped, name)
		}
		return changed && allowed
	}
	if v.rawMessage && take(stage == pb.Stage_STAGE_ON_INPUT, proposed.RawMessage != current.RawMessage, "raw_message") {
		current.RawMessage = proposed.RawMessage
	}
	if v.contextMsgs && take(stage == pb.Stage_STAGE_PRE_ACTION, !sameJSON(proposed.ContextMsgsJson, current.ContextMsgsJson), "context_msgs") {
		current.ContextMsgsJson = proposed.ContextMsgsJson
	}
	if v.llmText && take(stage == pb.Stage_STAGE_POST_ACTION, proposed.LlmText != current.LlmText, "llm_text") {
		current.LlmText = proposed.LlmText
	}
	if v.toolCalls {
		callsChanged := !sameCallsIgnoringDeny(proposed.ToolCalls, current.ToolCalls)
		denyDiff := denyChanged(current.ToolCalls, proposed.ToolCalls)
		switch stage {
		case pb.Stage_STAGE_BEFORE_TOOLCALL:
			if callsChanged || denyDiff {
				current.ToolCalls = proposed.ToolCalls
			}
		case pb.Stage_STAGE_POST_ACTION:
			take(false, denyDiff, "tool_call.deny")
			if callsChanged {
				current.ToolCalls = proposed.ToolCalls
				for _, c := range current.ToolCalls {
					c.Deny, c.DenyReason = false, ""
				}
			}
		default:
			take(false, callsChanged, "tool_calls")
			take(false, denyDiff, "tool_call.deny")
		}
	}
	if v.toolResults && take(stage == pb.Stage_STAGE_AFTER_TOOLCALL, !sameResults(proposed.ToolResults, current.ToolResults), "tool_results") {
		current.ToolResults = proposed.ToolResults
	}
	if v.finalText && take(stage == pb.Stage_STAGE_BEFORE_OUTPUT, proposed.FinalText != current.FinalText, "final_text") {
		current.FinalText = proposed.FinalText
	}
	respChanged := (proposed.Response == nil) != (current.Response == nil) ||
		(proposed.Response != nil && *proposed.Response != *current.Response)
	if take(stage != pb.Stage_STAGE_AFTER_OUTPUT, respChanged, "response") {
		current.Response = proposed.Response
	}
	if take(stage != pb.Stage_STAGE_AFTER_OUTPUT, !sameJSON(proposed.ExtraJson, current.ExtraJson), "extra") {
		current.ExtraJson = proposed.ExtraJson
	}
	take(false, proposed.UserId != current.UserId, "user_id")
	take(false, proposed.GroupId != current.GroupId, "group_id")
	take(false, v.llmText && proposed.ReasoningContent != current.ReasoningContent, "reasoning_content")
	take(false, !maps.Equal(proposed.TokenUsage, current.TokenUsage), "token_usage")
	take(false, proposed.Phase != current.Phase, "phase")
	take(false, v.memory && !sameMemory(proposed.Memory, current.Memory), "memory")
	take(false, proposed.NoMemory != current.NoMemory, "no_memory")
	return dropped
}
