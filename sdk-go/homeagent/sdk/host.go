package sdk

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hearth-dev/hearth/sdk-go/internal/host"
)

// The seed's host API types (one definition, shared with the Cyrene package, so a
// value works in both).
type (
	// SettingsAPI is the seed's settings API (Settings()).
	SettingsAPI = host.SettingsAPI
	// SettingsAPIE is SettingsAPI plus error-returning twins (Hearth).
	SettingsAPIE = host.SettingsAPIE
	// ConfigDef is the seed's setting definition.
	ConfigDef = host.ConfigDef
	// MemoryAPI is the seed's graph memory API (Memory()).
	MemoryAPI = host.MemoryAPI
	// MemoryAPIE is MemoryAPI plus CommitN (Hearth).
	MemoryAPIE = host.MemoryAPIE
	// Entity is a graph-memory node.
	Entity = host.Entity
	// Relation is a graph-memory edge.
	Relation = host.Relation
	// Triple is a fact to commit.
	Triple = host.Triple
	// TextMemoryAPI is the seed's text log API (TextMemory()).
	TextMemoryAPI = host.TextMemoryAPI
	// TextEvent is one line of the text log.
	TextEvent = host.TextEvent
	// DocMemoryAPI is the seed's document memory API (DocMemory()).
	DocMemoryAPI = host.DocMemoryAPI
	// DocMemoryAPIE is DocMemoryAPI plus error-returning twins (Hearth).
	DocMemoryAPIE = host.DocMemoryAPIE
	// Doc is a DocMemory document.
	Doc = host.Doc
	// KnowledgeAPI is the seed's knowledge base API (Knowledge()).
	KnowledgeAPI = host.KnowledgeAPI
	// Knowledge is a knowledge entry.
	Knowledge = host.Knowledge
	// LLMAPI is the seed's LLM source API (LLM()).
	LLMAPI = host.LLMAPI
	// LLMAPIE is LLMAPI plus error-returning twins (Hearth).
	LLMAPIE = host.LLMAPIE
	// IOInjector is the seed's input injection interface.
	IOInjector = host.IOInjector
	// IOInjectorE is IOInjector plus error-returning twins (Hearth).
	IOInjectorE = host.IOInjectorE
	// McpAPI reads MCP servers' resources and prompts (Hearth).
	McpAPI = host.McpAPI
	// HostError is a failed host call: the method and the gRPC status.
	HostError = host.HostError
)

// services is the plugin's host services, or ones answering FAILED_PRECONDITION
// when the PluginSDK is not served by a broker.
func (s *PluginSDK) services() *host.Services {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.host == nil {
		s.host = host.New(notServed{}, s.name, nil)
	}
	return s.host
}

// Settings is the seed's Settings(): this plugin's settings, core and other
// plugins' settings, definitions. The value also implements SettingsAPIE.
func (s *PluginSDK) Settings() SettingsAPI { return s.services().Settings() }

// Memory is the seed's Memory(): graph memory. The value also implements MemoryAPIE.
func (s *PluginSDK) Memory() MemoryAPI { return s.services().Memory() }

// TextMemory is the seed's TextMemory(): the conversation log.
func (s *PluginSDK) TextMemory() TextMemoryAPI { return s.services().TextMemory() }

// DocMemory is the seed's DocMemory(). The value also implements DocMemoryAPIE.
func (s *PluginSDK) DocMemory() DocMemoryAPI { return s.services().DocMemory() }

// Knowledge is the seed's Knowledge(): the knowledge base.
func (s *PluginSDK) Knowledge() KnowledgeAPI { return s.services().Knowledge() }

// LLM is the seed's LLM(): the LLM sources. The value also implements LLMAPIE.
func (s *PluginSDK) LLM() LLMAPI { return s.services().LLM() }

// Mcp reads resources and prompts of the MCP servers the broker runs (Hearth;
// capability `mcp`).
func (s *PluginSDK) Mcp() McpAPI { return s.services().Mcp() }

// SetIOInjector replaces the injector behind InjectText, InjectTextNoMemory and
// InjectInterruptText (the seed's kernel sets it; out of process the broker's Input
// service is the default, so this is for tests). nil restores the default.
func (s *PluginSDK) SetIOInjector(inj IOInjector) {
	s.mu.Lock()
	s.io = inj
	s.mu.Unlock()
}

func (s *PluginSDK) injector() IOInjector {
	s.mu.Lock()
	inj := s.io
	s.mu.Unlock()
	if inj != nil {
		return inj
	}
	return s.services().Input()
}

// Input is the injector behind Inject*Text with error-returning twins (Hearth):
// InjectTextE(source, channel, text) error and so on, for callers that want the
// broker's answer (RESOURCE_EXHAUSTED when the conversation's queue is full,
// PERMISSION_DENIED without capability `input` …). With an injector set by
// SetIOInjector that has no twins, the twins return nil.
func (s *PluginSDK) Input() IOInjectorE {
	switch inj := s.injector().(type) {
	case IOInjectorE:
		return inj
	default:
		return plainInjector{inj}
	}
}

// plainInjector gives an IOInjector without twins the twins of IOInjectorE.
type plainInjector struct{ IOInjector }

func (p plainInjector) InjectInterruptTextE(source, channel, text string) error {
	p.InjectInterruptText(source, channel, text)
	return nil
}

func (p plainInjector) InjectTextE(source, channel, text string) error {
	p.InjectText(source, channel, text)
	return nil
}

func (p plainInjector) InjectTextNoMemoryE(source, channel, text string) error {
	p.InjectTextNoMemory(source, channel, text)
	return nil
}

// CodeName is a gRPC status code as the gRPC spec writes it (NOT_FOUND,
// PERMISSION_DENIED, …), e.g. for a HostError's Code().
func CodeName(c codes.Code) string { return host.CodeName(c) }

// InjectInterruptText is the seed's InjectInterruptText: text goes ahead of the
// queue and interrupts the LLM request in flight of that conversation. source "" or
// the plugin's name speaks as the plugin. Errors are logged (the value of
// Input-backed injection also implements IOInjectorE).
func (s *PluginSDK) InjectInterruptText(source, channel, text string) {
	s.injector().InjectInterruptText(source, channel, text)
}

// InjectText is the seed's InjectText: text is queued as input on channel.
func (s *PluginSDK) InjectText(source, channel, text string) {
	s.injector().InjectText(source, channel, text)
}

// InjectTextNoMemory is the seed's InjectTextNoMemory: queued without being
// recorded in memory.
func (s *PluginSDK) InjectTextNoMemory(source, channel, text string) {
	s.injector().InjectTextNoMemory(source, channel, text)
}

// notServed is the connection of a PluginSDK no broker serves: every call fails.
type notServed struct{}

func (notServed) Invoke(context.Context, string, any, any, ...grpc.CallOption) error {
	return status.Error(codes.FailedPrecondition, "the plugin is not served by a broker (hearth.Serve)")
}

func (notServed) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Error(codes.FailedPrecondition, "the plugin is not served by a broker (hearth.Serve)")
}
