package sdk

import (
	"context"
	"fmt"

	pb "github.com/hearth-dev/hearth/sdk-go/hearthpb"
	"github.com/hearth-dev/hearth/sdk-go/internal/session"
)

// ToolDef is the seed's tool definition: what the LLM sees of a tool.
type ToolDef struct {
	// Name is the tool's name; RegisterTool's name argument is the one used.
	Name string `json:"name"`
	// Plugin is the plugin the tool belongs to (informative).
	Plugin string `json:"plugin,omitempty"`
	// Description is what the LLM reads to decide whether to call the tool.
	Description string `json:"description"`
	// Parameters is the JSON Schema of the arguments object
	// (`{"type": "object", "properties": …}`); nil = no parameters.
	Parameters map[string]interface{} `json:"parameters"`
}

// ToolHandler is the seed's tool handler. args is the arguments object the LLM
// passed (never nil; numbers are float64). The value is the result: a string as
// is, anything else as JSON text (and as structured data); a map with
// "isError": true is an error result whose text is its "content" (the seed's
// advice for errors the LLM should not retry); a returned error is an error result
// with its text. hearth.CallFrom(args) reaches the running call (context,
// progress).
type ToolHandler func(args map[string]interface{}) (interface{}, error)

// ToolHandlerContext is a ToolHandler that also gets the call's context (Hearth):
// cancelled when the broker cancels the call or the plugin shuts down, carrying the
// broker's trace; hearth.CallFromContext(ctx) is the call.
type ToolHandlerContext func(ctx context.Context, args map[string]interface{}) (interface{}, error)

// ToolOptions are Hearth's options of a tool beyond the seed's ToolDef.
type ToolOptions struct {
	// AI is the tool's LinkZone `ai.tool` policies (confirm, cooldown, max_calls,
	// timeout, chainable, continue) and, when the ToolDef has no Parameters, its
	// parameter list; its result then maps as LinkZone's `{success, content, data,
	// error}` when the handler returns such a map. nil = none.
	AI *AITool
	// Serial asks the broker not to run this tool concurrently with other tool
	// calls of the same LLM turn.
	Serial bool
	// Title is a display name for people (MCP `title`).
	Title string
}

// RegisterTool is the seed's RegisterTool: it registers tool name (unique across
// all plugins; prefix it with the plugin's name) with its definition and handler.
//
// It fails, naming the tool, when the name is empty, longer than 64 bytes or has
// characters other than letters, digits, `_` and `-` (what every LLM API accepts),
// is already registered, or the Parameters are not a JSON Schema of an object (not
// encodable as JSON, or a "type" other than "object"). In Start the tool travels in
// the plugin's Register message (a refusal by the broker is logged). After Start
// returned it is registered at run time: RegisterTool sends it and returns the
// broker's answer.
func (s *PluginSDK) RegisterTool(name string, def ToolDef, handler ToolHandler) error {
	if handler == nil {
		return fmt.Errorf("%s: tool %q: handler is nil", s.where(), name)
	}
	return s.registerTool(name, def, ToolOptions{}, func(c *session.Call, args map[string]any) (any, error) {
		defer c.BindMap(args)()
		return handler(args)
	})
}

// RegisterToolContext is RegisterTool for a handler that takes the call's context
// (Hearth).
func (s *PluginSDK) RegisterToolContext(name string, def ToolDef, handler ToolHandlerContext) error {
	if handler == nil {
		return fmt.Errorf("%s: tool %q: handler is nil", s.where(), name)
	}
	return s.registerTool(name, def, ToolOptions{}, func(c *session.Call, args map[string]any) (any, error) {
		return handler(c.Context(), args)
	})
}

// RegisterToolWith is RegisterToolContext with ToolOptions (Hearth): LinkZone
// ai.tool policies, serial execution, a title.
func (s *PluginSDK) RegisterToolWith(name string, def ToolDef, opts ToolOptions, handler ToolHandlerContext) error {
	if handler == nil {
		return fmt.Errorf("%s: tool %q: handler is nil", s.where(), name)
	}
	return s.registerTool(name, def, opts, func(c *session.Call, args map[string]any) (any, error) {
		return handler(c.Context(), args)
	})
}

// RegisterAITool registers a LinkZone direct-mode tool (Hearth; seed
// linkzone-ai-tool-plugins.md, `ai.tool` + `executeTool`): the broker derives the
// JSON Schema from ai.Parameters and the description from ai.Usage and
// ai.WhenToUse, and enforces ai's policies. The handler may return LinkZone's
// `map[string]interface{}{"success": …, "content": …, "data": …, "error": …}` (or
// an AIToolResult); other values map as in RegisterTool. hearth.CallFrom(args)
// reaches the call.
func (s *PluginSDK) RegisterAITool(name string, ai AITool, handler ToolHandler) error {
	if handler == nil {
		return fmt.Errorf("%s: tool %q: handler is nil", s.where(), name)
	}
	return s.registerTool(name, ToolDef{}, ToolOptions{AI: &ai}, func(c *session.Call, args map[string]any) (any, error) {
		defer c.BindMap(args)()
		return handler(args)
	})
}

// RegisterAIToolContext is RegisterAITool for a handler that takes the call's
// context (Hearth).
func (s *PluginSDK) RegisterAIToolContext(name string, ai AITool, handler ToolHandlerContext) error {
	if handler == nil {
		return fmt.Errorf("%s: tool %q: handler is nil", s.where(), name)
	}
	return s.registerTool(name, ToolDef{}, ToolOptions{AI: &ai}, func(c *session.Call, args map[string]any) (any, error) {
		return handler(c.Context(), args)
	})
}

func (s *PluginSDK) registerTool(name string, def ToolDef, opts ToolOptions, run func(*session.Call, map[string]any) (any, error)) error {
	spec, err := toolSpec(name, def, opts)
	if err != nil {
		return fmt.Errorf("%s: %w", s.where(), err)
	}
	linkZone := opts.AI != nil
	return s.addTool(&session.Tool{Spec: spec, Run: func(c *session.Call, args map[string]any) session.Result {
		v, err := run(c, args)
		if linkZone {
			if r, ok := v.(AIToolResult); ok {
				v = r.asMap()
			} else if r, ok := v.(*AIToolResult); ok && r != nil {
				v = r.asMap()
			}
			return session.LinkZoneResult(name, v, err)
		}
		return session.ValueResult(name, v, err)
	}})
}

// toolSpec is the wire spec of a tool, checked as RegisterTool documents.
func toolSpec(name string, def ToolDef, opts ToolOptions) (*pb.ToolSpec, error) {
	if err := session.CheckToolName(name); err != nil {
		return nil, err
	}
	spec := &pb.ToolSpec{Name: name, Description: def.Description, Serial: opts.Serial, Title: opts.Title}
	if opts.AI != nil {
		ai, err := opts.AI.wire(name)
		if err != nil {
			return nil, err
		}
		spec.AiTool = ai
	}
	if def.Parameters != nil || opts.AI == nil {
		schema, err := session.SchemaJSON(def.Parameters)
		if err != nil {
			return nil, fmt.Errorf("tool %s: %w", name, err)
		}
		spec.ParametersJson = schema
	}
	return spec, nil
}
