package hearthtest

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/hearth-dev/hearth/sdk-go/hearthpb"
)

// The cases of hearth-proto's permissions.rs tests, so the harness's matrix is the
// broker's.

func base() *pb.StageContext {
	return &pb.StageContext{
		RawMessage:      "hi",
		UserId:          "u",
		ContextMsgsJson: "[]",
		ToolCalls:       []*pb.ToolCallInfo{{Id: "c1", Name: "t", ArgumentsJson: "{}"}},
		ExtraJson:       "{}",
	}
}

// writeAll is a hook that writes every field.
func writeAll(c *pb.StageContext) *pb.StageContext {
	if len(c.ToolCalls) == 0 {
		c.ToolCalls = append(c.ToolCalls, &pb.ToolCallInfo{})
	}
	c.RawMessage = "changed"
	c.UserId = "mallory"
	c.GroupId = "g"
	c.ContextMsgsJson = `[{"role":"system","content":"x"}]`
	c.LlmText = "changed"
	c.ReasoningContent = "changed"
	if c.TokenUsage == nil {
		c.TokenUsage = map[string]int64{}
	}
	c.TokenUsage["total"] = 9
	c.ToolCalls[0].ArgumentsJson = `{"a":1}`
	c.ToolCalls[0].Deny = true
	c.ToolResults = append(c.ToolResults, &pb.ToolResultInfo{})
	c.FinalText = "changed"
	stop := "stop"
	c.Response = &stop
	c.Phase++
	c.Memory = append(c.Memory, &pb.MemItem{})
	c.NoMemory = true
	c.ExtraJson = `{"k":1}`
	return c
}

func TestEveryCellOfTheMatrix(t *testing.T) {
	expect := map[pb.Stage][]string{
		pb.Stage_STAGE_ON_INPUT:        {"raw_message", "response", "extra"},
		pb.Stage_STAGE_PRE_ACTION:      {"context_msgs", "response", "extra"},
		pb.Stage_STAGE_POST_ACTION:     {"llm_text", "tool_calls", "response", "extra"},
		pb.Stage_STAGE_BEFORE_TOOLCALL: {"tool_calls", "tool_call.deny", "response", "extra"},
		pb.Stage_STAGE_AFTER_TOOLCALL:  {"tool_results", "response", "extra"},
		pb.Stage_STAGE_BEFORE_OUTPUT:   {"final_text", "response", "extra"},
		pb.Stage_STAGE_AFTER_OUTPUT:    {},
	}
	for stage, allowed := range expect {
		ctx := base()
		ctx.Phase = stage
		v := visibleOf(stage, true)
		dropped := apply(stage, v, ctx, writeAll(view(stage, ctx, v)))
		seen := func(f string) bool {
			switch f {
			case "raw_message":
				return v.rawMessage
			case "context_msgs":
				return v.contextMsgs
			case "llm_text", "reasoning_content":
				return v.llmText
			case "tool_calls", "tool_call.deny":
				return v.toolCalls
			case "tool_results":
				return v.toolResults
			case "final_text":
				return v.finalText
			case "memory":
				return v.memory
			}
			return true
		}
		kept := map[string]bool{
			"raw_message":    ctx.RawMessage == "changed",
			"context_msgs":   ctx.ContextMsgsJson != "[]",
			"llm_text":       ctx.LlmText == "changed",
			"tool_calls":     ctx.ToolCalls[0].ArgumentsJson != "{}",
			"tool_call.deny": ctx.ToolCalls[0].Deny,
			"tool_results":   len(ctx.ToolResults) > 0,
			"final_text":     ctx.FinalText == "changed",
			"response":       ctx.Response != nil,
			"extra":          ctx.ExtraJson != "{}",
		}
		for f, k := range kept {
			if k != slices.Contains(allowed, f) {
				t.Errorf("%v: field %s kept = %v", stage, f, k)
			}
			if slices.Contains(dropped, f) != (seen(f) && !slices.Contains(allowed, f)) {
				t.Errorf("%v: dropped %s: %v", stage, f, dropped)
			}
		}
		for _, ro := range []string{"user_id", "group_id", "reasoning_content", "token_usage", "phase", "memory", "no_memory"} {
			if slices.Contains(dropped, ro) != seen(ro) {
				t.Errorf("%v: read-only %s: %v", stage, ro, dropped)
			}
		}
		if ctx.UserId != "u" || ctx.NoMemory {
			t.Errorf("%v: read-only fields changed", stage)
		}
	}
}

func TestReserializedJSONIsNotAWrite(t *testing.T) {
	ctx, p := base(), base()
	p.ContextMsgsJson = " [ ] "
	p.ExtraJson = "{ }"
	if d := apply(pb.Stage_STAGE_PRE_ACTION, visibleOf(pb.Stage_STAGE_PRE_ACTION, true), ctx, p); len(d) != 0 {
		t.Errorf("dropped %v", d)
	}
}

func TestFieldsNotSentAreNeitherAppliedNorReported(t *testing.T) {
	ctx := base()
	ctx.ContextMsgsJson = `[{"role":"user","content":"hi"}]`
	ctx.Memory = []*pb.MemItem{{}}
	ctx.Phase = pb.Stage_STAGE_PRE_ACTION
	v := visibleOf(pb.Stage_STAGE_PRE_ACTION, false)
	sent := view(pb.Stage_STAGE_PRE_ACTION, ctx, v)
	if sent.ContextMsgsJson != "" || sent.RawMessage != "" || len(sent.Memory) != 1 {
		t.Fatalf("view: %v", sent)
	}
	if d := apply(pb.Stage_STAGE_PRE_ACTION, v, ctx, sent); len(d) != 0 {
		t.Errorf("dropped %v", d)
	}
	if ctx.RawMessage != "hi" || ctx.ContextMsgsJson == "" {
		t.Errorf("context changed: %v", ctx)
	}
}

func TestDenyAloneIsAllowedOnlyBeforeToolcall(t *testing.T) {
	for stage := pb.Stage_STAGE_ON_INPUT; stage <= pb.Stage_STAGE_AFTER_OUTPUT; stage++ {
		ctx, p := base(), base()
		p.ToolCalls[0].Deny = true
		p.ToolCalls[0].DenyReason = "no"
		dropped := apply(stage, visible{toolCalls: true}, ctx, p)
		before := stage == pb.Stage_STAGE_BEFORE_TOOLCALL
		if ctx.ToolCalls[0].Deny != before {
			t.Errorf("%v: deny kept = %v", stage, ctx.ToolCalls[0].Deny)
		}
		if slices.Equal(dropped, []string{"tool_call.deny"}) == before {
			t.Errorf("%v: dropped %v", stage, dropped)
		}
	}
}

func TestViewDoesNotShareTheContext(t *testing.T) {
	ctx := base()
	sent := view(pb.Stage_STAGE_BEFORE_TOOLCALL, ctx, visibleOf(pb.Stage_STAGE_BEFORE_TOOLCALL, true))
	sent.ToolCalls[0].Deny = true
	if ctx.ToolCalls[0].Deny || !proto.Equal(ctx, base()) {
		t.Error("view shares tool calls with the context")
	}
}
