package session

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"unicode/utf8"
	"unsafe"

	"google.golang.org/protobuf/proto"

	pb "github.com/hearth-dev/hearth/sdk-go/hearthpb"
)

// Result is the outcome of a tool call, the wire's ToolResult without its call id.
type Result struct {
	// Success says whether the call succeeded.
	Success bool
	// Content is the text for the LLM.
	Content string
	// DataJSON is the structured result as JSON text; "" = none.
	DataJSON string
	// Error is the error text when Success is false.
	Error string
}

// Fail is a failed Result with error text msg.
func Fail(msg string) Result { return Result{Error: msg} }

// ValueResult maps a HomeAgent handler's outcome (proto/README.md step 5): an error
// fails with its text; nil is an empty success; a string (or []byte) is the content
// as is; json.RawMessage is content and data as is; a map with `isError: true` fails
// with its `content` (else its `error`) as the error text; anything else is JSON in
// both content and data_json. tool names the tool in an encoding error.
func ValueResult(tool string, v any, err error) Result {
	if err != nil {
		return Fail(errText(err))
	}
	switch x := v.(type) {
	case nil:
		return Result{Success: true}
	case string:
		return Result{Success: true, Content: x}
	case json.RawMessage:
		text := string(bytes.TrimSpace(x))
		return Result{Success: true, Content: text, DataJSON: text}
	case []byte:
		return Result{Success: true, Content: string(x)}
	case map[string]any:
		if isErr, _ := x["isError"].(bool); isErr {
			msg := textOf(x["content"])
			if msg == "" {
				msg = textOf(x["error"])
			}
			if msg == "" {
				msg = "tool reported an error"
			}
			return Fail(msg)
		}
	}
	text, encErr := EncodeJSON(v)
	if encErr != nil {
		return Fail(fmt.Sprintf("tool %s: result is not JSON: %v", tool, encErr))
	}
	return Result{Success: true, Content: text, DataJSON: text}
}

// LinkZoneResult maps a LinkZone `executeTool` value: a map with a boolean
// `success` is `{success, content, data?, error?}` (a failure without an error text
// takes its content as the error); anything else is mapped as ValueResult does.
func LinkZoneResult(tool string, v any, err error) Result {
	m, ok := v.(map[string]any)
	if err != nil || !ok {
		return ValueResult(tool, v, err)
	}
	success, ok := m["success"].(bool)
	if !ok {
		return ValueResult(tool, v, err)
	}
	r := Result{Success: success, Content: textOf(m["content"]), Error: textOf(m["error"])}
	if d, ok := m["data"]; ok && d != nil {
		text, encErr := EncodeJSON(d)
		if encErr != nil {
			return Fail(fmt.Sprintf("tool %s: result data is not JSON: %v", tool, encErr))
		}
		r.DataJSON = text
	}
	if !r.Success && r.Error == "" {
		r.Error = r.Content
	}
	return r
}

// textOf is v as text: a string as is, nil as "", anything else as JSON.
func textOf(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	}
	text, err := EncodeJSON(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return text
}

// errText is err's text, never empty.
func errText(err error) string {
	if msg := err.Error(); msg != "" {
		return msg
	}
	return fmt.Sprintf("%T", err)
}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// EncodeJSON is v as JSON text the way the other SDKs write it: HTML characters not
// escaped (`<` stays `<`), no trailing newline. Map keys come out sorted.
func EncodeJSON(v any) (string, error) {
	buf := bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	defer bufPool.Put(buf)
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	b := buf.Bytes()
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
	}
	return string(b), nil
}

// UnmarshalString is json.Unmarshal of text without copying it (json.Unmarshal
// neither keeps nor changes its input).
func UnmarshalString(text string, v any) error {
	return json.Unmarshal(unsafe.Slice(unsafe.StringData(text), len(text)), v)
}

// DecodeArgs decodes a tool's arguments object (JSON text; empty or null = no
// arguments) into a map that is never nil. Numbers become float64, as the seed's
// in-process HomeAgent gave them.
func DecodeArgs(text string) (map[string]any, error) {
	var args map[string]any
	if len(text) > 0 {
		if err := UnmarshalString(text, &args); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) && te.Field == "" {
				return nil, fmt.Errorf("arguments are not a JSON object (got a JSON %s)", te.Value)
			}
			return nil, fmt.Errorf("arguments are not a JSON object: %v", err)
		}
	}
	if args == nil {
		args = map[string]any{}
	}
	return args, nil
}

// resultOverhead bounds what a ToolResult message adds around its strings (tags,
// lengths, call id, the PluginMessage wrapper).
const resultOverhead = 64

// toolResultMessage is the ToolResult of call c, or an error result in its place
// when r cannot be sent: over the message limit, or text that is not UTF-8 (either
// would end the whole stream). A failure without an error text gets one.
func (s *Session) toolResultMessage(c *Call, r Result) *pb.PluginMessage {
	if !r.Success && r.Error == "" {
		r.Error = fmt.Sprintf("tool %s failed without an error message", c.name)
	}
	if size := len(r.Content) + len(r.DataJSON) + len(r.Error) + resultOverhead; size > MaxMessageBytes {
		msg := fmt.Sprintf("tool %s: result is %d bytes, over the %d MiB message limit", c.name, size-resultOverhead, MaxMessageBytes>>20)
		s.logf("call %d: %s; sent an error result instead", c.id, msg)
		r = Fail(msg)
	} else if field := invalidResultText(&r); field != "" {
		msg := fmt.Sprintf("tool %s: result %s is not valid UTF-8", c.name, field)
		s.logf("call %d: %s; sent an error result instead", c.id, msg)
		r = Fail(msg)
	}
	return &pb.PluginMessage{Msg: &pb.PluginMessage_ToolResult{ToolResult: &pb.ToolResult{
		CallId: c.id, Success: r.Success, Content: r.Content, DataJson: r.DataJSON, Error: r.Error,
	}}}
}

func invalidResultText(r *Result) string {
	switch {
	case !utf8.ValidString(r.Content):
		return "content"
	case !utf8.ValidString(r.DataJSON):
		return "data"
	case !utf8.ValidString(r.Error):
		return "error text"
	}
	return ""
}

// stageResultMessage is the StageResult of hook call c, or an error answer when the
// context cannot be sent (over the limit, not UTF-8).
func (s *Session) stageResultMessage(c *Call, ctx *pb.StageContext, hookErr string) *pb.PluginMessage {
	res := &pb.StageResult{CallId: c.id, Context: ctx, Error: hookErr}
	if !utf8.ValidString(hookErr) {
		res.Error = fmt.Sprintf("stage hook %s: its error text is not valid UTF-8", c.name)
		res.Context = nil
	}
	if ctx != nil {
		if field := invalidStageText(ctx); field != "" {
			res.Error = fmt.Sprintf("stage hook %s: context field %s is not valid UTF-8", c.name, field)
			res.Context = nil
			s.logf("call %d: %s; sent an error instead", c.id, res.Error)
		} else if size := ctxSize(ctx); size > MaxMessageBytes-resultOverhead && proto.Size(ctx) > MaxMessageBytes-resultOverhead {
			size = proto.Size(ctx)
			res.Error = fmt.Sprintf("stage hook %s: result is %d bytes, over the %d MiB message limit", c.name, size, MaxMessageBytes>>20)
			res.Context = nil
			s.logf("call %d: %s; sent an error instead", c.id, res.Error)
		}
	}
	return &pb.PluginMessage{Msg: &pb.PluginMessage_StageResult{StageResult: res}}
}

// invalidStageText is the first string field of ctx that is not valid UTF-8, "" when
// all are (a hand-written walk: this runs for every hook call).
func invalidStageText(c *pb.StageContext) string {
	check := []struct {
		name, v string
	}{
		{"raw_message", c.RawMessage}, {"user_id", c.UserId}, {"group_id", c.GroupId},
		{"context_msgs", c.ContextMsgsJson}, {"llm_text", c.LlmText},
		{"reasoning_content", c.ReasoningContent}, {"final_text", c.FinalText},
		{"response", c.GetResponse()}, {"extra", c.ExtraJson},
	}
	for _, f := range check {
		if !utf8.ValidString(f.v) {
			return f.name
		}
	}
	for k := range c.TokenUsage {
		if !utf8.ValidString(k) {
			return "token_usage"
		}
	}
	for i, t := range c.ToolCalls {
		if !utf8.ValidString(t.Id) || !utf8.ValidString(t.Name) || !utf8.ValidString(t.Plugin) ||
			!utf8.ValidString(t.ArgumentsJson) || !utf8.ValidString(t.DenyReason) {
			return fmt.Sprintf("tool_calls[%d]", i)
		}
	}
	for i, r := range c.ToolResults {
		if !utf8.ValidString(r.CallId) || !utf8.ValidString(r.Name) || !utf8.ValidString(r.Plugin) ||
			!utf8.ValidString(r.ResultJson) {
			return fmt.Sprintf("tool_results[%d]", i)
		}
	}
	for i, m := range c.Memory {
		if !utf8.ValidString(m.Role) || !utf8.ValidString(m.Content) {
			return fmt.Sprintf("memory[%d]", i)
		}
	}
	return ""
}

// ctxSize is an upper bound of ctx's encoded size that costs no encoding: its
// strings plus a generous overhead per field and item. Only when it is near the
// limit is the exact size computed.
func ctxSize(c *pb.StageContext) int {
	n := len(c.RawMessage) + len(c.UserId) + len(c.GroupId) + len(c.ContextMsgsJson) + len(c.LlmText) +
		len(c.ReasoningContent) + len(c.FinalText) + len(c.GetResponse()) + len(c.ExtraJson) + 256
	for k := range c.TokenUsage {
		n += len(k) + 24
	}
	for _, t := range c.ToolCalls {
		n += len(t.Id) + len(t.Name) + len(t.Plugin) + len(t.ArgumentsJson) + len(t.DenyReason) + 40
	}
	for _, r := range c.ToolResults {
		n += len(r.CallId) + len(r.Name) + len(r.Plugin) + len(r.ResultJson) + 40
	}
	for _, m := range c.Memory {
		n += len(m.Role) + len(m.Content) + 32
	}
	return n
}
