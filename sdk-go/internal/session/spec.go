package session

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/hearth-dev/hearth/sdk-go/hearthpb"
)

// Spec is what a plugin registers: the Register message's parts, each with the
// code that serves it.
type Spec struct {
	// Info is the plugin's metadata; an empty name becomes the session's name.
	Info *pb.PluginInfo
	// Tools in registration order.
	Tools []*Tool
	// Hooks in registration order (their ids must be unique).
	Hooks []*Hook
	// Inject is the LinkZone ai.inject spec; nil = none.
	Inject *pb.InjectSpec
	// Events are the LinkZone triggers with their handlers.
	Events []*Event
	// ConfigDefs are setting definitions declared up front.
	ConfigDefs []*pb.ConfigDef
}

// Tool is one tool: its wire spec and its handler. Run gets the decoded arguments
// (never nil) and returns the result; a panic in it becomes an error result.
type Tool struct {
	// Spec is the tool as registered.
	Spec *pb.ToolSpec
	// Run serves one call.
	Run func(c *Call, args map[string]any) Result
}

// Hook is one stage hook: its wire spec and its handler. Run gets the context the
// broker sent (never nil; it may change and return it) and returns the context to
// send back, or an error.
type Hook struct {
	// Spec is the hook as registered.
	Spec *pb.StageHook
	// Run serves one RunStage.
	Run func(c *Call, ctx *pb.StageContext) (*pb.StageContext, error)
}

// Event is one LinkZone trigger and the handler of the messages that match it.
type Event struct {
	// Trigger is what the messages match.
	Trigger Trigger
	// Handle serves one HandleEvent.
	Handle func(s *Sender) error
}

// TriggerType is a LinkZone trigger type, numbered as LinkZone numbers them (the
// wire's TriggerType).
type TriggerType int32

// The LinkZone trigger types (seed linkzone-ai-tool-plugins.md, `triggers`).
const (
	// TriggerCommand (0) matches a message that is the command or starts with it
	// and a space; the params are the words after it.
	TriggerCommand TriggerType = 0
	// TriggerKeyword (1) matches a message containing the keyword
	// (case-insensitively); the params are the other words.
	TriggerKeyword TriggerType = 1
	// TriggerRegex (2) matches when the regular expression (Rust regex syntax) finds
	// a match; the params are its groups, else the match.
	TriggerRegex TriggerType = 2
	// TriggerSegment (3) matches when one segment of the message (split at spaces
	// and punctuation) equals the pattern; the params are the other segments.
	TriggerSegment TriggerType = 3
	// TriggerEvent (4) matches a broker event: `message`, `reply` or `*` (all).
	TriggerEvent TriggerType = 4
)

// String is the type's name: command, keyword, regex, segment, event (or
// `type N` for an unknown number).
func (t TriggerType) String() string {
	switch t {
	case TriggerCommand:
		return "command"
	case TriggerKeyword:
		return "keyword"
	case TriggerRegex:
		return "regex"
	case TriggerSegment:
		return "segment"
	case TriggerEvent:
		return "event"
	}
	return fmt.Sprintf("type %d", int32(t))
}

// Trigger is a LinkZone trigger (`{type, pattern}` in `metadata.triggers`): which
// messages reach an event handler. The broker checks patterns (an empty pattern,
// an invalid regex or an unknown event name is rejected by name).
type Trigger struct {
	// Type is the kind of match (TriggerCommand …).
	Type TriggerType `json:"type"`
	// Pattern is the command, keyword, expression, segment or event name.
	Pattern string `json:"pattern"`
}

// String reads `command /weather`, `keyword 天气`, `regex ^a`, `event message`.
func (t Trigger) String() string { return t.Type.String() + " " + t.Pattern }

// Wire is the trigger as Register and HandleEvent carry it.
func (t Trigger) Wire() *pb.Trigger {
	return &pb.Trigger{Type: pb.TriggerType(t.Type), Pattern: t.Pattern}
}

// registerMessage checks spec and builds its Register message. Errors name the
// item: a duplicate tool name, hook id or trigger, a trigger type out of range,
// text that is not UTF-8, a registration over the message limit.
func registerMessage(plugin string, spec *Spec) (*pb.Register, error) {
	info := &pb.PluginInfo{Name: plugin}
	if spec.Info != nil {
		info = proto.Clone(spec.Info).(*pb.PluginInfo)
		if info.Name == "" {
			info.Name = plugin
		}
	}
	reg := &pb.Register{Plugin: info, Inject: spec.Inject, ConfigDefs: spec.ConfigDefs}
	seen := map[string]bool{}
	for _, t := range spec.Tools {
		if t == nil || t.Spec == nil || t.Run == nil {
			return nil, errors.New("a tool without a spec or handler")
		}
		if seen[t.Spec.Name] {
			return nil, fmt.Errorf("tool name %q is registered twice", t.Spec.Name)
		}
		seen[t.Spec.Name] = true
		reg.Tools = append(reg.Tools, t.Spec)
	}
	hooks := map[string]bool{}
	for _, h := range spec.Hooks {
		if h == nil || h.Spec == nil || h.Run == nil {
			return nil, errors.New("a stage hook without a spec or handler")
		}
		if hooks[h.Spec.HookId] {
			return nil, fmt.Errorf("stage hook id %q is registered twice", h.Spec.HookId)
		}
		hooks[h.Spec.HookId] = true
		reg.Stages = append(reg.Stages, h.Spec)
	}
	triggers := map[Trigger]bool{}
	for _, e := range spec.Events {
		if e == nil || e.Handle == nil {
			return nil, errors.New("a trigger without a handler")
		}
		if e.Trigger.Type < TriggerCommand || e.Trigger.Type > TriggerEvent {
			return nil, fmt.Errorf("trigger %s: type must be 0 (command) … 4 (event)", e.Trigger)
		}
		if triggers[e.Trigger] {
			return nil, fmt.Errorf("trigger %s is registered twice", e.Trigger)
		}
		triggers[e.Trigger] = true
		reg.Triggers = append(reg.Triggers, e.Trigger.Wire())
	}
	if path := invalidUTF8(reg.ProtoReflect(), ""); path != "" {
		return nil, fmt.Errorf("registration field %s is not valid UTF-8", path)
	}
	if n := proto.Size(reg); n > MaxMessageBytes-1024 {
		return nil, fmt.Errorf("the registration is %d bytes, over the %d MiB message limit", n, MaxMessageBytes>>20)
	}
	return reg, nil
}

// invalidUTF8 is the path of the first string field of m (or a map key) that is not
// valid UTF-8 — protobuf refuses to marshal such a message, and grpc-go would end the
// whole stream on it — or "" when every string is valid.
func invalidUTF8(m protoreflect.Message, prefix string) string {
	bad := ""
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := prefix + string(fd.Name())
		switch {
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len() && bad == ""; i++ {
				bad = invalidValue(fd, l.Get(i), fmt.Sprintf("%s[%d]", name, i))
			}
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				if ks, ok := k.Interface().(string); ok && !utf8.ValidString(ks) {
					bad = name + " key"
					return false
				}
				bad = invalidValue(fd.MapValue(), mv, fmt.Sprintf("%s[%q]", name, strings.ToValidUTF8(k.String(), "?")))
				return bad == ""
			})
		default:
			bad = invalidValue(fd, v, name)
		}
		return bad == ""
	})
	return bad
}

func invalidValue(fd protoreflect.FieldDescriptor, v protoreflect.Value, path string) string {
	switch fd.Kind() {
	case protoreflect.StringKind:
		if !utf8.ValidString(v.String()) {
			return path
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return invalidUTF8(v.Message(), path+".")
	}
	return ""
}

// CheckToolName checks a tool name as the broker does: non-empty, at most 64 bytes,
// letters, digits, `_` and `-` only (names every LLM API accepts).
func CheckToolName(name string) error {
	if name == "" {
		return fmt.Errorf("tool name is empty")
	}
	if len(name) > 64 {
		return fmt.Errorf("tool %q: name is %d bytes; at most 64", name, len(name))
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return fmt.Errorf("tool %q: name contains %q; use letters, digits, `_` and `-`", name, r)
		}
	}
	return nil
}

// SchemaJSON is the JSON text of a tool's parameter schema: nil is an object with no
// properties; otherwise it must encode as JSON and, when it has a "type", that must
// be "object" (the broker validates the schema itself further).
func SchemaJSON(params map[string]interface{}) (string, error) {
	if params == nil {
		return `{"type":"object","properties":{}}`, nil
	}
	if t, ok := params["type"]; ok && t != "object" {
		text, _ := json.Marshal(t)
		return "", fmt.Errorf("parameters must describe an object (\"type\": \"object\"), not %s", text)
	}
	text, err := EncodeJSON(params)
	if err != nil {
		return "", fmt.Errorf("parameters are not JSON: %v", err)
	}
	return text, nil
}
