from hearth_plugin.v1 import plugin_pb2 as _plugin_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PluginState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PLUGIN_STATE_UNSPECIFIED: _ClassVar[PluginState]
    PLUGIN_STATE_STARTING: _ClassVar[PluginState]
    PLUGIN_STATE_READY: _ClassVar[PluginState]
    PLUGIN_STATE_CRASHED: _ClassVar[PluginState]
    PLUGIN_STATE_BACKOFF: _ClassVar[PluginState]
    PLUGIN_STATE_FAILED: _ClassVar[PluginState]
    PLUGIN_STATE_STOPPING: _ClassVar[PluginState]
    PLUGIN_STATE_STOPPED: _ClassVar[PluginState]
    PLUGIN_STATE_BUILDING: _ClassVar[PluginState]
PLUGIN_STATE_UNSPECIFIED: PluginState
PLUGIN_STATE_STARTING: PluginState
PLUGIN_STATE_READY: PluginState
PLUGIN_STATE_CRASHED: PluginState
PLUGIN_STATE_BACKOFF: PluginState
PLUGIN_STATE_FAILED: PluginState
PLUGIN_STATE_STOPPING: PluginState
PLUGIN_STATE_STOPPED: PluginState
PLUGIN_STATE_BUILDING: PluginState

class ListPluginsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PluginStatus(_message.Message):
    __slots__ = ("name", "runtime", "pid", "state", "restarts", "tools", "dir", "uptime_ms", "last_exit", "reason", "version", "sdk", "startup_ms", "sandbox", "attached", "remote", "rejected")
    NAME_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    DIR_FIELD_NUMBER: _ClassVar[int]
    UPTIME_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_EXIT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SDK_FIELD_NUMBER: _ClassVar[int]
    STARTUP_MS_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    ATTACHED_FIELD_NUMBER: _ClassVar[int]
    REMOTE_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    name: str
    runtime: str
    pid: int
    state: PluginState
    restarts: int
    tools: _containers.RepeatedScalarFieldContainer[str]
    dir: str
    uptime_ms: int
    last_exit: str
    reason: str
    version: str
    sdk: str
    startup_ms: int
    sandbox: str
    attached: bool
    remote: _containers.RepeatedCompositeFieldContainer[RemoteInstance]
    rejected: _containers.RepeatedCompositeFieldContainer[_plugin_pb2.RejectedItem]
    def __init__(self, name: _Optional[str] = ..., runtime: _Optional[str] = ..., pid: _Optional[int] = ..., state: _Optional[_Union[PluginState, str]] = ..., restarts: _Optional[int] = ..., tools: _Optional[_Iterable[str]] = ..., dir: _Optional[str] = ..., uptime_ms: _Optional[int] = ..., last_exit: _Optional[str] = ..., reason: _Optional[str] = ..., version: _Optional[str] = ..., sdk: _Optional[str] = ..., startup_ms: _Optional[int] = ..., sandbox: _Optional[str] = ..., attached: _Optional[bool] = ..., remote: _Optional[_Iterable[_Union[RemoteInstance, _Mapping]]] = ..., rejected: _Optional[_Iterable[_Union[_plugin_pb2.RejectedItem, _Mapping]]] = ...) -> None: ...

class RemoteInstance(_message.Message):
    __slots__ = ("node", "version", "pid", "restarts", "sdk", "last_seen_ms")
    NODE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    SDK_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_MS_FIELD_NUMBER: _ClassVar[int]
    node: str
    version: str
    pid: int
    restarts: int
    sdk: str
    last_seen_ms: int
    def __init__(self, node: _Optional[str] = ..., version: _Optional[str] = ..., pid: _Optional[int] = ..., restarts: _Optional[int] = ..., sdk: _Optional[str] = ..., last_seen_ms: _Optional[int] = ...) -> None: ...

class ListPluginsResponse(_message.Message):
    __slots__ = ("plugins",)
    PLUGINS_FIELD_NUMBER: _ClassVar[int]
    plugins: _containers.RepeatedCompositeFieldContainer[PluginStatus]
    def __init__(self, plugins: _Optional[_Iterable[_Union[PluginStatus, _Mapping]]] = ...) -> None: ...

class RestartPluginRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class RestartPluginResponse(_message.Message):
    __slots__ = ("plugin",)
    PLUGIN_FIELD_NUMBER: _ClassVar[int]
    plugin: PluginStatus
    def __init__(self, plugin: _Optional[_Union[PluginStatus, _Mapping]] = ...) -> None: ...

class LoadPluginRequest(_message.Message):
    __slots__ = ("path",)
    PATH_FIELD_NUMBER: _ClassVar[int]
    path: str
    def __init__(self, path: _Optional[str] = ...) -> None: ...

class LoadPluginResponse(_message.Message):
    __slots__ = ("plugin",)
    PLUGIN_FIELD_NUMBER: _ClassVar[int]
    plugin: PluginStatus
    def __init__(self, plugin: _Optional[_Union[PluginStatus, _Mapping]] = ...) -> None: ...

class UnloadPluginRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class UnloadPluginResponse(_message.Message):
    __slots__ = ("plugin",)
    PLUGIN_FIELD_NUMBER: _ClassVar[int]
    plugin: PluginStatus
    def __init__(self, plugin: _Optional[_Union[PluginStatus, _Mapping]] = ...) -> None: ...

class ReloadPluginRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ReloadPluginResponse(_message.Message):
    __slots__ = ("plugin",)
    PLUGIN_FIELD_NUMBER: _ClassVar[int]
    plugin: PluginStatus
    def __init__(self, plugin: _Optional[_Union[PluginStatus, _Mapping]] = ...) -> None: ...

class AttachTokenRequest(_message.Message):
    __slots__ = ("name", "ttl_s")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    name: str
    ttl_s: int
    def __init__(self, name: _Optional[str] = ..., ttl_s: _Optional[int] = ...) -> None: ...

class AttachTokenResponse(_message.Message):
    __slots__ = ("name", "addr", "token", "expires_in_ms", "loaded")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ADDR_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_IN_MS_FIELD_NUMBER: _ClassVar[int]
    LOADED_FIELD_NUMBER: _ClassVar[int]
    name: str
    addr: str
    token: str
    expires_in_ms: int
    loaded: bool
    def __init__(self, name: _Optional[str] = ..., addr: _Optional[str] = ..., token: _Optional[str] = ..., expires_in_ms: _Optional[int] = ..., loaded: _Optional[bool] = ...) -> None: ...

class PluginLogsRequest(_message.Message):
    __slots__ = ("name", "tail", "follow")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TAIL_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    name: str
    tail: int
    follow: bool
    def __init__(self, name: _Optional[str] = ..., tail: _Optional[int] = ..., follow: _Optional[bool] = ...) -> None: ...

class LogLine(_message.Message):
    __slots__ = ("plugin", "stream", "text", "unix_ms", "pid", "generation")
    PLUGIN_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    plugin: str
    stream: str
    text: str
    unix_ms: int
    pid: int
    generation: int
    def __init__(self, plugin: _Optional[str] = ..., stream: _Optional[str] = ..., text: _Optional[str] = ..., unix_ms: _Optional[int] = ..., pid: _Optional[int] = ..., generation: _Optional[int] = ...) -> None: ...

class ListToolsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ToolInfo(_message.Message):
    __slots__ = ("name", "plugin", "description", "parameters_json", "title", "output_schema_json", "annotations", "ai_tool", "hosts")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PLUGIN_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_JSON_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    AI_TOOL_FIELD_NUMBER: _ClassVar[int]
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    plugin: str
    description: str
    parameters_json: str
    title: str
    output_schema_json: str
    annotations: _plugin_pb2.ToolAnnotations
    ai_tool: _plugin_pb2.AiTool
    hosts: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., plugin: _Optional[str] = ..., description: _Optional[str] = ..., parameters_json: _Optional[str] = ..., title: _Optional[str] = ..., output_schema_json: _Optional[str] = ..., annotations: _Optional[_Union[_plugin_pb2.ToolAnnotations, _Mapping]] = ..., ai_tool: _Optional[_Union[_plugin_pb2.AiTool, _Mapping]] = ..., hosts: _Optional[_Iterable[str]] = ...) -> None: ...

class ListToolsResponse(_message.Message):
    __slots__ = ("tools",)
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedCompositeFieldContainer[ToolInfo]
    def __init__(self, tools: _Optional[_Iterable[_Union[ToolInfo, _Mapping]]] = ...) -> None: ...

class CallToolRequest(_message.Message):
    __slots__ = ("name", "args_json", "timeout_ms", "user_id", "group_id", "policies", "confirmed", "conversation", "channel")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    CONFIRMED_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    name: str
    args_json: str
    timeout_ms: int
    user_id: str
    group_id: str
    policies: bool
    confirmed: bool
    conversation: str
    channel: str
    def __init__(self, name: _Optional[str] = ..., args_json: _Optional[str] = ..., timeout_ms: _Optional[int] = ..., user_id: _Optional[str] = ..., group_id: _Optional[str] = ..., policies: _Optional[bool] = ..., confirmed: _Optional[bool] = ..., conversation: _Optional[str] = ..., channel: _Optional[str] = ...) -> None: ...

class CallToolResponse(_message.Message):
    __slots__ = ("tool", "plugin", "success", "content", "data_json", "error", "elapsed_us", "needs_confirmation", "content_blocks_json")
    TOOL_FIELD_NUMBER: _ClassVar[int]
    PLUGIN_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    DATA_JSON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_US_FIELD_NUMBER: _ClassVar[int]
    NEEDS_CONFIRMATION_FIELD_NUMBER: _ClassVar[int]
    CONTENT_BLOCKS_JSON_FIELD_NUMBER: _ClassVar[int]
    tool: str
    plugin: str
    success: bool
    content: str
    data_json: str
    error: str
    elapsed_us: int
    needs_confirmation: bool
    content_blocks_json: str
    def __init__(self, tool: _Optional[str] = ..., plugin: _Optional[str] = ..., success: _Optional[bool] = ..., content: _Optional[str] = ..., data_json: _Optional[str] = ..., error: _Optional[str] = ..., elapsed_us: _Optional[int] = ..., needs_confirmation: _Optional[bool] = ..., content_blocks_json: _Optional[str] = ...) -> None: ...

class CallToolEvent(_message.Message):
    __slots__ = ("progress", "result")
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    progress: ToolProgress
    result: CallToolResponse
    def __init__(self, progress: _Optional[_Union[ToolProgress, _Mapping]] = ..., result: _Optional[_Union[CallToolResponse, _Mapping]] = ...) -> None: ...

class ToolProgress(_message.Message):
    __slots__ = ("message", "progress", "total")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    message: str
    progress: float
    total: float
    def __init__(self, message: _Optional[str] = ..., progress: _Optional[float] = ..., total: _Optional[float] = ...) -> None: ...

class WatchToolsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ToolsChanged(_message.Message):
    __slots__ = ("revision",)
    REVISION_FIELD_NUMBER: _ClassVar[int]
    revision: int
    def __init__(self, revision: _Optional[int] = ...) -> None: ...

class ListMcpServersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class McpServerInfo(_message.Message):
    __slots__ = ("plugin", "transport", "target", "protocol_version", "server_name", "server_version", "state", "tools", "resources", "prompts")
    PLUGIN_FIELD_NUMBER: _ClassVar[int]
    TRANSPORT_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    SERVER_NAME_FIELD_NUMBER: _ClassVar[int]
    SERVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    PROMPTS_FIELD_NUMBER: _ClassVar[int]
    plugin: str
    transport: str
    target: str
    protocol_version: str
    server_name: str
    server_version: str
    state: PluginState
    tools: _containers.RepeatedScalarFieldContainer[str]
    resources: bool
    prompts: bool
    def __init__(self, plugin: _Optional[str] = ..., transport: _Optional[str] = ..., target: _Optional[str] = ..., protocol_version: _Optional[str] = ..., server_name: _Optional[str] = ..., server_version: _Optional[str] = ..., state: _Optional[_Union[PluginState, str]] = ..., tools: _Optional[_Iterable[str]] = ..., resources: _Optional[bool] = ..., prompts: _Optional[bool] = ...) -> None: ...

class ListMcpServersResponse(_message.Message):
    __slots__ = ("servers",)
    SERVERS_FIELD_NUMBER: _ClassVar[int]
    servers: _containers.RepeatedCompositeFieldContainer[McpServerInfo]
    def __init__(self, servers: _Optional[_Iterable[_Union[McpServerInfo, _Mapping]]] = ...) -> None: ...

class McpRequestMessage(_message.Message):
    __slots__ = ("plugin", "method", "params_json")
    PLUGIN_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    PARAMS_JSON_FIELD_NUMBER: _ClassVar[int]
    plugin: str
    method: str
    params_json: str
    def __init__(self, plugin: _Optional[str] = ..., method: _Optional[str] = ..., params_json: _Optional[str] = ...) -> None: ...

class McpResponseMessage(_message.Message):
    __slots__ = ("result_json",)
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    result_json: str
    def __init__(self, result_json: _Optional[str] = ...) -> None: ...

class ListSourcesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SourceInfo(_message.Message):
    __slots__ = ("name", "base_url", "model", "adapter", "priority", "current", "state", "cooldown_ms", "failures", "last_error", "max_concurrent", "in_flight", "waiting")
    NAME_FIELD_NUMBER: _ClassVar[int]
    BASE_URL_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ADAPTER_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    COOLDOWN_MS_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENT_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    name: str
    base_url: str
    model: str
    adapter: str
    priority: int
    current: bool
    state: str
    cooldown_ms: int
    failures: int
    last_error: str
    max_concurrent: int
    in_flight: int
    waiting: int
    def __init__(self, name: _Optional[str] = ..., base_url: _Optional[str] = ..., model: _Optional[str] = ..., adapter: _Optional[str] = ..., priority: _Optional[int] = ..., current: _Optional[bool] = ..., state: _Optional[str] = ..., cooldown_ms: _Optional[int] = ..., failures: _Optional[int] = ..., last_error: _Optional[str] = ..., max_concurrent: _Optional[int] = ..., in_flight: _Optional[int] = ..., waiting: _Optional[int] = ...) -> None: ...

class ListSourcesResponse(_message.Message):
    __slots__ = ("sources", "current")
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    sources: _containers.RepeatedCompositeFieldContainer[SourceInfo]
    current: str
    def __init__(self, sources: _Optional[_Iterable[_Union[SourceInfo, _Mapping]]] = ..., current: _Optional[str] = ...) -> None: ...

class UseSourceRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...
