// Package sdk is Cyrene's plugin SDK (seed cyrene-plugin-development.md) for
// plugins that Hearth runs out of process: Plugin (Metadata, Init, Start, Tools,
// and Stop when the plugin has it), Tool (Definition, Validate, Execute),
// ToolDefinition and ToolResult with the seed's names, so a seed plugin compiles
// after changing its import path to github.com/hearth-dev/hearth/sdk-go/cyrene/sdk.
// A seed plugin is a library package (`package myplugin`); to run it, make it
// `package main` and add
//
//	func main() {
//		hearth.Serve(&HelloPlugin{})
//	}
//
// or keep the package and add a small main package beside it that imports it.
//
// # How it is served
//
// hearth.Serve dials the broker, then calls Init, Start (host calls work in both),
// Tools, and registers the tools (and those Start registered through
// HostAPI.RegisterTool). For each call, Validate runs before Execute: a validation
// error is an error result "invalid arguments for tool X: …"; Execute's ctx is
// cancelled when the broker cancels the call (its timeout, the caller gone) or the
// plugin shuts down, and carries the broker's trace. Calls run concurrently, each
// in its own goroutine; a panic is that call's error, never a dead plugin. On the
// broker's Shutdown, Stop(ctx) runs with the grace period as ctx's deadline.
package sdk

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"google.golang.org/grpc/codes"

	pb "github.com/hearth-dev/hearth/sdk-go/hearthpb"
	"github.com/hearth-dev/hearth/sdk-go/internal/host"
	"github.com/hearth-dev/hearth/sdk-go/internal/session"
)

// Plugin is the seed's plugin interface. A plugin that also has
// `Stop(ctx context.Context) error` (as the seed's example does; see Stopper) gets
// it called on shutdown.
type Plugin interface {
	// Metadata is the plugin's name, version, author and description.
	Metadata() PluginMetadata
	// Init prepares the plugin; an error ends it (exit code 2) before it
	// registers.
	Init(ctx context.Context, config PluginConfig) error
	// Start starts it with the host's services; an error ends it (exit code 2).
	Start(ctx context.Context, host HostAPI) error
	// Tools is the plugin's tools, asked once after Start.
	Tools() []Tool
}

// Stopper is implemented by plugins with the seed example's Stop: it runs on the
// broker's Shutdown (ctx's deadline is the grace period) and when the broker goes
// away.
type Stopper interface {
	Stop(ctx context.Context) error
}

// PluginMetadata is the seed's plugin metadata (the fields of plugin.json).
type PluginMetadata struct {
	// Name of the plugin; "" = the name the broker gave (HEARTH_PLUGIN).
	Name string `json:"name"`
	// Version, e.g. "1.0.0".
	Version string `json:"version"`
	// Author of the plugin.
	Author string `json:"author"`
	// Description in one line.
	Description string `json:"description"`
}

// PluginConfig is what Init receives (the seed names it without fields).
type PluginConfig struct {
	// Name is the name the broker knows the plugin by (HEARTH_PLUGIN).
	Name string
	// DataDir is the plugin's own writable folder (HEARTH_PLUGIN_DATA; "" when
	// run by hand).
	DataDir string
}

// Tool is the seed's tool interface.
type Tool interface {
	// Definition is the tool's name, description and JSON Schema; asked once, at
	// registration.
	Definition() ToolDefinition
	// Execute runs the tool. A returned error is an error result with its text; a
	// nil result with a nil error is an error result too.
	Execute(ctx context.Context, args map[string]interface{}) (*ToolResult, error)
	// Validate checks the arguments before Execute (the broker has already checked
	// them against the schema); an error is an error result.
	Validate(args map[string]interface{}) error
}

// ToolDefinition is the seed's tool definition.
type ToolDefinition struct {
	// Name is the tool's name (the LLM's function name), unique across all plugins.
	Name string
	// Description is what the LLM reads to decide whether to call the tool.
	Description string
	// Parameters is the JSON Schema of the arguments object; nil = none.
	Parameters map[string]interface{}
}

// ToolResult is the seed's tool result: Output is the text for the LLM (written in
// natural language), Error the error text when Success is false. ToolName is
// informative.
type ToolResult struct {
	// ToolName is the tool's name (informative; not sent).
	ToolName string `json:"tool_name"`
	// Success says whether the call succeeded.
	Success bool `json:"success"`
	// Output is the result text, injected into the LLM conversation as is.
	Output string `json:"output,omitempty"`
	// Error is the error text when Success is false.
	Error string `json:"error,omitempty"`
}

// HostAPI is what Start receives (the seed names it without defining it): the
// broker's host services, input injection, and tool registration at run time.
type HostAPI interface {
	// Settings is the plugin's settings (HomeAgent's SettingsAPI).
	Settings() SettingsAPI
	// Memory is graph memory.
	Memory() MemoryAPI
	// TextMemory is the conversation log.
	TextMemory() TextMemoryAPI
	// DocMemory is document memory.
	DocMemory() DocMemoryAPI
	// Knowledge is the knowledge base.
	Knowledge() KnowledgeAPI
	// LLM is the LLM sources.
	LLM() LLMAPI
	// Mcp reads MCP servers' resources and prompts.
	Mcp() McpAPI
	// InjectText queues text as input on channel (source "" = this plugin).
	InjectText(source, channel, text string)
	// InjectTextNoMemory queues text without recording it in memory.
	InjectTextNoMemory(source, channel, text string)
	// InjectInterruptText puts text ahead of the queue, interrupting the LLM.
	InjectInterruptText(source, channel, text string)
	// RegisterTool adds a tool: during Start it registers with the others; later at
	// run time, returning the broker's answer. Errors name the tool.
	RegisterTool(t Tool) error
	// UnregisterTool removes a tool registered earlier, at run time.
	UnregisterTool(name string) error
	// PluginName is the name the broker knows the plugin by.
	PluginName() string
}

// The host API types, shared with the HomeAgent package (see its docs).
type (
	// SettingsAPI is the plugin's settings, core and other plugins' settings.
	SettingsAPI = host.SettingsAPI
	// SettingsAPIE is SettingsAPI plus error-returning twins.
	SettingsAPIE = host.SettingsAPIE
	// ConfigDef is a setting definition.
	ConfigDef = host.ConfigDef
	// MemoryAPI is graph memory.
	MemoryAPI = host.MemoryAPI
	// MemoryAPIE is MemoryAPI plus CommitN.
	MemoryAPIE = host.MemoryAPIE
	// Entity is a graph-memory node.
	Entity = host.Entity
	// Relation is a graph-memory edge.
	Relation = host.Relation
	// Triple is a fact to commit.
	Triple = host.Triple
	// TextMemoryAPI is the conversation log.
	TextMemoryAPI = host.TextMemoryAPI
	// TextEvent is one line of the text log.
	TextEvent = host.TextEvent
	// DocMemoryAPI is document memory.
	DocMemoryAPI = host.DocMemoryAPI
	// DocMemoryAPIE is DocMemoryAPI plus error-returning twins.
	DocMemoryAPIE = host.DocMemoryAPIE
	// Doc is a DocMemory document.
	Doc = host.Doc
	// KnowledgeAPI is the knowledge base.
	KnowledgeAPI = host.KnowledgeAPI
	// Knowledge is a knowledge entry.
	Knowledge = host.Knowledge
	// LLMAPI is the LLM sources.
	LLMAPI = host.LLMAPI
	// LLMAPIE is LLMAPI plus error-returning twins.
	LLMAPIE = host.LLMAPIE
	// IOInjector is input injection.
	IOInjector = host.IOInjector
	// IOInjectorE is IOInjector plus error-returning twins.
	IOInjectorE = host.IOInjectorE
	// McpAPI reads MCP servers' resources and prompts.
	McpAPI = host.McpAPI
	// HostError is a failed host call: the method and the gRPC status.
	HostError = host.HostError
)

// CodeName is a gRPC status code as the gRPC spec writes it (NOT_FOUND,
// PERMISSION_DENIED, …), e.g. for a HostError's Code().
func CodeName(c codes.Code) string { return host.CodeName(c) }

func init() { session.RegisterAdapter(adapt) }

func adapt(v any) (session.Plugin, bool) {
	p, ok := v.(Plugin)
	if !ok {
		return nil, false
	}
	return &served{plugin: p}, true
}

// served drives a Cyrene plugin for the session; it is also the HostAPI.
type served struct {
	plugin Plugin
	sess   *session.Session
	host   *host.Services

	mu      sync.Mutex
	started bool
	tools   []*session.Tool
	names   map[string]bool
}

func (a *served) Name() string { return a.plugin.Metadata().Name }

func (a *served) Start(s *session.Session) (*session.Spec, error) {
	a.sess = s
	a.host = host.New(s.Conn(), s.Name(), s.LogLine).WithContext(s.Context())
	a.names = map[string]bool{}
	ctx := s.Context()
	if err := a.plugin.Init(ctx, PluginConfig{Name: s.Name(), DataDir: s.DataDir()}); err != nil {
		return nil, fmt.Errorf("init: %w", err)
	}
	if err := a.plugin.Start(ctx, a); err != nil {
		return nil, err
	}
	var tools []*session.Tool
	var errs []error
	names := map[string]bool{}
	add := func(t *session.Tool) {
		if names[t.Spec.Name] {
			errs = append(errs, fmt.Errorf("tool name %q is registered twice", t.Spec.Name))
			return
		}
		names[t.Spec.Name] = true
		tools = append(tools, t)
	}
	for i, t := range a.plugin.Tools() {
		st, err := a.tool(t)
		if err != nil {
			errs = append(errs, fmt.Errorf("Tools()[%d]: %w", i, err))
			continue
		}
		add(st)
	}
	a.mu.Lock()
	for _, t := range a.tools {
		add(t)
	}
	a.tools, a.names, a.started = nil, names, true
	a.mu.Unlock()
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	meta := a.plugin.Metadata()
	return &session.Spec{
		Info:  &pb.PluginInfo{Name: meta.Name, Version: meta.Version, Author: meta.Author, Description: meta.Description},
		Tools: tools,
	}, nil
}

func (a *served) Stop(ctx context.Context) error {
	if st, ok := a.plugin.(Stopper); ok {
		return st.Stop(ctx)
	}
	return nil
}

// tool is the session's form of t, checked: a name the broker accepts, a schema of
// an object.
func (a *served) tool(t Tool) (*session.Tool, error) {
	if t == nil {
		return nil, errors.New("a nil Tool")
	}
	def := t.Definition()
	name := def.Name
	if err := session.CheckToolName(name); err != nil {
		return nil, err
	}
	schema, err := session.SchemaJSON(def.Parameters)
	if err != nil {
		return nil, fmt.Errorf("tool %s: %w", name, err)
	}
	spec := &pb.ToolSpec{Name: name, Description: def.Description, ParametersJson: schema}
	return &session.Tool{Spec: spec, Run: func(c *session.Call, args map[string]any) session.Result {
		if err := t.Validate(args); err != nil {
			return session.Fail(fmt.Sprintf("invalid arguments for tool %s: %v", name, err))
		}
		res, err := t.Execute(c.Context(), args)
		if err != nil {
			return session.Fail(err.Error())
		}
		if res == nil {
			return session.Fail(fmt.Sprintf("tool %s returned no result", name))
		}
		return session.Result{Success: res.Success, Content: res.Output, Error: res.Error}
	}}, nil
}

// ---------------------------------------------------------------- HostAPI

func (a *served) Settings() SettingsAPI     { return a.host.Settings() }
func (a *served) Memory() MemoryAPI         { return a.host.Memory() }
func (a *served) TextMemory() TextMemoryAPI { return a.host.TextMemory() }
func (a *served) DocMemory() DocMemoryAPI   { return a.host.DocMemory() }
func (a *served) Knowledge() KnowledgeAPI   { return a.host.Knowledge() }
func (a *served) LLM() LLMAPI               { return a.host.LLM() }
func (a *served) Mcp() McpAPI               { return a.host.Mcp() }
func (a *served) PluginName() string        { return a.sess.Name() }

func (a *served) InjectText(source, channel, text string) {
	a.host.Input().InjectText(source, channel, text)
}

func (a *served) InjectTextNoMemory(source, channel, text string) {
	a.host.Input().InjectTextNoMemory(source, channel, text)
}

func (a *served) InjectInterruptText(source, channel, text string) {
	a.host.Input().InjectInterruptText(source, channel, text)
}

func (a *served) RegisterTool(t Tool) error {
	st, err := a.tool(t)
	if err != nil {
		return fmt.Errorf("plugin %s: %w", a.sess.Name(), err)
	}
	name := st.Spec.Name
	a.mu.Lock()
	if a.names[name] {
		a.mu.Unlock()
		return fmt.Errorf("plugin %s: tool name %q is registered twice", a.sess.Name(), name)
	}
	a.names[name] = true
	if !a.started {
		a.tools = append(a.tools, st)
		a.mu.Unlock()
		return nil
	}
	a.mu.Unlock()
	if err := a.sess.RegisterTool(st); err != nil {
		a.mu.Lock()
		delete(a.names, name)
		a.mu.Unlock()
		return err
	}
	return nil
}

func (a *served) UnregisterTool(name string) error {
	a.mu.Lock()
	started, known := a.started, a.names[name]
	a.mu.Unlock()
	if !known {
		return fmt.Errorf("plugin %s: UnregisterTool: no tool %q", a.sess.Name(), name)
	}
	if !started {
		a.mu.Lock()
		delete(a.names, name)
		for i, t := range a.tools {
			if t.Spec.Name == name {
				a.tools = append(a.tools[:i], a.tools[i+1:]...)
				break
			}
		}
		a.mu.Unlock()
		return nil
	}
	if err := a.sess.UnregisterTool(name); err != nil {
		return err
	}
	a.mu.Lock()
	delete(a.names, name)
	a.mu.Unlock()
	return nil
}
