// Types of the public API of hearth-plugin (CommonJS entry). The generated wire types are
// in `hearth-plugin/gen/hearth` (camelCase fields: `call_id` → `callId`; 64-bit integers
// are `Long | number`).

/** Who a call is made for (wire `Sender`). Empty strings when unknown. */
export interface Sender {
  userId: string;
  groupId: string;
  /** Input channel, e.g. "cli", "qq". */
  channel: string;
  sessionId: string;
}

/** The `sender` of a LinkZone `handleEvent` (inject mode). */
export interface EventSender extends Sender {
  /** The full message text that matched a trigger. */
  message: string;
  /** Parsed parameters of the command. */
  params: string[];
  /** Aborted when the broker cancels the event. */
  signal: AbortSignal;
  /** `params[i]`, or `null` when absent (out of range). */
  param(i: number): string | null;
  /** Sends text to the user; may be called several times. Non-strings are sent as JSON. */
  reply(text: unknown): Promise<void>;
}

/** Options of one host-service call. */
export interface HostCallOptions {
  /** Deadline in milliseconds from now. */
  timeoutMs?: number;
}

/** Promise-returning methods of one host service, named like its rpcs in camelCase. */
export type HostService<M extends Record<string, any>> = {
  [K in keyof M]: M[K] extends import('@grpc/grpc-js').MethodDefinition<infer Req, infer Res>
    ? (req?: Req, opts?: HostCallOptions) => Promise<Res>
    : never;
};

/**
 * Generic clients of the broker's host services (the HomeAgent PluginSDK surface):
 * wire messages in and out, sharing the session's connection and carrying the plugin's
 * token. A failure rejects with a {@link HostError}. The typed, seed-named APIs are
 * `sdk.settings()`, `sdk.memory()`, … of {@link HomeAgentSdk}.
 */
export interface Host {
  readonly plugin: string;
  readonly settings: HostService<typeof import('./gen/services').SettingsService>;
  readonly memory: HostService<typeof import('./gen/services').MemoryService>;
  readonly textMemory: HostService<typeof import('./gen/services').TextMemoryService>;
  readonly docMemory: HostService<typeof import('./gen/services').DocMemoryService>;
  readonly knowledge: HostService<typeof import('./gen/services').KnowledgeService>;
  readonly llm: HostService<typeof import('./gen/services').LlmService>;
  readonly input: HostService<typeof import('./gen/services').InputService>;
  readonly mcp: HostService<typeof import('./gen/services').McpService>;
}

/**
 * What a failed host-service call rejects with (generic and typed APIs alike).
 */
export declare class HostError extends Error {
  constructor(message: string, info?: { code?: string; grpcCode?: number; details?: string; method?: string });
  readonly name: 'HostError';
  /** The gRPC status name: 'NOT_FOUND', 'PERMISSION_DENIED', 'INVALID_ARGUMENT', 'UNIMPLEMENTED', … */
  code: string;
  /** The gRPC status number (-1 when the SDK raised it itself). */
  grpcCode: number;
  /** The broker's own message. */
  details: string;
  /** The call, e.g. `settings.getCore`. */
  method: string;
}

/** Any JSON value (settings values, defaults, stats). */
export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };

/** A setting's definition as `defs()` returns it: the seed's JSON names, empty fields left out. */
export interface ConfigDefInfo {
  key: string;
  default?: JsonValue;
  type: string;
  display_name: string;
  description?: string;
  category?: string;
  options?: string[];
  min?: number;
  max?: number;
  step?: number;
  required?: boolean;
  secret?: boolean;
}

/** HomeAgent `SettingsAPI`: this plugin's table, core settings, other plugins' tables. */
export interface SettingsAPI {
  /** The value of `key` in this plugin's table; rejects NOT_FOUND when unset. */
  get(key: string, opts?: HostCallOptions): Promise<any>;
  /** Sets `key` to any JSON value (null included). */
  set(key: string, value: unknown, opts?: HostCallOptions): Promise<void>;
  /** Keys starting with `prefix`, sorted. */
  list(prefix?: string, opts?: HostCallOptions): Promise<string[]>;
  /** Needs capability `settings_core`; a secret reads as "••••••" without `settings_secrets`. */
  getCore(key: string, opts?: HostCallOptions): Promise<any>;
  /** Needs capability `settings_core` (and `settings_secrets` for a secret key). */
  setCore(key: string, value: unknown, opts?: HostCallOptions): Promise<void>;
  /** Needs capability `settings_core`. */
  listCore(prefix?: string, opts?: HostCallOptions): Promise<string[]>;
  /** Needs capability `settings_cross`; a secret reads as "••••••" without `settings_secrets`. */
  getPlugin(plugin: string, key: string, opts?: HostCallOptions): Promise<any>;
  /** Needs capability `settings_cross` (and `settings_secrets` for a secret key). */
  setPlugin(plugin: string, key: string, value: unknown, opts?: HostCallOptions): Promise<void>;
  /** Needs capability `settings_cross`. */
  listPlugin(plugin: string, prefix?: string, opts?: HostCallOptions): Promise<string[]>;
  /** Declares a setting; its default is written only when the key is unset. In start() it travels with Register. */
  registerDef(def: ConfigDef, opts?: HostCallOptions): Promise<void>;
  defs(prefix?: string, opts?: HostCallOptions): Promise<ConfigDefInfo[]>;
  /** `{core: {...}, plugins: {name: {...}}}`, secrets masked. Needs capability `settings_cross`. */
  dump(opts?: HostCallOptions): Promise<{ core: Record<string, JsonValue>; plugins: Record<string, Record<string, JsonValue>> }>;
  /** Names of the plugins that have settings. */
  plugins(opts?: HostCallOptions): Promise<string[]>;
}

/** A graph-memory node (seed `Entity`). */
export interface Entity {
  name: string;
  type: string;
  mention_count: number;
}

/** A graph-memory edge (seed `Relation`). */
export interface Relation {
  source_name: string;
  target_name: string;
  relation_type: string;
}

/** A fact to commit (seed `Triple`); camelCase spellings are accepted too. */
export interface Triple {
  subject: string;
  relation: string;
  object: string;
  subject_type?: string;
  object_type?: string;
  session_id?: string;
  subjectType?: string;
  objectType?: string;
  sessionId?: string;
}

/** `[subject, relation, object, subjectType?, objectType?, sessionId?]`. */
export type TripleTuple = [string, string, string, string?, string?, string?];

/** HomeAgent `MemoryAPI` (graph memory; capability `memory`). */
export interface MemoryAPI {
  /** Entities whose names contain a keyword, and what lies within `depth` relations (default 1). */
  recall(keywords: string | string[], depth?: number, opts?: HostCallOptions): Promise<{ entities: Entity[]; relations: Relation[] }>;
  /** Resolves to how many relations were added (duplicates of active ones are not). */
  commit(triples: Array<Triple | TripleTuple>, opts?: HostCallOptions): Promise<number>;
  introspect(opts?: HostCallOptions): Promise<Record<string, any>>;
  /** Resolves to how many relations moved to `target`. */
  mergeEntities(source: string, target: string, opts?: HostCallOptions): Promise<number>;
  /** Criteria: subject_contains, target_contains, relation_type, session_id. Mode 'soft' (default) or 'hard'. */
  purge(criteria: Record<string, string>, mode?: 'soft' | 'hard' | string, opts?: HostCallOptions): Promise<number>;
}

/** A TextMemory line (seed `TextEvent`); timestamp in Unix seconds, 0 = now. */
export interface TextEvent {
  role: string;
  content: string;
  timestamp?: number;
  channel?: string;
}

/** HomeAgent `TextMemoryAPI` (capability `memory`). */
export interface TextMemoryAPI {
  append(event: TextEvent, opts?: HostCallOptions): Promise<void>;
}

/** A DocMemory document (seed `Doc`); `score` in query results (> 0, higher = better). */
export interface Doc {
  id: string;
  title: string;
  content: string;
  score: number;
}

/** HomeAgent `DocMemoryAPI` (capability `memory`). */
export interface DocMemoryAPI {
  query(text: string, topK?: number, opts?: HostCallOptions): Promise<Doc[]>;
  /** The same id replaces; an empty id gets a generated one. */
  insert(doc: { id?: string; title?: string; content?: string }, opts?: HostCallOptions): Promise<void>;
  remove(id: string, opts?: HostCallOptions): Promise<void>;
  stats(opts?: HostCallOptions): Promise<Record<string, any>>;
}

/** A knowledge entry (seed `Knowledge`) with its search `score`. */
export interface KnowledgeEntry {
  name: string;
  content: string;
  score: number;
}

/** HomeAgent `KnowledgeAPI` (capability `knowledge`). */
export interface KnowledgeAPI {
  search(query: string, topK?: number, opts?: HostCallOptions): Promise<KnowledgeEntry[]>;
  add(name: string, content: string, opts?: HostCallOptions): Promise<void>;
  list(opts?: HostCallOptions): Promise<string[]>;
}

/** HomeAgent `LLMAPI` (capability `llm`). */
export interface LLMAPI {
  listSources(opts?: HostCallOptions): Promise<string[]>;
  setSource(name: string, opts?: HostCallOptions): Promise<void>;
  currentSource(opts?: HostCallOptions): Promise<string>;
}

/** The MCP methods {@link McpAPI.request} may send; the broker refuses others (INVALID_ARGUMENT). */
export type McpMethod = 'resources/list' | 'resources/templates/list' | 'resources/read' | 'prompts/list' | 'prompts/get';

/** An MCP resource as `resources/list` lists it (MCP's field names; more may be present). */
export interface McpResource {
  uri: string;
  name: string;
  title?: string;
  description?: string;
  mimeType?: string;
  [field: string]: unknown;
}

/** An MCP resource template (`resources/templates/list`). */
export interface McpResourceTemplate {
  uriTemplate: string;
  name: string;
  title?: string;
  description?: string;
  mimeType?: string;
  [field: string]: unknown;
}

/** One item of a resource's contents (`resources/read`): `text`, or `blob` (base64). */
export interface McpResourceContents {
  uri: string;
  mimeType?: string;
  text?: string;
  blob?: string;
  [field: string]: unknown;
}

/** An MCP prompt as `prompts/list` lists it. */
export interface McpPrompt {
  name: string;
  title?: string;
  description?: string;
  arguments?: Array<{ name: string; description?: string; required?: boolean; [field: string]: unknown }>;
  [field: string]: unknown;
}

/** A filled prompt (`prompts/get`). */
export interface McpPromptResult {
  description?: string;
  messages: Array<{ role: 'user' | 'assistant'; content: { type: string; text?: string; [field: string]: unknown } }>;
  [field: string]: unknown;
}

/**
 * Resources and prompts of the MCP servers the broker runs as plugins (`"runtime":
 * "mcp"`), each named by its plugin name (capability `mcp`). Read-only. The listing
 * helpers follow `nextCursor` over every page. A failure rejects with a
 * {@link HostError} of method `mcp.request`: NOT_FOUND (no such MCP plugin),
 * INVALID_ARGUMENT (another method, params not an object), UNAVAILABLE (the server is
 * not connected), FAILED_PRECONDITION (the server's own error, in `details`),
 * PERMISSION_DENIED (no capability `mcp`).
 */
export interface McpAPI {
  /** Sends `method` with `params` (omitted = `{}`) to MCP server `server`; resolves to its result. */
  request(server: string, method: McpMethod | (string & {}), params?: Record<string, unknown>, opts?: HostCallOptions): Promise<Record<string, any>>;
  /** `resources/list`: every resource. */
  resources(server: string, opts?: HostCallOptions): Promise<McpResource[]>;
  /** `resources/templates/list`: every resource template. */
  resourceTemplates(server: string, opts?: HostCallOptions): Promise<McpResourceTemplate[]>;
  /** `resources/read`: the `contents` of resource `uri`. */
  readResource(server: string, uri: string, opts?: HostCallOptions): Promise<McpResourceContents[]>;
  /** `prompts/list`: every prompt. */
  prompts(server: string, opts?: HostCallOptions): Promise<McpPrompt[]>;
  /** `prompts/get`: prompt `name` filled with `args` (`{description, messages}`). */
  getPrompt(server: string, name: string, args?: Record<string, string>, opts?: HostCallOptions): Promise<McpPromptResult>;
}

/**
 * An OpenTelemetry `Context` (`import('@opentelemetry/api').Context`), typed
 * structurally so this package's types need no `@opentelemetry/api`.
 */
export interface OtelContext {
  getValue(key: symbol): unknown;
  setValue(key: symbol, value: unknown): OtelContext;
  deleteValue(key: symbol): OtelContext;
}

/**
 * The W3C trace context of the broker span a call belongs to. Empty strings when the
 * broker does not trace. With `@opentelemetry/api` installed (an optional peer
 * dependency) the handler already runs inside `otelContext`: spans it starts are
 * children of the broker's span.
 */
export interface TraceFields {
  /** `"00-<trace id>-<span id>-<flags>"` as the broker sent it, or `''`. */
  traceparent: string;
  /** The W3C `tracestate` as the broker sent it, or `''`. */
  tracestate: string;
  /** The broker's span as the parent context, for explicit use (`tracer.startSpan(name, {}, ctx.otelContext)`); undefined without `@opentelemetry/api` or a valid `traceparent`. */
  otelContext: OtelContext | undefined;
}

/**
 * Progress as counts: `{progress: 3, total: 10}` is "3 of 10" (`total` 0 or absent
 * when unknown). `fraction` (0..1) defaults to progress / total when the total is known.
 */
export interface ProgressCounts {
  progress?: number;
  total?: number;
  fraction?: number;
}

/** Per-call context given to every tool handler. */
export interface CallContext extends TraceFields {
  /** Aborted when the broker sends Cancel (timeout or caller gone) or the session ends. */
  signal: AbortSignal;
  /** The call id as decimal text (the wire value is echoed exactly). */
  callId: string;
  /** Tool name of this call. */
  tool: string;
  sender: Sender;
  /** Milliseconds before the broker times the call out. */
  timeoutMs: number;
  /**
   * Reports progress (extends the call's timeout, bounded): `fraction` 0..1 when known,
   * or counts (`ctx.progress('page 3', {progress: 3, total: 10})`), which the broker
   * passes on to callers as they are (MCP `progress` / `total`).
   */
  progress(message: string, fraction?: number | ProgressCounts): void;
  /** Host services (settings, memory, knowledge, LLM, input, MCP). */
  readonly host: Host;
}

/** What a LinkZone `executeTool` returns. `data` travels as JSON text. */
export interface LinkZoneResult {
  success: boolean;
  content?: string;
  data?: unknown;
  error?: string;
}

/** One LinkZone `ai.tool` parameter. */
export interface LinkZoneParameter {
  name: string;
  /** string | number | integer | boolean | object | array */
  type: string;
  description: string;
  required?: boolean;
  default?: unknown;
  enum?: unknown[];
  example?: string;
}

/** LinkZone `ai.tool`: direct-call mode. The broker derives the JSON Schema and description. */
export interface LinkZoneAiTool {
  parameters: LinkZoneParameter[];
  usage: string;
  when_to_use: string;
  /** Keep the conversation going after the call. */
  continue?: boolean;
  /** false ends the agentic loop after this tool. Default true. */
  chainable?: boolean;
  /** Calls per conversation; 0 = unlimited. */
  max_calls?: number;
  /** The user must approve each call. */
  confirm?: boolean;
  /** Seconds, per user. */
  cooldown?: number;
  /** Seconds; 0 = the plugin's call_timeout_s. */
  timeout?: number;
}

/** LinkZone `ai.inject`: injection mode. */
export interface LinkZoneAiInject {
  usage: string;
  format: string;
  /** Argument name → one-sentence description for the LLM. */
  args?: Record<string, string>;
}

/** LinkZone trigger: type 0 command, 1 keyword, 2 regex, 3 segment, 4 event (or the name). */
export interface LinkZoneTrigger {
  type: 0 | 1 | 2 | 3 | 4 | 'command' | 'keyword' | 'regex' | 'segment' | 'event';
  pattern: string;
}

/** LinkZone `metadata` (static on the class, or `X.metadata = {...}`). */
export interface LinkZoneMetadata {
  /** Plugin name; also the name of its `ai.tool`. */
  name: string;
  version?: string;
  author?: string;
  description?: string;
  triggers?: LinkZoneTrigger[];
  ai?: { tool?: LinkZoneAiTool; inject?: LinkZoneAiInject };
}

/** HomeAgent `ToolDef`. */
export interface ToolDef {
  name?: string;
  /** What the LLM reads. */
  description?: string;
  /** JSON Schema of the arguments object; default `{type: "object", properties: {}}`. */
  parameters?: Record<string, unknown>;
  /** Must not run concurrently with other tool calls of the same turn. */
  serial?: boolean;
}

/**
 * A HomeAgent tool handler. Its value maps to the result: a string is the content as is;
 * anything else is JSON in content and data_json; `{isError: true, content}` fails with
 * that content as the error; a throw fails with "<Name>: <message>".
 */
export type ToolHandler = (args: any, ctx: CallContext) => unknown | Promise<unknown>;

/** The SDK object HomeAgent-style plugins receive in `start(sdk)`. */
/** Input priority (seed levels): background 1, message 2, interactive 3, critical 4. */
export type Priority = 'background' | 'message' | 'interactive' | 'critical' | 1 | 2 | 3 | 4;

/** Which conversation injected input goes to, and how urgent it is. */
export interface InjectOptions {
  /** The user whose private chat on the channel gets the input (default: the plugin). */
  userId?: string;
  /** The group whose conversation on the channel gets the input. */
  groupId?: string;
  /** Default `'background'`. */
  priority?: Priority;
}

/** Options of a stage hook. */
export interface StageOptions {
  /**
   * `false`: the hook does not read the conversation; at pre_action it gets
   * `contextMsgs` empty and what it leaves there is ignored (saves sending the history).
   */
  contextMsgs?: boolean;
}

export interface HomeAgentSdk {
  /** The plugin's name. */
  readonly pluginName: string;
  /** Generic host-service clients (wire messages in and out). */
  readonly host: Host;
  /** HomeAgent `Settings()`. */
  settings(): SettingsAPI;
  /** HomeAgent `Memory()`: graph memory. */
  memory(): MemoryAPI;
  /** HomeAgent `TextMemory()`. */
  textMemory(): TextMemoryAPI;
  /** HomeAgent `DocMemory()`. */
  docMemory(): DocMemoryAPI;
  /** HomeAgent `Knowledge()`. */
  knowledge(): KnowledgeAPI;
  /** HomeAgent `LLM()`. */
  llm(): LLMAPI;
  /** MCP servers' resources and prompts (capability `mcp`). */
  mcp(): McpAPI;
  /**
   * HomeAgent InjectText: queue text as input (source = this plugin) in a conversation:
   * the group `opts.groupId` on `channel`, else the private chat of `opts.userId`
   * (default: the plugin's name) on `channel`. Its turns run in order; other
   * conversations run at the same time. `opts.priority` orders inputs waiting for a turn
   * slot (default `'background'`). Rejects with a HostError (code RESOURCE_EXHAUSTED)
   * when that conversation already has `[agent] queue_per_conversation` inputs waiting.
   */
  injectText(channel: string, text: string, opts?: InjectOptions): Promise<void>;
  /** HomeAgent InjectTextNoMemory: like injectText, left out of memory. */
  injectTextNoMemory(channel: string, text: string, opts?: InjectOptions): Promise<void>;
  /**
   * HomeAgent InjectInterruptText: cuts into the running turn of the conversation (its LLM
   * request in flight is cancelled and asked again with the text as a system message);
   * when none runs, the text goes to the front of that conversation's queue.
   */
  injectInterruptText(channel: string, text: string, opts?: Omit<InjectOptions, 'priority'>): Promise<void>;
  /**
   * Registers a tool. During start() it goes out with Register; later, as RegisterTool.
   * Throws synchronously on an invalid declaration; the promise settles when the broker
   * answers (rejections are also logged, so not awaiting it is safe).
   */
  registerTool(name: string, def: ToolDef, handler: ToolHandler): Promise<void>;
  /** Withdraws a tool at run time. */
  unregisterTool(name: string): Promise<void>;
  /**
   * Declares a setting (HomeAgent `RegisterDef`): inside start() it goes out with
   * Register, later through the Settings service.
   */
  registerDef(def: ConfigDef): Promise<void>;
  /**
   * Registers a pipeline stage hook (HomeAgent `RegisterStage`); only inside start().
   * Hooks of one plugin and stage run in registration order.
   */
  registerStage(stage: StageName | number, handler: StageHandler, opts?: StageOptions): void;
  /** Like registerStage, but before/after_toolcall see only this plugin's own tools. */
  registerStageOwnTools(stage: StageName | number, handler: StageHandler, opts?: StageOptions): void;
  /** Writes a line to the plugin's log (stderr), prefixed with the plugin name. */
  log(...args: unknown[]): void;
}

/**
 * Base class of LinkZone-style plugins; optional for HomeAgent-style ones.
 * Subclasses set `static metadata` and implement `executeTool` and/or `handleEvent`,
 * or implement `start(sdk)`.
 */
export declare class Plugin {
  /** LinkZone metadata; set it on the subclass. */
  static metadata?: LinkZoneMetadata;
  /** Runs one call of the tool named `metadata.name`. */
  executeTool(sender: Sender, args: any, ctx: CallContext): Promise<LinkZoneResult | unknown>;
  /** Handles a message that matched one of the plugin's triggers (inject mode). */
  handleEvent?(sender: EventSender, ctx: EventContext): Promise<void> | void;
  /** HomeAgent-style registration; the default does nothing. */
  start(sdk: HomeAgentSdk): void | Promise<void>;
  /** Called on Shutdown (and when the broker goes away). */
  stop(): void | Promise<void>;
  /** Test hook (README "Test hooks"): the `Hello.protocol_version` sent instead of the SDK's. Instance or static. */
  hearthProtocolVersion?: string;
  /** Test hook (README "Test hooks"): runs after Hello, before Register. Instance or static. */
  hearthAfterHello?: AfterHelloHook;
  static hearthProtocolVersion?: string;
  static hearthAfterHello?: AfterHelloHook;
}

/**
 * Test hook run once `Hello` is on the wire, before `Register`: resolving to
 * undefined goes on to register, to an integer ends the session with that exit code
 * (no Register); never settling leaves the plugin unregistered (broker messages,
 * Pings included, are held meanwhile).
 */
export type AfterHelloHook = () => void | number | Promise<void | number>;

/** A HomeAgent-style plugin object (no base class needed). */
export interface HomeAgentPlugin {
  name(): string;
  start(sdk: HomeAgentSdk): void | Promise<void>;
  stop?(): void | Promise<void>;
  /** Test hook (README "Test hooks"). */
  hearthProtocolVersion?: string;
  /** Test hook (README "Test hooks"). */
  hearthAfterHello?: AfterHelloHook;
}

/** HomeAgent `ConfigDef` (Go JSON names; `displayName` is accepted too). */
export interface ConfigDef {
  key: string;
  default?: unknown;
  type?: 'string' | 'number' | 'integer' | 'boolean';
  display_name?: string;
  displayName?: string;
  description?: string;
  category?: string;
  options?: string[];
  min?: number;
  max?: number;
  step?: number;
  required?: boolean;
  /** Masked in Dump and logs. */
  secret?: boolean;
}

/** HomeAgent stage names, in pipeline order. */
export type StageName = 'on_input' | 'pre_action' | 'post_action' | 'before_toolcall' | 'after_toolcall' | 'before_output' | 'after_output';

/** Stage name constants as the HomeAgent SDK names them. */
export declare const Stage: {
  readonly OnInput: 'on_input';
  readonly PreAction: 'pre_action';
  readonly PostAction: 'post_action';
  readonly BeforeToolcall: 'before_toolcall';
  readonly AfterToolcall: 'after_toolcall';
  readonly BeforeOutput: 'before_output';
  readonly AfterOutput: 'after_output';
};

/** A tool call as stage hooks see it; set `deny` in before_toolcall to refuse it. */
export interface StageToolCall {
  id: string;
  name: string;
  plugin: string;
  arguments: any;
  deny: boolean;
  denyReason: string;
}

/** A tool result as stage hooks see it. */
export interface StageToolResult {
  callId: string;
  name: string;
  plugin: string;
  success: boolean;
  result: unknown;
}

/**
 * HomeAgent StageContext. The broker keeps only the fields the stage may write (see the
 * permission matrix); setting `response` short-circuits to after_output.
 */
export interface StageContext {
  rawMessage: string;
  userId: string;
  groupId: string;
  contextMsgs: Array<Record<string, unknown>>;
  llmText: string;
  reasoningContent: string;
  tokenUsage: Record<string, number>;
  toolCalls: StageToolCall[];
  toolResults: StageToolResult[];
  finalText: string;
  response: string | null;
  phase: StageName | '';
  memory: Array<{ role: string; content: string; score: number }>;
  noMemory: boolean;
  extra: Record<string, unknown>;
}

/**
 * A stage hook: change `ctx` in place (or return a new context object). A throw is
 * reported to the broker, which logs it and continues without this hook's writes.
 */
export type StageHandler = (ctx: StageContext, info: StageCallInfo) => void | StageContext | Promise<void | StageContext>;

/** The second argument of a stage hook: cancellation, call id, stage and hook, trace context. */
export interface StageCallInfo extends TraceFields {
  signal: AbortSignal;
  callId: string;
  stage: StageName;
  hookId: string;
}

/** The second argument of `handleEvent`: cancellation, call id, trace context. */
export interface EventContext extends TraceFields {
  signal: AbortSignal;
  callId: string;
}

/** Options of {@link serve}. */
export interface ServeOptions {
  /** Overrides HEARTH_ADDR (`unix:///abs/path`, `unix:/abs/path` or `http://127.0.0.1:PORT`). */
  addr?: string;
  /** Overrides the spawn token (read from the pipe fd HEARTH_TOKEN_FD, else HEARTH_TOKEN). */
  token?: string;
  /** Environment to read HEARTH_* from; default `process.env`. */
  env?: Record<string, string | undefined>;
  /** Exit the process when the session ends (default true). */
  exit?: boolean;
  /**
   * The plugin's main file: named in error messages, and its `@ai-trigger-*` header
   * comments declare `ai.inject` when metadata has none (`serve(P, {file: __filename})`).
   */
  file?: string;
  /**
   * Receives each line the SDK logs for this plugin (`hearth-plugin: plugin NAME: …`,
   * without the newline) instead of stderr. The test harness collects them this way.
   */
  log?: (line: string) => void;
}

/**
 * Serves a plugin (class or instance, LinkZone or HomeAgent style) until the broker shuts
 * it down or goes away. Resolves with the exit code when `exit: false`:
 * 0 ok, 1 stream failure or start() threw, 2 bad configuration, 3 rejected by the broker.
 */
export declare function serve(plugin: unknown, opts?: ServeOptions): Promise<number>;
