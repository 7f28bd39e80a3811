// Types of hearth-plugin/testing (CommonJS entry): a broker-free test harness for
// Hearth plugins. `load()` runs a plugin's real session against an in-process fake
// broker; `FakeBroker` is the wire-level layer underneath.

import type { ChildProcess } from 'node:child_process';
import type { Server } from '@grpc/grpc-js';
import type { Sender, JsonValue, StageName } from '../index';
import type { hearth } from '../gen/hearth';

/** A capability a plugin.json may grant (broker/src/manifest.rs `CAPABILITIES`). */
export type Capability = 'memory' | 'knowledge' | 'mcp' | 'llm' | 'input' | 'input_as_user' | 'settings_core' | 'settings_cross' | 'settings_secrets';

/** Every capability, in the broker's order. */
export declare const CAPABILITIES: readonly Capability[];

/** What a plugin gets when its manifest names no capabilities: memory, knowledge, llm, input. */
export declare const DEFAULT_CAPABILITIES: readonly Capability[];

/** What a secret setting reads as where it is masked (`Settings.Dump`, other scopes). */
export declare const SECRET_MASK: '••••••';

/** The `-e` program the broker runs for a Node plugin (`node -e NODE_BOOTSTRAP /abs/entry`). */
export declare const NODE_BOOTSTRAP: string;

/**
 * Everything the harness raises. `code` says what went wrong:
 * - `LOAD_FAILED`: the entry file is missing or exports no plugin (the message says why);
 * - `REJECTED`: the broker would reject part of the registration (`rejected` lists the
 *   items; pass `allowRejected` to load anyway) or all of it (protocol version,
 *   all-or-nothing);
 * - `SESSION_ENDED`: the plugin's session ended (`exitCode`), before it registered or
 *   during a call;
 * - `STARTUP_TIMEOUT`: it did not register within the startup timeout;
 * - `UNKNOWN_TOOL`: `call()` of a tool the plugin did not register (`tool`);
 * - `INVALID_ARGUMENTS`: see {@link InvalidArgumentsError};
 * - `NO_TRIGGER`: `event()` of a message no trigger of the plugin matches;
 * - `UNKNOWN_STAGE`: `runStage()` of a stage name that does not exist;
 * - `TIMEOUT`: a call or event got no answer within its timeout (the plugin was sent
 *   `Cancel`); `ABORTED`: its `signal` aborted without a reason;
 * - `INVALID_CAPABILITY`: an unknown capability name;
 * - `CLOSED`: the harness was closed;
 * - `NOT_FOUND`, `INVALID_ARGUMENT`, `PERMISSION_DENIED`, `UNIMPLEMENTED`: thrown by the
 *   fake host stores, with the broker's message (the plugin receives the same as a
 *   `HostError` with that code), e.g. INVALID_ARGUMENT "setting `days` of plugin
 *   weather: expected a number (its def's type is `number`), got \"abc\" (a string)"
 *   for a setting value, written by the plugin or the test, that does not fit the type
 *   of its key's def.
 */
export declare class HarnessError extends Error {
  constructor(code: string, message: string, details?: Record<string, unknown>);
  readonly name: 'HarnessError' | 'InvalidArgumentsError';
  code: string;
  /** With `REJECTED`: the items the broker would reject. */
  rejected?: RejectedItem[];
  /** With `SESSION_ENDED`: the session's exit code (-1: killed by a signal). */
  exitCode?: number;
  /** With `UNKNOWN_TOOL`: the tool asked for. */
  tool?: string;
  /** With `NOT_FOUND` from the settings store: the key looked for. */
  key?: string;
}

/**
 * Call arguments that violate the tool's JSON Schema, or are not an object; the plugin
 * was not called. `message` is the broker's: "plugin weather: tool weather: argument
 * `city`: 12 is not of type \"string\"" (top-level problems: "…: arguments: \"city\" is
 * a required property").
 */
export declare class InvalidArgumentsError extends HarnessError {
  constructor(plugin: string, tool: string, argument: string, reason: string);
  readonly name: 'InvalidArgumentsError';
  code: 'INVALID_ARGUMENTS';
  plugin: string;
  tool: string;
  /** Path of the offending argument (`city`, `stops.2.name`); '' for the arguments object itself. */
  argument: string;
  /** The broker's text without the plugin and tool, e.g. "argument `city`: 12 is not of type \"string\"". */
  reason: string;
}

/**
 * Checks arguments against a JSON Schema as the broker does before a call: null when
 * valid, else the first violation in the broker's order and words.
 */
export declare function validateArguments(schema: object, args: unknown): { argument: string; message: string } | null;

/** Options of {@link load}. */
export interface LoadOptions {
  /**
   * The name the broker knows the plugin by (its settings table, the owner of its
   * tools). Default: `name` of the plugin.json beside the entry file, else the entry's
   * folder name; for a class or object, its own name (`metadata.name` / `name()`).
   */
  name?: string;
  /**
   * What the plugin may call. Default: `capabilities` of the plugin.json beside the
   * entry file, else {@link DEFAULT_CAPABILITIES}. A host call without the capability
   * fails with PERMISSION_DENIED, as under the broker.
   */
  capabilities?: readonly Capability[];
  /** This plugin's settings, written before `start()` runs. A value for a key whose def is already stored (e.g. in `host`) must fit the def's type, as under the broker (else `load` rejects with INVALID_ARGUMENT). */
  settings?: Record<string, JsonValue>;
  /** Core settings (`config`), written before `start()`. */
  coreSettings?: Record<string, JsonValue>;
  /** Other plugins' settings, by plugin name, written before `start()`. */
  pluginSettings?: Record<string, Record<string, JsonValue>>;
  /** Names of the LLM sources the Llm service lists (first = current). Ignored with `host`. */
  llmSources?: string[];
  /** The stores to serve (e.g. prefilled knowledge or documents); default a new {@link FakeHost}. */
  host?: FakeHost;
  /** Default sender of calls and events; default `{userId: 'tester', groupId: '', channel: 'test', sessionId: ''}`. */
  sender?: Partial<Sender>;
  /**
   * Run the plugin as a child process through the broker's bootstrap and
   * `hearth-plugin/runner` (needs an entry file). Default: in this process.
   */
  spawn?: boolean;
  /** Environment: in-process, what the session reads `HEARTH_*` from (e.g. `HEARTH_SDK_DEBUG`); with `spawn`, added to the process's environment. */
  env?: Record<string, string>;
  /** The file named in errors and read for `@ai-trigger-*` header comments when `target` is a class or object. */
  file?: string;
  /** Load even when the broker would reject some items (they are in `rejected`). */
  allowRejected?: boolean;
  /** Default call timeout (ms); default plugin.json `call_timeout_s`, else 60 s. A tool's `ai.tool.timeout` wins. */
  callTimeoutMs?: number;
  /** How long the plugin may take to register (ms); default plugin.json `startup_timeout_s`, else 10 s. */
  startupTimeoutMs?: number;
  /** Also write the plugin's log lines to stderr (they are always kept in `logs`). */
  echoLogs?: boolean;
}

/**
 * Loads a plugin and runs its session against an in-process fake broker until it has
 * registered. `target` is a plugin entry file (absolute, or relative to the working
 * directory; CommonJS or ESM), or a plugin class or object in either style (LinkZone
 * class with `static metadata` + `executeTool`/`handleEvent`; HomeAgent `start(sdk)`).
 * Rejects with a {@link HarnessError} (`LOAD_FAILED`, `REJECTED`, `SESSION_ENDED`,
 * `STARTUP_TIMEOUT`; INVALID_ARGUMENT for a seeded setting the broker would refuse).
 * Call `close()` when done.
 */
export declare function load(target: string | Function | object, options?: LoadOptions): Promise<PluginHarness>;

/** LinkZone `ai.tool` of a registered tool, with the declared names and defaults filled in. */
export interface AiToolInfo {
  parameters: Array<{ name: string; type: string; description: string; required: boolean; default?: JsonValue; enum?: JsonValue[]; example?: string }>;
  usage: string;
  when_to_use: string;
  continue: boolean;
  chainable: boolean;
  max_calls: number;
  confirm: boolean;
  cooldown: number;
  timeout: number;
}

/** A tool as the broker registered it. */
export interface ToolInfo {
  name: string;
  /** The owning plugin (the harness's `name`). */
  plugin: string;
  /** What the LLM reads (for LinkZone tools: usage, then "When to use: …"). */
  description: string;
  /** The JSON Schema arguments are checked against (for LinkZone tools: derived from `ai.tool.parameters`). */
  parameters: Record<string, unknown>;
  serial: boolean;
  /** LinkZone `ai.tool`, or null for a HomeAgent tool. */
  aiTool: AiToolInfo | null;
}

/** A registered stage hook. */
export interface HookInfo {
  stage: StageName;
  hookId: string;
  /** Sees before/after_toolcall only for this plugin's own tools. */
  ownToolsOnly: boolean;
  /** False when the hook declared it does not read `contextMsgs`. */
  contextMsgs: boolean;
}

/** A registered trigger: type 0 command, 1 keyword, 2 regex, 3 segment, 4 event. */
export interface TriggerInfo {
  type: number;
  pattern: string;
}

/** A registered `ai.inject`. */
export interface InjectInfo {
  usage: string;
  format: string;
  args: Record<string, string>;
}

/** An item the broker refused at registration. */
export interface RejectedItem {
  /** 'tool', 'stage', 'trigger', 'inject' or 'config_def'. */
  kind: string;
  name: string;
  reason: string;
}

/** Options of {@link PluginHarness.call}. */
export interface CallOptions {
  /** Merged over the harness's default sender. */
  sender?: Partial<Sender>;
  /** Default: the tool's `ai.tool.timeout`, else the harness's call timeout. Progress restarts it. */
  timeoutMs?: number;
  /** Aborting it sends `Cancel` and rejects with the signal's reason. */
  signal?: AbortSignal;
  /** W3C trace context sent with the call, as a tracing broker sends it (default none). */
  traceparent?: string;
  tracestate?: string;
}

/** A tool's result as the broker receives it. */
export interface ToolCallResult {
  success: boolean;
  /** Text for the LLM. */
  content: string;
  /** The structured result (`data` of LinkZone, the value of HomeAgent), parsed; null when none. */
  data: unknown;
  /** Error text when `success` is false ("<Name>: <message>" for a throw), else ''. */
  error: string;
  /** `ctx.progress()` reports, in order (`fraction` null when not given; `progress` / `total` the counts, 0 when not given). */
  progress: Array<{ message: string; fraction: number | null; progress: number; total: number }>;
}

/** Options of {@link PluginHarness.event}. */
export interface EventOptions {
  /** Merged over the harness's default sender. */
  sender?: Partial<Sender>;
  /** Deliver with these params instead of matching the message against the triggers. */
  params?: string[];
  /** With `params`: the trigger to report (default the plugin's first). */
  trigger?: TriggerInfo;
  /** Deliver as broker event (`'message'`, `'reply'`) to a type-4 trigger; the text is the one param. */
  event?: string;
  timeoutMs?: number;
  signal?: AbortSignal;
  /** W3C trace context sent with the event (default none). */
  traceparent?: string;
  tracestate?: string;
}

/** What `handleEvent` did. */
export interface EventResult {
  /** `sender.reply` texts, in order (non-strings as JSON). */
  replies: string[];
  /** '' when it returned, else "<Name>: <message>" of what it threw. */
  error: string;
  /** The params it was given. */
  params: string[];
  /** The trigger that matched. */
  trigger: TriggerInfo;
}

/** A StageContext in the shape handlers see; every field optional (empty by default). `phase` is set by the stage. */
export interface StageContextInput {
  rawMessage?: string;
  userId?: string;
  groupId?: string;
  contextMsgs?: Array<Record<string, unknown>>;
  llmText?: string;
  reasoningContent?: string;
  tokenUsage?: Record<string, number>;
  toolCalls?: Array<{ id?: string; name?: string; plugin?: string; arguments?: unknown; deny?: boolean; denyReason?: string }>;
  toolResults?: Array<{ callId?: string; name?: string; plugin?: string; success?: boolean; result?: unknown }>;
  finalText?: string;
  response?: string | null;
  memory?: Array<{ role: string; content: string; score: number }>;
  noMemory?: boolean;
  extra?: Record<string, unknown>;
}

/** The StageContext after a stage ran, every field present. */
export interface StageContextResult {
  rawMessage: string;
  userId: string;
  groupId: string;
  contextMsgs: Array<Record<string, unknown>>;
  llmText: string;
  reasoningContent: string;
  tokenUsage: Record<string, number>;
  toolCalls: Array<{ id: string; name: string; plugin: string; arguments: unknown; deny: boolean; denyReason: string }>;
  toolResults: Array<{ callId: string; name: string; plugin: string; success: boolean; result: unknown }>;
  finalText: string;
  response: string | null;
  phase: StageName;
  memory: Array<{ role: string; content: string; score: number }>;
  noMemory: boolean;
  extra: Record<string, unknown>;
}

/** A field of the permission matrix, as the broker names dropped writes. */
export type StageField = 'raw_message' | 'context_msgs' | 'llm_text' | 'tool_calls' | 'tool_call.deny' | 'tool_results' | 'final_text' | 'response' | 'extra'
  | 'user_id' | 'group_id' | 'reasoning_content' | 'token_usage' | 'phase' | 'memory' | 'no_memory';

/** Options of {@link PluginHarness.runStage}. */
export interface StageOptions {
  /**
   * Owner of the tool at before/after_toolcall, for own-tools hooks. Default: the
   * call's `plugin`, else this plugin when it has a tool of that name.
   */
  toolOwner?: string | null;
  /** Per hook; default 5 s (the broker's). A hook past it counts as failed. */
  timeoutMs?: number;
  signal?: AbortSignal;
  /** W3C trace context sent with each RunStage (default none). */
  traceparent?: string;
  tracestate?: string;
}

/** What running one stage's hooks did. */
export interface StageRun {
  stage: StageName;
  /** The context after the permitted writes. */
  context: StageContextResult;
  /** Hook ids that ran, in order. */
  ran: string[];
  /** Writes the permission matrix dropped (the broker logs them with the plugin's name). */
  dropped: Array<{ hookId: string; field: StageField }>;
  /** Hooks that threw or timed out (their writes are skipped). */
  errors: Array<{ hookId: string; error: string }>;
  /** The hook that set `response` (or, at before_toolcall, denied a call): later hooks did not run. */
  shortCircuit: { hookId: string } | null;
}

/** A loaded plugin, driven as the broker drives it. */
export declare class PluginHarness {
  private constructor();
  /** The name the broker knows the plugin by. */
  readonly name: string;
  /** The plugin object (null with `spawn`). */
  readonly plugin: any;
  /** What the plugin says about itself in Register. */
  readonly info: { name: string; version: string; author: string; description: string };
  /** Items the broker would reject (empty unless `allowRejected`). */
  readonly rejected: RejectedItem[];
  /** Lines the plugin logged (the SDK's `hearth-plugin: plugin NAME: …` lines; with `spawn`, all of stderr). */
  readonly logs: string[];
  /** The session's exit code once it ended, else null. */
  readonly exitCode: number | null;
  /** Registered tools, sorted by name (registrations at run time included). */
  readonly tools: ToolInfo[];
  /** One registered tool, or undefined. */
  tool(name: string): ToolInfo | undefined;
  /** Registered stage hooks, in registration order. */
  readonly hooks: HookInfo[];
  /** Registered triggers, in registration order. */
  readonly triggers: TriggerInfo[];
  /** Registered `ai.inject` (from metadata or `@ai-trigger-*` header comments), or null. */
  readonly inject: InjectInfo | null;
  /** This plugin's settings (and core / other plugins'), as the test sees them. */
  readonly settings: SettingsView;
  /** Graph memory of the fake host. */
  readonly memory: GraphMemoryStore;
  /** Text memory of the fake host. */
  readonly textMemory: TextMemoryStore;
  /** Documents of the fake host. */
  readonly docMemory: DocMemoryStore;
  /** Knowledge of the fake host. */
  readonly knowledge: KnowledgeStore;
  /** LLM sources of the fake host. */
  readonly llm: LlmStore;
  /** MCP servers of the fake host (canned resources and prompts for `sdk.mcp()`). */
  readonly mcp: McpStore;
  /** Input the plugin injected (`sdk.injectText` …), oldest first. */
  readonly injected: InjectedInput[];
  /** Every host-service call the plugin made, in order. */
  readonly hostCalls: HostCall[];
  /** The fake host services' state. */
  readonly host: FakeHost;
  /** The fake broker underneath. */
  readonly broker: FakeBroker;
  /**
   * Calls a tool as the broker does: the arguments are checked against its JSON Schema
   * first. Rejects with {@link InvalidArgumentsError} (the plugin is not called), or a
   * HarnessError `UNKNOWN_TOOL`, `TIMEOUT`, `SESSION_ENDED`. A failing tool is not a
   * rejection: it resolves with `success: false` and `error`.
   */
  call(tool: string, args?: Record<string, unknown>, opts?: CallOptions): Promise<ToolCallResult>;
  /**
   * Delivers a message to `handleEvent` after matching it against the plugin's
   * triggers as the broker does (`/weather 上海` → params `['上海']`), and collects the
   * replies. Rejects with a HarnessError `NO_TRIGGER`, `TIMEOUT`, `SESSION_ENDED`.
   */
  event(message: string, opts?: EventOptions): Promise<EventResult>;
  /**
   * Runs the plugin's hooks of `stage` (name or 1–7) on `context` as the pipeline does:
   * in order, each receiving what its stage may see, its writes kept or dropped by the
   * permission matrix; stops at a hook that sets `response`. Rejects with a
   * HarnessError `UNKNOWN_STAGE` or `SESSION_ENDED`; a failing hook is in `errors`.
   */
  runStage(stage: StageName | number, context?: StageContextInput, opts?: StageOptions): Promise<StageRun>;
  /**
   * Makes host-service `method` (`'settings.get'`, `'knowledge.search'`,
   * `'input.injectText'`, …) answer `reply` from now on: a response message, a function
   * of the request, or `{code, details}` to fail with that gRPC status (`code` a name
   * like 'UNAVAILABLE' or a number). `undefined` restores the fake's answer.
   */
  override(method: string, reply: unknown): void;
  /** Stops the plugin as the broker does (Shutdown, grace period) and the fake broker. Idempotent. */
  close(): Promise<void>;
  /** `await using t = await load(…)`. */
  [Symbol.asyncDispose](): Promise<void>;
}

/**
 * Settings as the test sees them: no capability checks, secrets in clear. Store errors
 * are HarnessErrors with the broker's code and message (`NOT_FOUND`: "no `city` in
 * config_weather").
 */
export declare class SettingsView {
  private constructor();
  /** The value of `key` in this plugin's table, with its JSON type; throws NOT_FOUND when unset. */
  get(key: string): JsonValue;
  has(key: string): boolean;
  /** Writes `key`; throws INVALID_ARGUMENT (the broker's message) when the value does not fit the type of the key's def (`string`, `number`, `integer`, `boolean`; null always fits; options and min/max are not checked, as by the broker). */
  set(key: string, value: JsonValue): void;
  /** Keys starting with `prefix`, sorted. */
  list(prefix?: string): string[];
  /** This plugin's table as an object. */
  all(): Record<string, JsonValue>;
  /** The defs this plugin registered, sorted by key. */
  defs(prefix?: string): ConfigDefJson[];
  /** Every setting, secrets masked (what `Settings.Dump` answers). */
  dump(): SettingsDump;
  getCore(key: string): JsonValue;
  setCore(key: string, value: JsonValue): void;
  getPlugin(plugin: string, key: string): JsonValue;
  setPlugin(plugin: string, key: string, value: JsonValue): void;
}

/** A ConfigDef as stored and as `sdk.settings().defs()` returns it (seed JSON names; empty fields left out). */
export interface ConfigDefJson {
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

/** `{core: {...}, plugins: {name: {...}}}`, secret values as {@link SECRET_MASK}. */
export interface SettingsDump {
  core: Record<string, JsonValue>;
  plugins: Record<string, Record<string, JsonValue>>;
}

/**
 * The settings store. `scope` is null for the core settings (`config`), else a
 * plugin's name (its table `config_<name>`, created on its first write).
 */
export interface SettingsStore {
  /** The value, with its JSON type; throws NOT_FOUND ("no `k` in config_x"), INVALID_ARGUMENT for an empty key. */
  get(scope: string | null, key: string): JsonValue;
  /** Like get; with `masked`, a secret reads as {@link SECRET_MASK}. */
  read(scope: string | null, key: string, masked: boolean): JsonValue;
  /** Writes `key`; INVALID_ARGUMENT (the broker's message) when the value does not fit the type of the key's def. */
  set(scope: string | null, key: string, value: JsonValue): void;
  list(scope: string | null, prefix?: string): string[];
  /** Records a def; writes its default when the key is unset. */
  registerDef(scope: string | null, def: ConfigDefJson): void;
  defs(scope: string | null, prefix?: string): ConfigDefJson[];
  /** A def says `secret`, or it is a core key named like a credential (`…api_key`, `…token`, …). */
  isSecret(scope: string | null, key: string): boolean;
  dump(): SettingsDump;
  /** Plugins that have a settings table, sorted. */
  plugins(): string[];
  /** `config`, `config_weather`, … or null before the plugin's first write. */
  tableName(scope: string | null): string | null;
}

/** A fact for graph memory. */
export interface TripleJson {
  subject: string;
  relation: string;
  object: string;
  subject_type?: string;
  object_type?: string;
  session_id?: string;
}

/** Graph memory (broker semantics: names compared trimmed and case-insensitively). */
export interface GraphMemoryStore {
  /** Stores triples (all or none; INVALID_ARGUMENT for an empty subject, relation or object); returns relations added. */
  commit(triples: TripleJson[]): number;
  /** Entities whose name contains a keyword and what lies within `depth` active relations. */
  recall(keywords: string[], depth: number): { entities: Array<{ name: string; type: string; mention_count: number }>; relations: Array<{ source_name: string; target_name: string; relation_type: string }> };
  introspect(): { entities: number; relations: number; inactive_relations: number; entity_types: Record<string, number>; relation_types: Record<string, number>; sessions: number; top_entities: Array<{ name: string; type: string; mention_count: number }> };
  /** NOT_FOUND when either is missing; returns relations redirected. */
  mergeEntities(source: string, target: string): number;
  /** Criteria: subject_contains, target_contains, relation_type, session_id (at least one); mode 'soft' or 'hard'. */
  purge(criteria: Record<string, string>, mode: 'soft' | 'hard'): number;
}

/** Text memory: the appended lines. */
export interface TextMemoryStore {
  readonly events: Array<{ role: string; content: string; timestamp: number; channel: string }>;
  /** INVALID_ARGUMENT when `role` is empty; timestamp 0 = now. */
  append(event: { role: string; content?: string; timestamp?: number; channel?: string }): void;
}

/** Documents, found by full-text search (BM25; an approximation of the broker's jieba/FTS5 index). */
export interface DocMemoryStore {
  /** Same id replaces; empty id gets `doc_` + 16 hex digits; returns the id. INVALID_ARGUMENT when title and content are both blank. */
  insert(doc: { id?: string; title?: string; content?: string }): string;
  /** NOT_FOUND when there is no such document. */
  remove(id: string): void;
  /** Best matches first, score > 0; `topK` 0 = 5, capped at 100. */
  query(text: string, topK?: number): Array<{ id: string; title: string; content: string; score: number }>;
  stats(): { docs: number; text_bytes: number; index_bytes: number; oldest: number | null; newest: number | null };
  all(): Array<{ id: string; title: string; content: string }>;
}

/** Knowledge entries, found by full-text search. */
export interface KnowledgeStore {
  /** Stores under the broker's sanitized name (`天气/北京` → `天气_北京`), which it returns. */
  add(name: string, content: string): string;
  list(): string[];
  get(name: string): string | undefined;
  remove(name: string): boolean;
  search(query: string, topK?: number): Array<{ name: string; content: string; score: number }>;
}

/** LLM sources for the Llm service. */
export interface LlmStore {
  sources: string[];
  /** The chosen source, or null (then the first is current). */
  chosen: string | null;
  current(): string;
  /** Throws for an unknown source. */
  set(name: string): void;
}

/** One request a plugin sent through the Mcp service. */
export interface McpCall {
  /** The MCP plugin's name. */
  server: string;
  method: string;
  params: Record<string, any>;
}

/**
 * MCP servers (plugins with `"runtime": "mcp"`) whose resources and prompts a plugin
 * reads through `sdk.mcp()` (capability `mcp`), with canned answers. Seed a server with
 * `addResource` / `addPrompt`, or give any method's result with `setResult` (it takes
 * precedence). As the broker: NOT_FOUND for a server never added, INVALID_ARGUMENT for
 * another method or params that are not an object, UNAVAILABLE after
 * `setConnected(server, false)`, FAILED_PRECONDITION (the server's error) for an
 * unknown resource or prompt.
 */
export declare class McpStore {
  constructor();
  /** Requests plugins sent, in order. */
  readonly requests: McpCall[];
  /** Declares MCP plugin `server` (connected, nothing listed). */
  addServer(server: string): void;
  /** A disconnected server answers UNAVAILABLE. */
  setConnected(server: string, connected: boolean): void;
  /** A text resource: listed by `resources/list`, `text` read by `resources/read`. */
  addResource(server: string, uri: string, text: string, opts?: { name?: string; mimeType?: string; description?: string }): void;
  /**
   * A prompt: listed by `prompts/list`, answered by `prompts/get`. `result`: the text of
   * one user message, MCP messages, a whole result object, or a function of the arguments
   * returning one of these.
   */
  addPrompt(server: string, name: string, result: string | unknown[] | Record<string, unknown> | ((args: Record<string, string>) => string | unknown[] | Record<string, unknown>),
    opts?: { description?: string; arguments?: Array<string | { name: string; description?: string; required?: boolean }> }): void;
  /** Answers `method` of `server` with `result` (an object, or a function of the params); `undefined` removes it. */
  setResult(server: string, method: import('../index').McpMethod, result: Record<string, unknown> | ((params: Record<string, any>) => Record<string, unknown>) | undefined): void;
  /** Answers one `Mcp.Request` as the broker would (throws a HarnessError named by the gRPC status). */
  request(server: string, method: string, paramsJson: string): any;
}

/** Input a plugin injected, as the broker interprets it. */
export interface InjectedInput {
  method: 'injectText' | 'injectTextNoMemory' | 'injectInterruptText';
  plugin: string;
  /** `plugin:<name>` unless the plugin may speak as a user (`input_as_user`). */
  source: string;
  userId: string;
  groupId: string;
  /** Default: the plugin's name. */
  channel: string;
  text: string;
  priority: 'background' | 'message' | 'interactive' | 'critical';
  noMemory: boolean;
  interrupt: boolean;
}

/** A host-service call as the fake broker saw it. */
export interface HostCall {
  /** `settings.get`, `memory.recall`, `input.injectText`, … */
  method: string;
  plugin: string;
  token: string;
  /** The decoded request message. */
  request: any;
  /** The status details when it failed. */
  error?: string;
}

/** The host services' state, answering each rpc as the broker does (capabilities, masking, errors). */
export declare class FakeHost {
  constructor(opts?: { llmSources?: string[] });
  readonly settings: SettingsStore;
  readonly memory: GraphMemoryStore;
  readonly textMemory: TextMemoryStore;
  readonly docMemory: DocMemoryStore;
  readonly knowledge: KnowledgeStore;
  readonly llm: LlmStore;
  readonly mcp: McpStore;
  readonly injected: InjectedInput[];
  /** Grants `plugin` these capabilities (a plugin not granted any has {@link DEFAULT_CAPABILITIES}). */
  grant(plugin: string, capabilities: readonly string[]): void;
  holds(plugin: string, capability: string): boolean;
  /** Answers one rpc (`'settings.get'`, …) for `plugin`; throws a HarnessError with the gRPC status name as code. */
  answer(method: string, plugin: string, request: any): object;
}

/** One attached plugin session, seen from the broker (wire messages, camelCase fields). */
export declare class BrokerSession {
  private constructor();
  readonly call: any;
  /** Received messages not yet taken (unless `onMessage` is set). */
  readonly messages: hearth.v1.PluginMessage[];
  readonly ended: boolean;
  /** The plugin its token names. */
  readonly plugin: string;
  readonly token: string;
  /** From now on every message goes to `fn` (buffered ones first). */
  onMessage(fn: (m: hearth.v1.PluginMessage) => void): void;
  /** Takes the first message matching `pred`; rejects after `ms` (default 5000) or when the stream ends. */
  next(pred: (m: hearth.v1.PluginMessage) => boolean, ms?: number, what?: string): Promise<hearth.v1.PluginMessage>;
  /** The next message of one kind (`'register'`, `'toolResult'`, …), unwrapped. */
  nextOf(kind: string, ms?: number): Promise<any>;
  /** The ToolResult of `callId`. */
  result(callId: number | string | object, ms?: number): Promise<hearth.v1.ToolResult>;
  /** Resolves when the plugin ends the stream; rejects after `ms`. */
  waitEnd(ms?: number): Promise<void>;
  /** Resolves when the stream has ended. */
  whenEnded(): Promise<void>;
  /** Writes a HostMessage (`{invokeTool: {...}}`, `{shutdown: {graceMs}}`, …); false when ended or buffering. */
  send(msg: hearth.v1.IHostMessage): boolean;
  /** Sends InvokeTool with `args` as JSON. */
  invoke(callId: number | object, tool: string, args: unknown, sender?: Partial<Sender>): void;
  /** InvokeTool, then its ToolResult. */
  call1(callId: number | object, tool: string, args: unknown, sender?: Partial<Sender>): Promise<hearth.v1.ToolResult>;
  /** Closes the broker's side of the stream. */
  end(): void;
}

/** A plugin process the fake broker spawned, with its output. */
export declare class PluginProcess {
  private constructor();
  readonly proc: ChildProcess;
  readonly stdout: string;
  readonly stderr: string;
  /** The token pipe's {dev, ino} when the token went through one. */
  readonly tokenPipe: { dev: number; ino: number } | null;
  readonly running: boolean;
  /** Settles when the process has exited and its output is read. */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null; error?: Error }>;
  /** Calls `fn` with each complete stderr line. */
  onStderrLine(fn: (line: string) => void): void;
  /** The exit result; rejects if it still runs after `ms` (default 5000). */
  exit(ms?: number): Promise<{ code: number | null; signal: NodeJS.Signals | null; error?: Error }>;
}

/** Options of {@link FakeBroker.spawn}. */
export interface SpawnOptions {
  /** Added to the process's environment (`undefined` removes a variable). */
  env?: Record<string, string | undefined>;
  /** Default `broker.token`, which then names this plugin. */
  token?: string;
  /** HEARTH_PLUGIN; default the entry's folder name. */
  name?: string;
  /** Pass the token as the broker does: in a pipe inherited as fd 3 (HEARTH_TOKEN_FD=3). */
  tokenPipe?: boolean;
  /** Run `node entry` (a plugin that calls `serve()` itself) instead of the bootstrap. */
  script?: boolean;
  /** Another `-e` program instead of {@link NODE_BOOTSTRAP}. */
  bootstrap?: string;
}

/**
 * A fake broker: a grpc-js server on a temp Unix socket serving `PluginHost.Attach`
 * (token checked) and the host services ({@link FakeHost}), which spawns plugin
 * processes the way the broker does. For tests that drive a session message by message.
 */
export declare class FakeBroker {
  private constructor();
  /** Starts one on a fresh temp socket. */
  static start(opts?: { host?: FakeHost }): Promise<FakeBroker>;
  /** The default spawn token; it names the plugin spawned last. */
  readonly token: string;
  /** Its temp dir (removed by close()). */
  readonly dir: string;
  readonly sock: string;
  /** HEARTH_ADDR (`unix:///…/hearth.sock`). */
  readonly addr: string;
  /** Sessions attached and not yet taken. */
  readonly sessions: BrokerSession[];
  /** Attach calls refused for a wrong token. */
  readonly unauthenticated: number;
  readonly procs: PluginProcess[];
  readonly host: FakeHost;
  /** token → plugin name. */
  readonly tokens: Map<string, string>;
  /** Canned answers by method, ahead of the fake host: a response, a function of the request, or `{code, details}` (numeric gRPC status). */
  hostReplies: Record<string, unknown>;
  /** Every host-service call, in order. */
  readonly hostCalls: HostCall[];
  readonly server: Server;
  /** A fresh token that names `plugin`. */
  tokenFor(plugin: string): string;
  /** The request of the last host call of `method`, as a plain object with every default. */
  lastCall(method: string): any;
  /** The next session (`ms` default 8000; Infinity = no bound). */
  nextSession(ms?: number): Promise<BrokerSession>;
  /** Spawns `node -e NODE_BOOTSTRAP entry` in the entry's folder, like the broker. */
  spawn(entry: string, opts?: SpawnOptions): PluginProcess;
  /** A pipe holding `token`, its write end closed: the read end's fd and the pipe's dev/ino. */
  tokenPipe(token: string): { fd: number; dev: number; ino: number };
  /** Spawns, takes Hello and Register, answers Registered (all tools, or `rejected` items). */
  attach(entry: string, opts?: SpawnOptions & { rejected?: RejectedItem[] }): Promise<{ proc: PluginProcess; session: BrokerSession; hello: hearth.v1.Hello; register: hearth.v1.Register }>;
  /** Kills its plugin processes, stops the server, removes its temp dir. */
  close(): Promise<void>;
}
