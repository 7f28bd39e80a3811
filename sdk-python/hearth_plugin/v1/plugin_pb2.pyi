from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Stage(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STAGE_UNSPECIFIED: _ClassVar[Stage]
    STAGE_ON_INPUT: _ClassVar[Stage]
    STAGE_PRE_ACTION: _ClassVar[Stage]
    STAGE_POST_ACTION: _ClassVar[Stage]
    STAGE_BEFORE_TOOLCALL: _ClassVar[Stage]
    STAGE_AFTER_TOOLCALL: _ClassVar[Stage]
    STAGE_BEFORE_OUTPUT: _ClassVar[Stage]
    STAGE_AFTER_OUTPUT: _ClassVar[Stage]

class Priority(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PRIORITY_UNSPECIFIED: _ClassVar[Priority]
    PRIORITY_BACKGROUND: _ClassVar[Priority]
    PRIORITY_MESSAGE: _ClassVar[Priority]
    PRIORITY_INTERACTIVE: _ClassVar[Priority]
    PRIORITY_CRITICAL: _ClassVar[Priority]

class TriggerType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRIGGER_COMMAND: _ClassVar[TriggerType]
    TRIGGER_KEYWORD: _ClassVar[TriggerType]
    TRIGGER_REGEX: _ClassVar[TriggerType]
    TRIGGER_SEGMENT: _ClassVar[TriggerType]
    TRIGGER_EVENT: _ClassVar[TriggerType]
STAGE_UNSPECIFIED: Stage
STAGE_ON_INPUT: Stage
STAGE_PRE_ACTION: Stage
STAGE_POST_ACTION: Stage
STAGE_BEFORE_TOOLCALL: Stage
STAGE_AFTER_TOOLCALL: Stage
STAGE_BEFORE_OUTPUT: Stage
STAGE_AFTER_OUTPUT: Stage
PRIORITY_UNSPECIFIED: Priority
PRIORITY_BACKGROUND: Priority
PRIORITY_MESSAGE: Priority
PRIORITY_INTERACTIVE: Priority
PRIORITY_CRITICAL: Priority
TRIGGER_COMMAND: TriggerType
TRIGGER_KEYWORD: TriggerType
TRIGGER_REGEX: TriggerType
TRIGGER_SEGMENT: TriggerType
TRIGGER_EVENT: TriggerType

class PluginMessage(_message.Message):
    __slots__ = ("hello", "register", "tool_result", "stage_result", "reply", "event_done", "progress", "pong", "register_tool", "unregister_tool", "batch")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    REGISTER_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESULT_FIELD_NUMBER: _ClassVar[int]
    STAGE_RESULT_FIELD_NUMBER: _ClassVar[int]
    REPLY_FIELD_NUMBER: _ClassVar[int]
    EVENT_DONE_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    PONG_FIELD_NUMBER: _ClassVar[int]
    REGISTER_TOOL_FIELD_NUMBER: _ClassVar[int]
    UNREGISTER_TOOL_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    hello: Hello
    register: Register
    tool_result: ToolResult
    stage_result: StageResult
    reply: Reply
    event_done: EventDone
    progress: Progress
    pong: Pong
    register_tool: RegisterTool
    unregister_tool: UnregisterTool
    batch: PluginBatch
    def __init__(self, hello: _Optional[_Union[Hello, _Mapping]] = ..., register: _Optional[_Union[Register, _Mapping]] = ..., tool_result: _Optional[_Union[ToolResult, _Mapping]] = ..., stage_result: _Optional[_Union[StageResult, _Mapping]] = ..., reply: _Optional[_Union[Reply, _Mapping]] = ..., event_done: _Optional[_Union[EventDone, _Mapping]] = ..., progress: _Optional[_Union[Progress, _Mapping]] = ..., pong: _Optional[_Union[Pong, _Mapping]] = ..., register_tool: _Optional[_Union[RegisterTool, _Mapping]] = ..., unregister_tool: _Optional[_Union[UnregisterTool, _Mapping]] = ..., batch: _Optional[_Union[PluginBatch, _Mapping]] = ...) -> None: ...

class PluginBatch(_message.Message):
    __slots__ = ("msgs",)
    MSGS_FIELD_NUMBER: _ClassVar[int]
    msgs: _containers.RepeatedCompositeFieldContainer[PluginMessage]
    def __init__(self, msgs: _Optional[_Iterable[_Union[PluginMessage, _Mapping]]] = ...) -> None: ...

class HostMessage(_message.Message):
    __slots__ = ("registered", "rejected", "invoke_tool", "run_stage", "handle_event", "cancel", "shutdown", "ping", "tool_registration", "batch")
    REGISTERED_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    INVOKE_TOOL_FIELD_NUMBER: _ClassVar[int]
    RUN_STAGE_FIELD_NUMBER: _ClassVar[int]
    HANDLE_EVENT_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    SHUTDOWN_FIELD_NUMBER: _ClassVar[int]
    PING_FIELD_NUMBER: _ClassVar[int]
    TOOL_REGISTRATION_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    registered: Registered
    rejected: Rejected
    invoke_tool: InvokeTool
    run_stage: RunStage
    handle_event: HandleEvent
    cancel: Cancel
    shutdown: Shutdown
    ping: Ping
    tool_registration: ToolRegistration
    batch: HostBatch
    def __init__(self, registered: _Optional[_Union[Registered, _Mapping]] = ..., rejected: _Optional[_Union[Rejected, _Mapping]] = ..., invoke_tool: _Optional[_Union[InvokeTool, _Mapping]] = ..., run_stage: _Optional[_Union[RunStage, _Mapping]] = ..., handle_event: _Optional[_Union[HandleEvent, _Mapping]] = ..., cancel: _Optional[_Union[Cancel, _Mapping]] = ..., shutdown: _Optional[_Union[Shutdown, _Mapping]] = ..., ping: _Optional[_Union[Ping, _Mapping]] = ..., tool_registration: _Optional[_Union[ToolRegistration, _Mapping]] = ..., batch: _Optional[_Union[HostBatch, _Mapping]] = ...) -> None: ...

class HostBatch(_message.Message):
    __slots__ = ("msgs",)
    MSGS_FIELD_NUMBER: _ClassVar[int]
    msgs: _containers.RepeatedCompositeFieldContainer[HostMessage]
    def __init__(self, msgs: _Optional[_Iterable[_Union[HostMessage, _Mapping]]] = ...) -> None: ...

class Hello(_message.Message):
    __slots__ = ("protocol_version", "sdk", "sdk_version", "features", "pid")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    SDK_FIELD_NUMBER: _ClassVar[int]
    SDK_VERSION_FIELD_NUMBER: _ClassVar[int]
    FEATURES_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    protocol_version: str
    sdk: str
    sdk_version: str
    features: _containers.RepeatedScalarFieldContainer[str]
    pid: int
    def __init__(self, protocol_version: _Optional[str] = ..., sdk: _Optional[str] = ..., sdk_version: _Optional[str] = ..., features: _Optional[_Iterable[str]] = ..., pid: _Optional[int] = ...) -> None: ...

class PluginInfo(_message.Message):
    __slots__ = ("name", "version", "author", "description")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    AUTHOR_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    author: str
    description: str
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., author: _Optional[str] = ..., description: _Optional[str] = ...) -> None: ...

class Register(_message.Message):
    __slots__ = ("plugin", "tools", "stages", "inject", "triggers", "config_defs", "all_or_nothing")
    PLUGIN_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    STAGES_FIELD_NUMBER: _ClassVar[int]
    INJECT_FIELD_NUMBER: _ClassVar[int]
    TRIGGERS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_DEFS_FIELD_NUMBER: _ClassVar[int]
    ALL_OR_NOTHING_FIELD_NUMBER: _ClassVar[int]
    plugin: PluginInfo
    tools: _containers.RepeatedCompositeFieldContainer[ToolSpec]
    stages: _containers.RepeatedCompositeFieldContainer[StageHook]
    inject: InjectSpec
    triggers: _containers.RepeatedCompositeFieldContainer[Trigger]
    config_defs: _containers.RepeatedCompositeFieldContainer[ConfigDef]
    all_or_nothing: bool
    def __init__(self, plugin: _Optional[_Union[PluginInfo, _Mapping]] = ..., tools: _Optional[_Iterable[_Union[ToolSpec, _Mapping]]] = ..., stages: _Optional[_Iterable[_Union[StageHook, _Mapping]]] = ..., inject: _Optional[_Union[InjectSpec, _Mapping]] = ..., triggers: _Optional[_Iterable[_Union[Trigger, _Mapping]]] = ..., config_defs: _Optional[_Iterable[_Union[ConfigDef, _Mapping]]] = ..., all_or_nothing: _Optional[bool] = ...) -> None: ...

class ToolSpec(_message.Message):
    __slots__ = ("name", "description", "parameters_json", "ai_tool", "serial", "title", "output_schema_json", "annotations")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_JSON_FIELD_NUMBER: _ClassVar[int]
    AI_TOOL_FIELD_NUMBER: _ClassVar[int]
    SERIAL_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    parameters_json: str
    ai_tool: AiTool
    serial: bool
    title: str
    output_schema_json: str
    annotations: ToolAnnotations
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., parameters_json: _Optional[str] = ..., ai_tool: _Optional[_Union[AiTool, _Mapping]] = ..., serial: _Optional[bool] = ..., title: _Optional[str] = ..., output_schema_json: _Optional[str] = ..., annotations: _Optional[_Union[ToolAnnotations, _Mapping]] = ...) -> None: ...

class ToolAnnotations(_message.Message):
    __slots__ = ("read_only_hint", "destructive_hint", "idempotent_hint", "open_world_hint")
    READ_ONLY_HINT_FIELD_NUMBER: _ClassVar[int]
    DESTRUCTIVE_HINT_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENT_HINT_FIELD_NUMBER: _ClassVar[int]
    OPEN_WORLD_HINT_FIELD_NUMBER: _ClassVar[int]
    read_only_hint: bool
    destructive_hint: bool
    idempotent_hint: bool
    open_world_hint: bool
    def __init__(self, read_only_hint: _Optional[bool] = ..., destructive_hint: _Optional[bool] = ..., idempotent_hint: _Optional[bool] = ..., open_world_hint: _Optional[bool] = ...) -> None: ...

class AiTool(_message.Message):
    __slots__ = ("parameters", "usage", "when_to_use", "continue_conversation", "chainable", "max_calls", "confirm", "cooldown_s", "timeout_s")
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    WHEN_TO_USE_FIELD_NUMBER: _ClassVar[int]
    CONTINUE_CONVERSATION_FIELD_NUMBER: _ClassVar[int]
    CHAINABLE_FIELD_NUMBER: _ClassVar[int]
    MAX_CALLS_FIELD_NUMBER: _ClassVar[int]
    CONFIRM_FIELD_NUMBER: _ClassVar[int]
    COOLDOWN_S_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    parameters: _containers.RepeatedCompositeFieldContainer[AiToolParameter]
    usage: str
    when_to_use: str
    continue_conversation: bool
    chainable: bool
    max_calls: int
    confirm: bool
    cooldown_s: float
    timeout_s: float
    def __init__(self, parameters: _Optional[_Iterable[_Union[AiToolParameter, _Mapping]]] = ..., usage: _Optional[str] = ..., when_to_use: _Optional[str] = ..., continue_conversation: _Optional[bool] = ..., chainable: _Optional[bool] = ..., max_calls: _Optional[int] = ..., confirm: _Optional[bool] = ..., cooldown_s: _Optional[float] = ..., timeout_s: _Optional[float] = ...) -> None: ...

class AiToolParameter(_message.Message):
    __slots__ = ("name", "type", "description", "required", "default_json", "enum_json", "example")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_JSON_FIELD_NUMBER: _ClassVar[int]
    ENUM_JSON_FIELD_NUMBER: _ClassVar[int]
    EXAMPLE_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: str
    description: str
    required: bool
    default_json: str
    enum_json: str
    example: str
    def __init__(self, name: _Optional[str] = ..., type: _Optional[str] = ..., description: _Optional[str] = ..., required: _Optional[bool] = ..., default_json: _Optional[str] = ..., enum_json: _Optional[str] = ..., example: _Optional[str] = ...) -> None: ...

class StageHook(_message.Message):
    __slots__ = ("stage", "own_tools_only", "hook_id", "no_context_msgs")
    STAGE_FIELD_NUMBER: _ClassVar[int]
    OWN_TOOLS_ONLY_FIELD_NUMBER: _ClassVar[int]
    HOOK_ID_FIELD_NUMBER: _ClassVar[int]
    NO_CONTEXT_MSGS_FIELD_NUMBER: _ClassVar[int]
    stage: Stage
    own_tools_only: bool
    hook_id: str
    no_context_msgs: bool
    def __init__(self, stage: _Optional[_Union[Stage, str]] = ..., own_tools_only: _Optional[bool] = ..., hook_id: _Optional[str] = ..., no_context_msgs: _Optional[bool] = ...) -> None: ...

class InjectSpec(_message.Message):
    __slots__ = ("usage", "format", "args")
    class ArgsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    USAGE_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    usage: str
    format: str
    args: _containers.ScalarMap[str, str]
    def __init__(self, usage: _Optional[str] = ..., format: _Optional[str] = ..., args: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Trigger(_message.Message):
    __slots__ = ("type", "pattern")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    type: TriggerType
    pattern: str
    def __init__(self, type: _Optional[_Union[TriggerType, str]] = ..., pattern: _Optional[str] = ...) -> None: ...

class ConfigDef(_message.Message):
    __slots__ = ("key", "default_json", "type", "display_name", "description", "category", "options", "min", "max", "step", "required", "secret")
    KEY_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_JSON_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    CATEGORY_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    MIN_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    key: str
    default_json: str
    type: str
    display_name: str
    description: str
    category: str
    options: _containers.RepeatedScalarFieldContainer[str]
    min: float
    max: float
    step: float
    required: bool
    secret: bool
    def __init__(self, key: _Optional[str] = ..., default_json: _Optional[str] = ..., type: _Optional[str] = ..., display_name: _Optional[str] = ..., description: _Optional[str] = ..., category: _Optional[str] = ..., options: _Optional[_Iterable[str]] = ..., min: _Optional[float] = ..., max: _Optional[float] = ..., step: _Optional[float] = ..., required: _Optional[bool] = ..., secret: _Optional[bool] = ...) -> None: ...

class RejectedItem(_message.Message):
    __slots__ = ("kind", "name", "reason")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    kind: str
    name: str
    reason: str
    def __init__(self, kind: _Optional[str] = ..., name: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class Registered(_message.Message):
    __slots__ = ("plugin", "tools", "rejected", "protocol_version", "features")
    PLUGIN_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    FEATURES_FIELD_NUMBER: _ClassVar[int]
    plugin: str
    tools: _containers.RepeatedScalarFieldContainer[str]
    rejected: _containers.RepeatedCompositeFieldContainer[RejectedItem]
    protocol_version: str
    features: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, plugin: _Optional[str] = ..., tools: _Optional[_Iterable[str]] = ..., rejected: _Optional[_Iterable[_Union[RejectedItem, _Mapping]]] = ..., protocol_version: _Optional[str] = ..., features: _Optional[_Iterable[str]] = ...) -> None: ...

class Rejected(_message.Message):
    __slots__ = ("reason", "items")
    REASON_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    reason: str
    items: _containers.RepeatedCompositeFieldContainer[RejectedItem]
    def __init__(self, reason: _Optional[str] = ..., items: _Optional[_Iterable[_Union[RejectedItem, _Mapping]]] = ...) -> None: ...

class RegisterTool(_message.Message):
    __slots__ = ("request_id", "tool")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    tool: ToolSpec
    def __init__(self, request_id: _Optional[str] = ..., tool: _Optional[_Union[ToolSpec, _Mapping]] = ...) -> None: ...

class UnregisterTool(_message.Message):
    __slots__ = ("request_id", "name")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    name: str
    def __init__(self, request_id: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class ToolRegistration(_message.Message):
    __slots__ = ("request_id", "name", "ok", "error")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    name: str
    ok: bool
    error: str
    def __init__(self, request_id: _Optional[str] = ..., name: _Optional[str] = ..., ok: _Optional[bool] = ..., error: _Optional[str] = ...) -> None: ...

class Sender(_message.Message):
    __slots__ = ("user_id", "group_id", "channel", "session_id")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    group_id: str
    channel: str
    session_id: str
    def __init__(self, user_id: _Optional[str] = ..., group_id: _Optional[str] = ..., channel: _Optional[str] = ..., session_id: _Optional[str] = ...) -> None: ...

class InvokeTool(_message.Message):
    __slots__ = ("call_id", "tool", "args_json", "sender", "timeout_ms", "traceparent", "tracestate")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    ARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    SENDER_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    TRACESTATE_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    tool: str
    args_json: str
    sender: Sender
    timeout_ms: int
    traceparent: str
    tracestate: str
    def __init__(self, call_id: _Optional[int] = ..., tool: _Optional[str] = ..., args_json: _Optional[str] = ..., sender: _Optional[_Union[Sender, _Mapping]] = ..., timeout_ms: _Optional[int] = ..., traceparent: _Optional[str] = ..., tracestate: _Optional[str] = ...) -> None: ...

class ToolResult(_message.Message):
    __slots__ = ("call_id", "success", "content", "data_json", "error", "content_blocks_json")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    DATA_JSON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CONTENT_BLOCKS_JSON_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    success: bool
    content: str
    data_json: str
    error: str
    content_blocks_json: str
    def __init__(self, call_id: _Optional[int] = ..., success: _Optional[bool] = ..., content: _Optional[str] = ..., data_json: _Optional[str] = ..., error: _Optional[str] = ..., content_blocks_json: _Optional[str] = ...) -> None: ...

class Progress(_message.Message):
    __slots__ = ("call_id", "message", "fraction", "progress", "total")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FRACTION_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    message: str
    fraction: float
    progress: float
    total: float
    def __init__(self, call_id: _Optional[int] = ..., message: _Optional[str] = ..., fraction: _Optional[float] = ..., progress: _Optional[float] = ..., total: _Optional[float] = ...) -> None: ...

class Cancel(_message.Message):
    __slots__ = ("call_id", "reason")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    reason: str
    def __init__(self, call_id: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class Shutdown(_message.Message):
    __slots__ = ("grace_ms", "reason")
    GRACE_MS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    grace_ms: int
    reason: str
    def __init__(self, grace_ms: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class Ping(_message.Message):
    __slots__ = ("nonce",)
    NONCE_FIELD_NUMBER: _ClassVar[int]
    nonce: int
    def __init__(self, nonce: _Optional[int] = ...) -> None: ...

class Pong(_message.Message):
    __slots__ = ("nonce",)
    NONCE_FIELD_NUMBER: _ClassVar[int]
    nonce: int
    def __init__(self, nonce: _Optional[int] = ...) -> None: ...

class MemItem(_message.Message):
    __slots__ = ("role", "content", "score")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    role: str
    content: str
    score: float
    def __init__(self, role: _Optional[str] = ..., content: _Optional[str] = ..., score: _Optional[float] = ...) -> None: ...

class ToolCallInfo(_message.Message):
    __slots__ = ("id", "name", "plugin", "arguments_json", "deny", "deny_reason")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PLUGIN_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    DENY_FIELD_NUMBER: _ClassVar[int]
    DENY_REASON_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    plugin: str
    arguments_json: str
    deny: bool
    deny_reason: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., plugin: _Optional[str] = ..., arguments_json: _Optional[str] = ..., deny: _Optional[bool] = ..., deny_reason: _Optional[str] = ...) -> None: ...

class ToolResultInfo(_message.Message):
    __slots__ = ("call_id", "name", "plugin", "success", "result_json")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PLUGIN_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    name: str
    plugin: str
    success: bool
    result_json: str
    def __init__(self, call_id: _Optional[str] = ..., name: _Optional[str] = ..., plugin: _Optional[str] = ..., success: _Optional[bool] = ..., result_json: _Optional[str] = ...) -> None: ...

class StageContext(_message.Message):
    __slots__ = ("raw_message", "user_id", "group_id", "context_msgs_json", "llm_text", "reasoning_content", "token_usage", "tool_calls", "tool_results", "final_text", "response", "phase", "memory", "no_memory", "extra_json")
    class TokenUsageEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    RAW_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_MSGS_JSON_FIELD_NUMBER: _ClassVar[int]
    LLM_TEXT_FIELD_NUMBER: _ClassVar[int]
    REASONING_CONTENT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_USAGE_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESULTS_FIELD_NUMBER: _ClassVar[int]
    FINAL_TEXT_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    NO_MEMORY_FIELD_NUMBER: _ClassVar[int]
    EXTRA_JSON_FIELD_NUMBER: _ClassVar[int]
    raw_message: str
    user_id: str
    group_id: str
    context_msgs_json: str
    llm_text: str
    reasoning_content: str
    token_usage: _containers.ScalarMap[str, int]
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCallInfo]
    tool_results: _containers.RepeatedCompositeFieldContainer[ToolResultInfo]
    final_text: str
    response: str
    phase: Stage
    memory: _containers.RepeatedCompositeFieldContainer[MemItem]
    no_memory: bool
    extra_json: str
    def __init__(self, raw_message: _Optional[str] = ..., user_id: _Optional[str] = ..., group_id: _Optional[str] = ..., context_msgs_json: _Optional[str] = ..., llm_text: _Optional[str] = ..., reasoning_content: _Optional[str] = ..., token_usage: _Optional[_Mapping[str, int]] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCallInfo, _Mapping]]] = ..., tool_results: _Optional[_Iterable[_Union[ToolResultInfo, _Mapping]]] = ..., final_text: _Optional[str] = ..., response: _Optional[str] = ..., phase: _Optional[_Union[Stage, str]] = ..., memory: _Optional[_Iterable[_Union[MemItem, _Mapping]]] = ..., no_memory: _Optional[bool] = ..., extra_json: _Optional[str] = ...) -> None: ...

class RunStage(_message.Message):
    __slots__ = ("call_id", "stage", "hook_id", "context", "timeout_ms", "traceparent", "tracestate")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    HOOK_ID_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    TRACESTATE_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    stage: Stage
    hook_id: str
    context: StageContext
    timeout_ms: int
    traceparent: str
    tracestate: str
    def __init__(self, call_id: _Optional[int] = ..., stage: _Optional[_Union[Stage, str]] = ..., hook_id: _Optional[str] = ..., context: _Optional[_Union[StageContext, _Mapping]] = ..., timeout_ms: _Optional[int] = ..., traceparent: _Optional[str] = ..., tracestate: _Optional[str] = ...) -> None: ...

class StageResult(_message.Message):
    __slots__ = ("call_id", "context", "error")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    context: StageContext
    error: str
    def __init__(self, call_id: _Optional[int] = ..., context: _Optional[_Union[StageContext, _Mapping]] = ..., error: _Optional[str] = ...) -> None: ...

class HandleEvent(_message.Message):
    __slots__ = ("call_id", "message", "params", "sender", "trigger", "timeout_ms", "traceparent", "tracestate")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    SENDER_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    TRACESTATE_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    message: str
    params: _containers.RepeatedScalarFieldContainer[str]
    sender: Sender
    trigger: Trigger
    timeout_ms: int
    traceparent: str
    tracestate: str
    def __init__(self, call_id: _Optional[int] = ..., message: _Optional[str] = ..., params: _Optional[_Iterable[str]] = ..., sender: _Optional[_Union[Sender, _Mapping]] = ..., trigger: _Optional[_Union[Trigger, _Mapping]] = ..., timeout_ms: _Optional[int] = ..., traceparent: _Optional[str] = ..., tracestate: _Optional[str] = ...) -> None: ...

class Reply(_message.Message):
    __slots__ = ("call_id", "text")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    text: str
    def __init__(self, call_id: _Optional[int] = ..., text: _Optional[str] = ...) -> None: ...

class EventDone(_message.Message):
    __slots__ = ("call_id", "error")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    error: str
    def __init__(self, call_id: _Optional[int] = ..., error: _Optional[str] = ...) -> None: ...
