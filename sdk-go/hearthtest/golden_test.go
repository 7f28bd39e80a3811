package hearthtest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/hearth-dev/hearth/sdk-go/hearthpb"
)

// The harness's copy of the stage permission matrix (matrix.go) against the broker's,
// as tests/golden/stage-permissions.json records it (written by broker/src/golden.rs;
// the Python and Node harnesses check their copies the same way).

func fullContext(stage pb.Stage) *pb.StageContext {
	response := "earlier"
	return &pb.StageContext{
		RawMessage: "hi", UserId: "u", GroupId: "g",
		ContextMsgsJson: `[{"role":"user","content":"hi"}]`,
		LlmText:         "text", ReasoningContent: "why", TokenUsage: map[string]int64{"total": 1},
		ToolCalls:   []*pb.ToolCallInfo{{Id: "c1", Name: "t", Plugin: "p", ArgumentsJson: "{}"}},
		ToolResults: []*pb.ToolResultInfo{{CallId: "c1", Name: "t", Plugin: "p", Success: true, ResultJson: "1"}},
		FinalText:   "final", Response: &response, Phase: stage,
		Memory:   []*pb.MemItem{{Role: "user", Content: "m", Score: 1}},
		NoMemory: true, ExtraJson: `{"a":1}`,
	}
}

// fieldOf is the golden file's field of c, comparable with reflect.DeepEqual.
func fieldOf(c *pb.StageContext, field string) any {
	switch field {
	case "raw_message":
		return c.RawMessage
	case "user_id":
		return c.UserId
	case "group_id":
		return c.GroupId
	case "context_msgs":
		return c.ContextMsgsJson
	case "llm_text":
		return c.LlmText
	case "reasoning_content":
		return c.ReasoningContent
	case "token_usage":
		if len(c.TokenUsage) == 0 {
			return map[string]int64{}
		}
		return c.TokenUsage
	case "tool_calls":
		return fmt.Sprint(c.ToolCalls)
	case "tool_call.deny":
		var out []string
		for _, t := range c.ToolCalls {
			out = append(out, fmt.Sprint(t.Deny, t.DenyReason))
		}
		return out
	case "tool_results":
		return fmt.Sprint(c.ToolResults)
	case "final_text":
		return c.FinalText
	case "response":
		if c.Response == nil {
			return nil
		}
		return *c.Response
	case "phase":
		return c.Phase
	case "memory":
		return fmt.Sprint(c.Memory)
	case "no_memory":
		return c.NoMemory
	case "extra":
		return c.ExtraJson
	}
	panic("unknown field " + field)
}

// writeField is a hook's answer: what it was sent, with field written (a list it was
// not sent gets an entry).
func writeField(sent *pb.StageContext, field string) *pb.StageContext {
	c := proto.Clone(sent).(*pb.StageContext)
	switch field {
	case "raw_message":
		c.RawMessage = "changed"
	case "user_id":
		c.UserId = "mallory"
	case "group_id":
		c.GroupId = "other"
	case "context_msgs":
		c.ContextMsgsJson = `[{"role":"system","content":"x"}]`
	case "llm_text":
		c.LlmText = "changed"
	case "reasoning_content":
		c.ReasoningContent = "changed"
	case "token_usage":
		if c.TokenUsage == nil {
			c.TokenUsage = map[string]int64{}
		}
		c.TokenUsage["total"] = 9
	case "tool_calls":
		if len(c.ToolCalls) > 0 {
			c.ToolCalls[0].ArgumentsJson = `{"a":1}`
		} else {
			c.ToolCalls = append(c.ToolCalls, &pb.ToolCallInfo{Id: "new", Name: "t", ArgumentsJson: "{}"})
		}
	case "tool_call.deny":
		if len(c.ToolCalls) > 0 {
			c.ToolCalls[0].Deny, c.ToolCalls[0].DenyReason = true, "no"
		} else {
			c.ToolCalls = append(c.ToolCalls, &pb.ToolCallInfo{Id: "new", Deny: true, DenyReason: "no"})
		}
	case "tool_results":
		if len(c.ToolResults) > 0 {
			c.ToolResults[0].ResultJson = "2"
		} else {
			c.ToolResults = append(c.ToolResults, &pb.ToolResultInfo{CallId: "new", ResultJson: "2"})
		}
	case "final_text":
		c.FinalText = "changed"
	case "response":
		r := "changed"
		c.Response = &r
	case "phase":
		c.Phase = c.Phase%7 + 1
	case "memory":
		if len(c.Memory) > 0 {
			c.Memory[0].Content = "changed"
		} else {
			c.Memory = append(c.Memory, &pb.MemItem{Role: "user", Content: "changed", Score: 1})
		}
	case "no_memory":
		c.NoMemory = !c.NoMemory
	case "extra":
		c.ExtraJson = `{"k":1}`
	default:
		panic("unknown field " + field)
	}
	return c
}

func TestThePermissionMatrixMatchesTheBrokers(t *testing.T) {
	text, err := os.ReadFile(filepath.Join("..", "..", "tests", "golden", "stage-permissions.json"))
	if err != nil {
		t.Fatalf("the golden file of the repository: %v", err)
	}
	var golden struct {
		Fields []string `json:"fields"`
		Hooks  []struct {
			Stage         string                     `json:"stage"`
			NoContextMsgs bool                       `json:"no_context_msgs"`
			Fields        map[string]map[string]bool `json:"fields"`
		} `json:"hooks"`
	}
	if err := json.Unmarshal(text, &golden); err != nil {
		t.Fatal(err)
	}
	if len(golden.Hooks) != 8 || len(golden.Fields) != 16 {
		t.Fatalf("golden file shape changed: %d hooks, %d fields", len(golden.Hooks), len(golden.Fields))
	}
	var wrong []string
	for _, hook := range golden.Hooks {
		stage := pb.Stage(pb.Stage_value["STAGE_"+strings.ToUpper(hook.Stage)])
		if stage == pb.Stage_STAGE_UNSPECIFIED {
			t.Fatalf("unknown stage %q", hook.Stage)
		}
		vis := visibleOf(stage, !hook.NoContextMsgs)
		for _, field := range golden.Fields {
			full := fullContext(stage)
			sent := view(stage, full, vis)
			visible := reflect.DeepEqual(fieldOf(sent, field), fieldOf(full, field))
			current := proto.Clone(full).(*pb.StageContext)
			dropped := apply(stage, vis, current, writeField(sent, field))
			kept := !reflect.DeepEqual(fieldOf(full, field), fieldOf(current, field))
			want := hook.Fields[field]
			where := fmt.Sprintf("%s (no_context_msgs %v) %s", hook.Stage, hook.NoContextMsgs, field)
			if want["visible"] != visible || want["kept"] != kept {
				wrong = append(wrong, fmt.Sprintf("%s: golden %v, harness visible %v kept %v", where, want, visible, kept))
			}
			var wantDropped []string
			if visible && !kept {
				wantDropped = []string{field}
			}
			if !reflect.DeepEqual(dropped, wantDropped) {
				wrong = append(wrong, fmt.Sprintf("%s: reported %v", where, dropped))
			}
		}
	}
	if len(wrong) > 0 {
		t.Fatal(strings.Join(wrong, "\n"))
	}
}
