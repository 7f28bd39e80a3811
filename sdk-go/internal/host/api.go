// Package host is the Go SDK's client of the broker's host services
// (proto/hearth/v1/host.proto: Settings, Memory, TextMemory, DocMemory, Knowledge,
// Llm, Input, Mcp), with the HomeAgent seed's interfaces and types
// (homeagent-plugin-sdk-api.md: SettingsAPI, MemoryAPI, TextMemoryAPI, DocMemoryAPI,
// KnowledgeAPI, LLMAPI, IOInjector) plus McpAPI, as the Python, Node and Rust SDKs
// offer them.
//
// The seed-style packages (sdk-go/homeagent/sdk, sdk-go/cyrene/sdk) re-export these
// names as aliases; plugin authors never import this package.
//
// # Calls
//
// Every method is one unary rpc on the connection given to New, which already
// carries the plugin's token (the session adds `x-hearth-token` with an
// interceptor). The seed's methods take no context: a call runs under the context
// of the Services value (context.Background unless WithContext set one) with a
// deadline of DefaultTimeout (WithTimeout changes it). The other SDKs set no
// deadline by default; Go's seed methods cannot be cancelled by their caller, so a
// bound keeps a stuck broker from hanging a handler forever. Host services answer
// in milliseconds (the slowest, Knowledge.Search over a large base and Mcp.Request
// to a slow server, in seconds), so 30 s only ends calls that would never return.
//
// # Errors
//
// A failed call returns a *HostError wrapping the gRPC status (status.Code(err)
// works on it) and naming the method, e.g.
// `plugin weather: Settings.Get: NOT_FOUND: no `city` in config_weather`.
// Seed methods without an error result (SettingsAPI.RegisterDef, Defs, Dump,
// Plugins; DocMemoryAPI.Query, Remove, Stats; LLMAPI.ListSources, CurrentSource;
// IOInjector.Inject*Text) log the error through the logf given to New and return
// the zero value; the concrete values also implement the …E twin interfaces
// (SettingsAPIE, DocMemoryAPIE, LLMAPIE, IOInjectorE) whose methods return it.
//
// # Values
//
// Settings values travel as JSON text: Set marshals the value with encoding/json
// (HTML characters not escaped), Get unmarshals into interface{} — objects are
// map[string]interface{}, arrays []interface{}, numbers float64 (as encoding/json
// and the seed's in-process HomeAgent give them), JSON null is nil. Counts are int.
package host

import (
	"context"
	"fmt"
	"log"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/hearth-dev/hearth/sdk-go/hearthpb"
)

// DefaultTimeout bounds each host call made through a Services value that has no
// other timeout (see the package doc for why; WithTimeout(0) removes the bound).
const DefaultTimeout = 30 * time.Second

// Services is the plugin's handle on the broker's host services. It is cheap to copy
// through WithContext / WithTimeout and safe for concurrent use.
type Services struct {
	plugin  string
	logf    func(format string, args ...any)
	ctx     context.Context
	timeout time.Duration

	settings   pb.SettingsClient
	memory     pb.MemoryClient
	textMemory pb.TextMemoryClient
	docMemory  pb.DocMemoryClient
	knowledge  pb.KnowledgeClient
	llm        pb.LlmClient
	input      pb.InputClient
	mcp        pb.McpClient
}

// New returns the host services of plugin `plugin` over conn, which must already
// carry the plugin's token on every call. logf receives the errors of seed methods
// that have no error result (nil: the standard logger); it should write to the
// plugin's stderr (the plugin log).
func New(conn grpc.ClientConnInterface, plugin string, logf func(format string, args ...any)) *Services {
	if logf == nil {
		logf = log.Printf
	}
	return &Services{
		plugin:     plugin,
		logf:       logf,
		ctx:        context.Background(),
		timeout:    DefaultTimeout,
		settings:   pb.NewSettingsClient(conn),
		memory:     pb.NewMemoryClient(conn),
		textMemory: pb.NewTextMemoryClient(conn),
		docMemory:  pb.NewDocMemoryClient(conn),
		knowledge:  pb.NewKnowledgeClient(conn),
		llm:        pb.NewLlmClient(conn),
		input:      pb.NewInputClient(conn),
		mcp:        pb.NewMcpClient(conn),
	}
}

// Plugin is the name of the calling plugin (the source of injected input).
func (s *Services) Plugin() string { return s.plugin }

// WithContext returns a copy whose calls run under ctx (a tool call's context, so
// a broker Cancel also ends the host calls the handler makes); the timeout stays.
func (s *Services) WithContext(ctx context.Context) *Services {
	if ctx == nil {
		ctx = context.Background()
	}
	c := *s
	c.ctx = ctx
	return &c
}

// WithTimeout returns a copy whose calls each get deadline d (0: none beyond the
// context's own).
func (s *Services) WithTimeout(d time.Duration) *Services {
	c := *s
	c.timeout = d
	return &c
}

// Settings is HomeAgent `Settings()`; the value also implements SettingsAPIE.
func (s *Services) Settings() SettingsAPI { return settingsAPI{s} }

// SettingsE is Settings with the error-returning twins in its type.
func (s *Services) SettingsE() SettingsAPIE { return settingsAPI{s} }

// Memory is HomeAgent `Memory()`: graph memory (capability `memory`); the value
// also implements MemoryAPIE.
func (s *Services) Memory() MemoryAPI { return memoryAPI{s} }

// MemoryE is Memory with CommitN in its type.
func (s *Services) MemoryE() MemoryAPIE { return memoryAPI{s} }

// TextMemory is HomeAgent `TextMemory()`: the append-only text log (capability `memory`).
func (s *Services) TextMemory() TextMemoryAPI { return textMemoryAPI{s} }

// DocMemory is HomeAgent `DocMemory()` (capability `memory`); the value also
// implements DocMemoryAPIE.
func (s *Services) DocMemory() DocMemoryAPI { return docMemoryAPI{s} }

// DocMemoryE is DocMemory with the error-returning twins in its type.
func (s *Services) DocMemoryE() DocMemoryAPIE { return docMemoryAPI{s} }

// Knowledge is HomeAgent `Knowledge()`: the knowledge base (capability `knowledge`).
func (s *Services) Knowledge() KnowledgeAPI { return knowledgeAPI{s} }

// LLM is HomeAgent `LLM()`: LLM sources (capability `llm`); the value also
// implements LLMAPIE.
func (s *Services) LLM() LLMAPI { return llmAPI{s} }

// LLME is LLM with the error-returning twins in its type.
func (s *Services) LLME() LLMAPIE { return llmAPI{s} }

// Mcp reads resources and prompts of the MCP servers the broker runs as plugins
// (`"runtime": "mcp"`; capability `mcp`).
func (s *Services) Mcp() McpAPI { return mcpAPI{s} }

// Input is the seed's IOInjector over the Input service (capability `input`); the
// value also implements IOInjectorE.
func (s *Services) Input() IOInjector { return inputAPI{s} }

// InputE is Input with the error-returning twins in its type.
func (s *Services) InputE() IOInjectorE { return inputAPI{s} }

// ---------------------------------------------------------------- errors

// HostError is a failed host call: the gRPC status and the method, e.g.
// `Settings.Get`. status.Code(err) and status.Convert(err) see the status through
// GRPCStatus. Errors found before the call (a value that is not JSON) carry
// INVALID_ARGUMENT, a broker answer that cannot be decoded INTERNAL.
type HostError struct {
	// Plugin is the calling plugin.
	Plugin string
	// Method is the rpc as `Service.Method` (`Settings.Get`, `Mcp.Request`).
	Method string
	st     *status.Status
}

// NewHostError makes a HostError, e.g. for a fake of these interfaces in tests.
func NewHostError(plugin, method string, code codes.Code, message string) *HostError {
	return &HostError{Plugin: plugin, Method: method, st: status.New(code, message)}
}

// Error reads `plugin P: Settings.Get: NOT_FOUND: <the broker's message>`.
func (e *HostError) Error() string {
	return fmt.Sprintf("plugin %s: %s: %s: %s", e.Plugin, e.Method, CodeName(e.Code()), e.Message())
}

// GRPCStatus is the status the broker answered (or the SDK's own, see HostError).
func (e *HostError) GRPCStatus() *status.Status { return e.st }

// Code is the status code.
func (e *HostError) Code() codes.Code { return e.st.Code() }

// Message is the broker's message without the method and code.
func (e *HostError) Message() string { return e.st.Message() }

// ---------------------------------------------------------------- settings

// SettingsAPI is the seed's `SettingsAPI`: this plugin's settings (its
// `config_<name>` table; no capability needed), core settings (`*Core`; capability
// `settings_core`), other plugins' settings (`*Plugin`; `settings_cross`), setting
// definitions for a settings UI, and globals (Dump needs `settings_cross`). Secrets
// of the core and of other plugins read as "••••••" without `settings_secrets`.
// Values: see the package doc.
type SettingsAPI interface {
	// Get is the value of key in this plugin's table (NOT_FOUND when unset).
	Get(key string) (interface{}, error)
	// Set sets key to any JSON value (nil = JSON null, a value).
	Set(key string, value interface{}) error
	// List is the keys of this plugin's table starting with prefix, sorted.
	List(prefix string) ([]string, error)

	// GetCore is a core setting (`core.daemon.data_dir` …).
	GetCore(key string) (interface{}, error)
	// SetCore sets a core setting (a secret one also needs `settings_secrets`).
	SetCore(key string, value interface{}) error
	// ListCore is the core keys starting with prefix, sorted.
	ListCore(prefix string) ([]string, error)

	// GetPlugin is key of plugin's table.
	GetPlugin(plugin, key string) (interface{}, error)
	// SetPlugin sets key of plugin's table.
	SetPlugin(plugin, key string, value interface{}) error
	// ListPlugin is the keys of plugin's table starting with prefix, sorted.
	ListPlugin(plugin, prefix string) ([]string, error)

	// RegisterDef declares a setting of this plugin; its Default is written only
	// when the key is unset. Errors are logged (RegisterDefE returns them).
	RegisterDef(def ConfigDef)
	// Defs is this plugin's definitions whose key starts with prefix, sorted by key;
	// nil on error (logged; DefsE returns it).
	Defs(prefix string) []*ConfigDef

	// Dump is every setting, secrets masked: {"core": {…}, "plugins": {name: {…}}};
	// nil on error (logged; DumpE returns it).
	Dump() map[string]interface{}
	// Plugins is the names of the plugins that have settings; nil on error (logged;
	// PluginsE returns it).
	Plugins() []string
}

// SettingsAPIE is SettingsAPI plus twins of its methods without an error result
// (Hearth, research §5.7). Services.Settings values implement it.
type SettingsAPIE interface {
	SettingsAPI
	// RegisterDefE is RegisterDef returning the error.
	RegisterDefE(def ConfigDef) error
	// DefsE is Defs returning the error.
	DefsE(prefix string) ([]*ConfigDef, error)
	// DumpE is Dump returning the error.
	DumpE() (map[string]interface{}, error)
	// PluginsE is Plugins returning the error.
	PluginsE() ([]string, error)
}

// ConfigDef is the seed's `ConfigDef`: a setting's definition for a settings UI,
// with the seed's fields and JSON tags, plus HasDefault/HasMin/HasMax/HasStep
// (Hearth; not in the JSON tags) so that a default of JSON null and a bound of 0 can
// be told from none: a field is sent when it is non-zero or its Has… flag is set,
// and Defs sets the flags of what the broker has. MarshalJSON writes the seed's
// JSON (empty fields left out) with min/max/step/default also when their flag is
// set; UnmarshalJSON sets the flags of the keys present.
type ConfigDef struct {
	// Key is the setting it defines, in this plugin's table. Required.
	Key string `json:"key"`
	// Default is written as the value when the key is unset at registration (a value
	// already set is never overwritten); nil = none unless HasDefault.
	Default interface{} `json:"default,omitempty"`
	// Type is "string" (sent when empty), "number", "integer" or "boolean": the
	// broker refuses to set the key to a value of another JSON type
	// (INVALID_ARGUMENT; null always fits). Any other type is a UI hint.
	Type string `json:"type"`
	// DisplayName is the label in a settings UI.
	DisplayName string `json:"display_name"`
	// Description is longer help text.
	Description string `json:"description,omitempty"`
	// Category is the group in a settings UI.
	Category string `json:"category,omitempty"`
	// Options are the allowed values (a drop-down; not checked by the broker).
	Options []string `json:"options,omitempty"`
	// Min is the smallest number of a number input (not checked by the broker).
	Min float64 `json:"min,omitempty"`
	// Max is the largest number of a number input (not checked by the broker).
	Max float64 `json:"max,omitempty"`
	// Step is the step of a number input.
	Step float64 `json:"step,omitempty"`
	// Required: the plugin needs a value to work.
	Required bool `json:"required,omitempty"`
	// Secret: sensitive (an API key …): masked ("••••••") in Dump, and for other
	// plugins without capability `settings_secrets`; the plugin reads its own in clear.
	Secret bool `json:"secret,omitempty"`

	// HasDefault (Hearth): Default is given even when nil (a JSON null default).
	HasDefault bool `json:"-"`
	// HasMin (Hearth): Min is given even when 0.
	HasMin bool `json:"-"`
	// HasMax (Hearth): Max is given even when 0.
	HasMax bool `json:"-"`
	// HasStep (Hearth): Step is given even when 0.
	HasStep bool `json:"-"`
}

// ---------------------------------------------------------------- graph memory

// MemoryAPI is the seed's `MemoryAPI`: graph memory (entities and relations;
// capability `memory`).
type MemoryAPI interface {
	// Recall is the entities whose names contain any of the keywords in query
	// (case-insensitive) and what lies within depth relations of them (BFS), most
	// mentioned first, with the relations between them.
	Recall(query []string, depth int) ([]Entity, []Relation, error)
	// Commit stores triples; duplicates of active relations are not added again
	// (their mentions still count). The count added is not returned by the seed's
	// signature: see MemoryAPIE.CommitN.
	Commit(triples []Triple) error
	// Introspect is counts of the graph (entities, relations, inactive_relations,
	// sessions, entity_types, relation_types, top_entities …).
	Introspect() (map[string]interface{}, error)
	// MergeEntities merges entity source into target; returns how many relations
	// moved (NOT_FOUND when source does not exist).
	MergeEntities(source, target string) (int, error)
	// Purge removes the relations matching every criterion (subject_contains,
	// target_contains, relation_type, session_id; at least one): mode "soft" marks
	// them inactive, "hard" deletes them (and entities left without relations).
	// Returns how many.
	Purge(criteria map[string]string, mode string) (int, error)
}

// MemoryAPIE is MemoryAPI plus CommitN (Hearth), which also returns how many
// relations Commit added (the wire's `committed`, which the seed's Commit drops).
type MemoryAPIE interface {
	MemoryAPI
	// CommitN is Commit returning the number of relations added.
	CommitN(triples []Triple) (int, error)
}

// Entity is the seed's `Entity`: a graph-memory node.
type Entity struct {
	// Name as first written.
	Name string `json:"name"`
	// Type is Person / Location / Concept …; empty if no triple gave one.
	Type string `json:"type"`
	// MentionCount is how many committed triples named it.
	MentionCount int `json:"mention_count"`
}

// Relation is the seed's `Relation`: SourceName —RelationType→ TargetName.
type Relation struct {
	// SourceName is the subject entity.
	SourceName string `json:"source_name"`
	// TargetName is the object entity.
	TargetName string `json:"target_name"`
	// RelationType is likes / works_at / friend_of …
	RelationType string `json:"relation_type"`
}

// Triple is the seed's `Triple`, a fact to commit, plus the wire's optional entity
// types and session (Hearth additions; empty = leave as is / none).
type Triple struct {
	// Subject entity name.
	Subject string `json:"subject"`
	// Relation type.
	Relation string `json:"relation"`
	// Object entity name.
	Object string `json:"object"`
	// SubjectType (Hearth) is the subject's type; empty = leave it as it is.
	SubjectType string `json:"subject_type,omitempty"`
	// ObjectType (Hearth) is the object's type; empty = leave it as it is.
	ObjectType string `json:"object_type,omitempty"`
	// SessionID (Hearth) is the session the fact came from (Purge by session_id).
	SessionID string `json:"session_id,omitempty"`
}

// ---------------------------------------------------------------- text memory

// TextMemoryAPI is the seed's `TextMemoryAPI`: the chronological conversation log
// (capability `memory`).
type TextMemoryAPI interface {
	// Append adds one line to the log.
	Append(evt TextEvent) error
}

// TextEvent is the seed's `TextEvent`: one line of the text log.
type TextEvent struct {
	// Role is system / user / assistant.
	Role string `json:"role"`
	// Content is what was said.
	Content string `json:"content"`
	// Timestamp is Unix seconds; 0 = the time of the append.
	Timestamp int64 `json:"timestamp"`
	// Channel is the source channel.
	Channel string `json:"channel,omitempty"`
}

// ---------------------------------------------------------------- document memory

// DocMemoryAPI is the seed's `DocMemoryAPI`: short-lived documents with a TF-IDF
// index (capability `memory`).
type DocMemoryAPI interface {
	// Query is the topK best matching documents, best first, each with Score > 0;
	// nil on error (logged; QueryE returns it).
	Query(text string, topK int) []*Doc
	// Insert stores doc; the same ID replaces (empty content: INVALID_ARGUMENT).
	Insert(doc *Doc) error
	// Remove deletes document id; errors (NOT_FOUND …) are logged (RemoveE
	// returns them).
	Remove(id string)
	// Stats is counts and sizes (docs, text_bytes …); nil on error (logged; StatsE
	// returns it).
	Stats() map[string]interface{}
}

// DocMemoryAPIE is DocMemoryAPI plus twins of its methods without an error result
// (Hearth, research §5.7). Services.DocMemory values implement it.
type DocMemoryAPIE interface {
	DocMemoryAPI
	// QueryE is Query returning the error.
	QueryE(text string, topK int) ([]*Doc, error)
	// RemoveE is Remove returning the error.
	RemoveE(id string) error
	// StatsE is Stats returning the error.
	StatsE() (map[string]interface{}, error)
}

// Doc is the seed's `Doc`: a DocMemory document.
type Doc struct {
	// ID is unique; empty on Insert = generated by the broker.
	ID string `json:"id"`
	// Title is a short title.
	Title string `json:"title"`
	// Content is the text.
	Content string `json:"content"`
	// Score is the relevance to the query in Query results (> 0, higher = better).
	Score float64 `json:"score,omitempty"`
}

// ---------------------------------------------------------------- knowledge

// KnowledgeAPI is the seed's `KnowledgeAPI`: the knowledge base (files with a TF-IDF
// index; capability `knowledge`).
type KnowledgeAPI interface {
	// Search is the topK best matching entries, best first, each with Score > 0.
	Search(query string, topK int) ([]*Knowledge, error)
	// Add adds an entry; the name becomes a file name (`/` → `_`, `.md` dropped).
	Add(name, content string) error
	// List is the names of all entries.
	List() ([]string, error)
}

// Knowledge is the seed's `Knowledge`: a knowledge entry, plus its search Score
// (Hearth addition, as the other SDKs return it).
type Knowledge struct {
	// Name of the entry.
	Name string `json:"name"`
	// Content is its text.
	Content string `json:"content"`
	// Score (Hearth) is the relevance in Search results (> 0, higher = better).
	Score float64 `json:"score,omitempty"`
}

// ---------------------------------------------------------------- LLM

// LLMAPI is the seed's `LLMAPI`: the LLM sources (capability `llm`).
type LLMAPI interface {
	// ListSources is the source names in priority order; nil on error (logged;
	// ListSourcesE returns it).
	ListSources() []string
	// SetSource makes name the source requests go to first (NOT_FOUND if unknown).
	SetSource(name string) error
	// CurrentSource is the source requests go to first ("" when none, or on error:
	// logged; CurrentSourceE returns it).
	CurrentSource() string
}

// LLMAPIE is LLMAPI plus twins of its methods without an error result (Hearth,
// research §5.7). Services.LLM values implement it.
type LLMAPIE interface {
	LLMAPI
	// ListSourcesE is ListSources returning the error.
	ListSourcesE() ([]string, error)
	// CurrentSourceE is CurrentSource returning the error.
	CurrentSourceE() (string, error)
}

// ---------------------------------------------------------------- input

// IOInjector is the seed's `IOInjector`: input for the agent, as if a user wrote it
// (capability `input`). source "" or the plugin's own name speaks as the plugin
// (`plugin:<name>`); another source needs capability `input_as_user`. channel ""
// is the plugin's name. Errors (RESOURCE_EXHAUSTED when the conversation's queue
// is full, PERMISSION_DENIED …) are logged; IOInjectorE returns them.
type IOInjector interface {
	// InjectInterruptText puts text ahead of the queue and interrupts the LLM
	// request in flight in that conversation.
	InjectInterruptText(source, channel, text string)
	// InjectText queues text.
	InjectText(source, channel, text string)
	// InjectTextNoMemory queues text without recording it in memory.
	InjectTextNoMemory(source, channel, text string)
}

// IOInjectorE is IOInjector plus twins returning the error (Hearth, research §5.7).
// Services.Input values implement it.
type IOInjectorE interface {
	IOInjector
	// InjectInterruptTextE is InjectInterruptText returning the error.
	InjectInterruptTextE(source, channel, text string) error
	// InjectTextE is InjectText returning the error.
	InjectTextE(source, channel, text string) error
	// InjectTextNoMemoryE is InjectTextNoMemory returning the error.
	InjectTextNoMemoryE(source, channel, text string) error
}

// ---------------------------------------------------------------- MCP

// McpMethods are the MCP methods McpAPI.Request may send; the broker refuses others
// (INVALID_ARGUMENT).
var McpMethods = []string{"resources/list", "resources/templates/list", "resources/read", "prompts/list", "prompts/get"}

// McpAPI reads resources and prompts of the MCP servers the broker runs as plugins
// (`"runtime": "mcp"`), each named by its plugin name (capability `mcp`; Hearth, as
// the other SDKs' mcp()). Results are MCP's JSON decoded with encoding/json, with
// MCP's field names (uri, mimeType, text, messages …). Every method is one or more
// Mcp.Request calls; errors are HostErrors of `Mcp.Request` with code NOT_FOUND (no
// MCP plugin of that name), INVALID_ARGUMENT (a method outside McpMethods),
// UNAVAILABLE (the server is not connected), FAILED_PRECONDITION (the server's own
// error, its message in Message) or PERMISSION_DENIED (no capability `mcp`).
type McpAPI interface {
	// Request sends method (one of McpMethods) with params (nil = {}) to MCP server
	// server and returns its result object.
	Request(server, method string, params map[string]interface{}) (map[string]interface{}, error)
	// Resources is the server's resources (resources/list, every page): objects
	// with uri, name, mimeType …
	Resources(server string) ([]map[string]interface{}, error)
	// ResourceTemplates is the server's resource templates
	// (resources/templates/list, every page): objects with uriTemplate, name …
	ResourceTemplates(server string) ([]map[string]interface{}, error)
	// ReadResource is the contents of resource uri (resources/read): objects with
	// uri, mimeType and text (or blob, base64).
	ReadResource(server, uri string) ([]map[string]interface{}, error)
	// Prompts is the server's prompts (prompts/list, every page): objects with name,
	// description, arguments …
	Prompts(server string) ([]map[string]interface{}, error)
	// GetPrompt is prompt name filled with arguments (prompts/get): the result
	// object, with description and messages (each with role and content).
	GetPrompt(server, name string, arguments map[string]string) (map[string]interface{}, error)
}
