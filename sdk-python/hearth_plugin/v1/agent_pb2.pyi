from hearth_plugin.v1 import plugin_pb2 as _plugin_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ChatRequest(_message.Message):
    __slots__ = ("message", "user_id", "group_id", "channel", "no_memory", "priority")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    NO_MEMORY_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    message: str
    user_id: str
    group_id: str
    channel: str
    no_memory: bool
    priority: _plugin_pb2.Priority
    def __init__(self, message: _Optional[str] = ..., user_id: _Optional[str] = ..., group_id: _Optional[str] = ..., channel: _Optional[str] = ..., no_memory: _Optional[bool] = ..., priority: _Optional[_Union[_plugin_pb2.Priority, str]] = ...) -> None: ...

class ChatEvent(_message.Message):
    __slots__ = ("text_delta", "tool_call_started", "tool_call_finished", "confirm_request", "final", "plugin_reply", "short_circuit", "interrupted", "queued", "tool_call_progress")
    TEXT_DELTA_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_STARTED_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_FINISHED_FIELD_NUMBER: _ClassVar[int]
    CONFIRM_REQUEST_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    PLUGIN_REPLY_FIELD_NUMBER: _ClassVar[int]
    SHORT_CIRCUIT_FIELD_NUMBER: _ClassVar[int]
    INTERRUPTED_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_PROGRESS_FIELD_NUMBER: _ClassVar[int]
    text_delta: TextDelta
    tool_call_started: ToolCallStarted
    tool_call_finished: ToolCallFinished
    confirm_request: ConfirmRequest
    final: Final
    plugin_reply: PluginReply
    short_circuit: ShortCircuit
    interrupted: Interrupted
    queued: Queued
    tool_call_progress: ToolCallProgress
    def __init__(self, text_delta: _Optional[_Union[TextDelta, _Mapping]] = ..., tool_call_started: _Optional[_Union[ToolCallStarted, _Mapping]] = ..., tool_call_finished: _Optional[_Union[ToolCallFinished, _Mapping]] = ..., confirm_request: _Optional[_Union[ConfirmRequest, _Mapping]] = ..., final: _Optional[_Union[Final, _Mapping]] = ..., plugin_reply: _Optional[_Union[PluginReply, _Mapping]] = ..., short_circuit: _Optional[_Union[ShortCircuit, _Mapping]] = ..., interrupted: _Optional[_Union[Interrupted, _Mapping]] = ..., queued: _Optional[_Union[Queued, _Mapping]] = ..., tool_call_progress: _Optional[_Union[ToolCallProgress, _Mapping]] = ...) -> None: ...

class Queued(_message.Message):
    __slots__ = ("ahead", "conversation", "held_by")
    AHEAD_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_FIELD_NUMBER: _ClassVar[int]
    HELD_BY_FIELD_NUMBER: _ClassVar[int]
    ahead: int
    conversation: str
    held_by: str
    def __init__(self, ahead: _Optional[int] = ..., conversation: _Optional[str] = ..., held_by: _Optional[str] = ...) -> None: ...

class ShortCircuit(_message.Message):
    __slots__ = ("stage", "plugin", "text")
    STAGE_FIELD_NUMBER: _ClassVar[int]
    PLUGIN_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    stage: str
    plugin: str
    text: str
    def __init__(self, stage: _Optional[str] = ..., plugin: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class Interrupted(_message.Message):
    __slots__ = ("source", "text")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    source: str
    text: str
    def __init__(self, source: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class AgentInjectRequest(_message.Message):
    __slots__ = ("source", "channel", "text", "interrupt", "no_memory", "user_id", "group_id", "priority")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    INTERRUPT_FIELD_NUMBER: _ClassVar[int]
    NO_MEMORY_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    source: str
    channel: str
    text: str
    interrupt: bool
    no_memory: bool
    user_id: str
    group_id: str
    priority: _plugin_pb2.Priority
    def __init__(self, source: _Optional[str] = ..., channel: _Optional[str] = ..., text: _Optional[str] = ..., interrupt: _Optional[bool] = ..., no_memory: _Optional[bool] = ..., user_id: _Optional[str] = ..., group_id: _Optional[str] = ..., priority: _Optional[_Union[_plugin_pb2.Priority, str]] = ...) -> None: ...

class InjectAck(_message.Message):
    __slots__ = ("ahead", "conversation", "interrupted")
    AHEAD_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_FIELD_NUMBER: _ClassVar[int]
    INTERRUPTED_FIELD_NUMBER: _ClassVar[int]
    ahead: int
    conversation: str
    interrupted: bool
    def __init__(self, ahead: _Optional[int] = ..., conversation: _Optional[str] = ..., interrupted: _Optional[bool] = ...) -> None: ...

class TextDelta(_message.Message):
    __slots__ = ("text", "reasoning")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    REASONING_FIELD_NUMBER: _ClassVar[int]
    text: str
    reasoning: bool
    def __init__(self, text: _Optional[str] = ..., reasoning: _Optional[bool] = ...) -> None: ...

class ToolCallStarted(_message.Message):
    __slots__ = ("call_id", "tool", "plugin", "args_json")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    PLUGIN_FIELD_NUMBER: _ClassVar[int]
    ARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    tool: str
    plugin: str
    args_json: str
    def __init__(self, call_id: _Optional[str] = ..., tool: _Optional[str] = ..., plugin: _Optional[str] = ..., args_json: _Optional[str] = ...) -> None: ...

class ToolCallProgress(_message.Message):
    __slots__ = ("call_id", "tool", "plugin", "message", "progress", "total")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    PLUGIN_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    tool: str
    plugin: str
    message: str
    progress: float
    total: float
    def __init__(self, call_id: _Optional[str] = ..., tool: _Optional[str] = ..., plugin: _Optional[str] = ..., message: _Optional[str] = ..., progress: _Optional[float] = ..., total: _Optional[float] = ...) -> None: ...

class ToolCallFinished(_message.Message):
    __slots__ = ("call_id", "tool", "success", "content", "error", "elapsed_us", "plugin", "denied_by")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_US_FIELD_NUMBER: _ClassVar[int]
    PLUGIN_FIELD_NUMBER: _ClassVar[int]
    DENIED_BY_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    tool: str
    success: bool
    content: str
    error: str
    elapsed_us: int
    plugin: str
    denied_by: str
    def __init__(self, call_id: _Optional[str] = ..., tool: _Optional[str] = ..., success: _Optional[bool] = ..., content: _Optional[str] = ..., error: _Optional[str] = ..., elapsed_us: _Optional[int] = ..., plugin: _Optional[str] = ..., denied_by: _Optional[str] = ...) -> None: ...

class ConfirmRequest(_message.Message):
    __slots__ = ("confirm_id", "tool", "args_json", "timeout_ms")
    CONFIRM_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    ARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    confirm_id: str
    tool: str
    args_json: str
    timeout_ms: int
    def __init__(self, confirm_id: _Optional[str] = ..., tool: _Optional[str] = ..., args_json: _Optional[str] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class ConfirmResponse(_message.Message):
    __slots__ = ("confirm_id", "approved")
    CONFIRM_ID_FIELD_NUMBER: _ClassVar[int]
    APPROVED_FIELD_NUMBER: _ClassVar[int]
    confirm_id: str
    approved: bool
    def __init__(self, confirm_id: _Optional[str] = ..., approved: _Optional[bool] = ...) -> None: ...

class ConfirmAck(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Final(_message.Message):
    __slots__ = ("text", "token_usage", "iterations", "error")
    class TokenUsageEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_USAGE_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    text: str
    token_usage: _containers.ScalarMap[str, int]
    iterations: int
    error: str
    def __init__(self, text: _Optional[str] = ..., token_usage: _Optional[_Mapping[str, int]] = ..., iterations: _Optional[int] = ..., error: _Optional[str] = ...) -> None: ...

class PluginReply(_message.Message):
    __slots__ = ("plugin", "text", "inline")
    PLUGIN_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    INLINE_FIELD_NUMBER: _ClassVar[int]
    plugin: str
    text: str
    inline: bool
    def __init__(self, plugin: _Optional[str] = ..., text: _Optional[str] = ..., inline: _Optional[bool] = ...) -> None: ...
