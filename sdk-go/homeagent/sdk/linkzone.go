package sdk

import (
	"fmt"

	pb "github.com/hearth-dev/hearth/sdk-go/hearthpb"
	"github.com/hearth-dev/hearth/sdk-go/internal/session"
)

// AITool is LinkZone's `ai.tool` (Hearth; seed linkzone-ai-tool-plugins.md, "tool
// 字段说明"): how the LLM is told about a tool and the call policies the broker
// enforces. JSON tags are LinkZone's names.
type AITool struct {
	// Parameters is the LinkZone parameter list; the broker derives the JSON Schema
	// from it (unless the tool's ToolDef has Parameters).
	Parameters []AIToolParameter `json:"parameters"`
	// Usage is what the tool does, for the LLM.
	Usage string `json:"usage"`
	// WhenToUse is when the LLM should call it.
	WhenToUse string `json:"when_to_use"`
	// Continue keeps the conversation going after the call (`continue`).
	Continue bool `json:"continue,omitempty"`
	// Chainable: nil or true = the agentic loop may go on after the call; false
	// ends it (LinkZone's Go side has *bool too).
	Chainable *bool `json:"chainable,omitempty"`
	// MaxCalls is the calls allowed per conversation; 0 = unlimited.
	MaxCalls int `json:"max_calls,omitempty"`
	// Confirm: the user must approve each call.
	Confirm bool `json:"confirm,omitempty"`
	// Cooldown is the seconds a user waits between calls; 0 = none.
	Cooldown float64 `json:"cooldown,omitempty"`
	// Timeout is the seconds a call may take; 0 = the plugin's call_timeout_s.
	Timeout float64 `json:"timeout,omitempty"`
}

// AIToolParameter is one LinkZone parameter definition.
type AIToolParameter struct {
	// Name of the argument. Required.
	Name string `json:"name"`
	// Type is string | number | integer | boolean | object | array ("" = string).
	Type string `json:"type"`
	// Description of the argument, for the LLM.
	Description string `json:"description"`
	// Required: the LLM must pass it.
	Required bool `json:"required,omitempty"`
	// Default is the value when absent; nil = none.
	Default interface{} `json:"default,omitempty"`
	// Enum are the allowed values; nil = any.
	Enum []interface{} `json:"enum,omitempty"`
	// Example is an example value as text.
	Example string `json:"example,omitempty"`
}

// AIToolResult is LinkZone's `executeTool` return value (Hearth): Success and
// Content for the LLM, optional structured Data, Error when it failed.
type AIToolResult struct {
	// Success says whether the call succeeded.
	Success bool `json:"success"`
	// Content is the text for the LLM.
	Content string `json:"content"`
	// Data is the structured result (sent as JSON); nil = none.
	Data interface{} `json:"data,omitempty"`
	// Error is the error text when Success is false (Content when empty).
	Error string `json:"error,omitempty"`
}

func (r AIToolResult) asMap() map[string]interface{} {
	m := map[string]interface{}{"success": r.Success, "content": r.Content, "error": r.Error}
	if r.Data != nil {
		m["data"] = r.Data
	}
	return m
}

var aiTypes = map[string]bool{"string": true, "number": true, "integer": true, "boolean": true, "object": true, "array": true}

// wire is the AiTool message; errors name the tool and the parameter.
func (a *AITool) wire(tool string) (*pb.AiTool, error) {
	if a.MaxCalls < 0 || a.Cooldown < 0 || a.Timeout < 0 {
		return nil, fmt.Errorf("tool %s: ai.tool: max_calls, cooldown and timeout must not be negative", tool)
	}
	w := &pb.AiTool{
		Usage: a.Usage, WhenToUse: a.WhenToUse, ContinueConversation: a.Continue, Chainable: a.Chainable,
		MaxCalls: uint32(a.MaxCalls), Confirm: a.Confirm, CooldownS: a.Cooldown, TimeoutS: a.Timeout,
	}
	seen := map[string]bool{}
	for i, p := range a.Parameters {
		if p.Name == "" {
			return nil, fmt.Errorf("tool %s: ai.tool.parameters[%d] has no name", tool, i)
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("tool %s: ai.tool parameter %q is listed twice", tool, p.Name)
		}
		seen[p.Name] = true
		typ := p.Type
		if typ == "" {
			typ = "string"
		}
		if !aiTypes[typ] {
			return nil, fmt.Errorf("tool %s: ai.tool parameter %q: type %q is not one of string, number, integer, boolean, object, array", tool, p.Name, p.Type)
		}
		wp := &pb.AiToolParameter{Name: p.Name, Type: typ, Description: p.Description, Required: p.Required, Example: p.Example}
		if p.Default != nil {
			text, err := session.EncodeJSON(p.Default)
			if err != nil {
				return nil, fmt.Errorf("tool %s: ai.tool parameter %q: default is not JSON: %v", tool, p.Name, err)
			}
			wp.DefaultJson = text
		}
		if p.Enum != nil {
			text, err := session.EncodeJSON(p.Enum)
			if err != nil {
				return nil, fmt.Errorf("tool %s: ai.tool parameter %q: enum is not JSON: %v", tool, p.Name, err)
			}
			wp.EnumJson = text
		}
		w.Parameters = append(w.Parameters, wp)
	}
	return w, nil
}

// AIInject is LinkZone's `ai.inject` (Hearth; seed "inject 字段说明"): a command
// format the LLM may write; the broker feeds such a command back as input, matches
// it against the plugin's triggers and calls their handlers. Set it with SetInject.
type AIInject struct {
	// Usage is what the command does, for the LLM.
	Usage string `json:"usage"`
	// Format is the command as the LLM writes it, e.g. `/weather {city}`. Required
	// (the broker rejects a spec without one).
	Format string `json:"format"`
	// Args maps an argument name to a one-sentence description for the LLM.
	Args map[string]string `json:"args,omitempty"`
}

func (a AIInject) wire() *pb.InjectSpec {
	args := make(map[string]string, len(a.Args))
	for k, v := range a.Args {
		args[k] = v
	}
	return &pb.InjectSpec{Usage: a.Usage, Format: a.Format, Args: args}
}

// Trigger is a LinkZone trigger (Hearth; `{type, pattern}` of `metadata.triggers`):
// which messages reach an event handler, e.g.
// sdk.Trigger{Type: sdk.TriggerCommand, Pattern: "/weather"}.
type Trigger = session.Trigger

// TriggerType is a LinkZone trigger type, numbered as LinkZone does.
type TriggerType = session.TriggerType

// The LinkZone trigger types.
const (
	// TriggerCommand (0): the message is the command or starts with it and a space;
	// the params are the words after it.
	TriggerCommand = session.TriggerCommand
	// TriggerKeyword (1): the message contains the keyword (case-insensitively).
	TriggerKeyword = session.TriggerKeyword
	// TriggerRegex (2): the regular expression finds a match; params are its groups.
	TriggerRegex = session.TriggerRegex
	// TriggerSegment (3): one segment of the message equals the pattern.
	TriggerSegment = session.TriggerSegment
	// TriggerEvent (4): a broker event, `message`, `reply` or `*`.
	TriggerEvent = session.TriggerEvent
)

// Sender is a message that matched one of the plugin's triggers (LinkZone's
// `sender`): Message(), Param(i), Params(), Reply(text), Caller(), Context().
type Sender = session.Sender

// Caller is who a call or message comes from (user, group, channel, session).
type Caller = session.Caller

// EventHandler handles a message that matched a trigger (LinkZone `handleEvent`):
// answer with sender.Reply(text), any number of times. A returned error (or a
// panic) is reported to the broker, which logs it.
type EventHandler func(sender *Sender) error
