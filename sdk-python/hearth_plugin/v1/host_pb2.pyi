from hearth_plugin.v1 import plugin_pb2 as _plugin_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Empty(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class KeyRequest(_message.Message):
    __slots__ = ("key", "plugin")
    KEY_FIELD_NUMBER: _ClassVar[int]
    PLUGIN_FIELD_NUMBER: _ClassVar[int]
    key: str
    plugin: str
    def __init__(self, key: _Optional[str] = ..., plugin: _Optional[str] = ...) -> None: ...

class SetRequest(_message.Message):
    __slots__ = ("key", "value_json", "plugin")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_JSON_FIELD_NUMBER: _ClassVar[int]
    PLUGIN_FIELD_NUMBER: _ClassVar[int]
    key: str
    value_json: str
    plugin: str
    def __init__(self, key: _Optional[str] = ..., value_json: _Optional[str] = ..., plugin: _Optional[str] = ...) -> None: ...

class PrefixRequest(_message.Message):
    __slots__ = ("prefix", "plugin")
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    PLUGIN_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    plugin: str
    def __init__(self, prefix: _Optional[str] = ..., plugin: _Optional[str] = ...) -> None: ...

class ValueResponse(_message.Message):
    __slots__ = ("value_json",)
    VALUE_JSON_FIELD_NUMBER: _ClassVar[int]
    value_json: str
    def __init__(self, value_json: _Optional[str] = ...) -> None: ...

class KeysResponse(_message.Message):
    __slots__ = ("keys",)
    KEYS_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, keys: _Optional[_Iterable[str]] = ...) -> None: ...

class DefsResponse(_message.Message):
    __slots__ = ("defs",)
    DEFS_FIELD_NUMBER: _ClassVar[int]
    defs: _containers.RepeatedCompositeFieldContainer[_plugin_pb2.ConfigDef]
    def __init__(self, defs: _Optional[_Iterable[_Union[_plugin_pb2.ConfigDef, _Mapping]]] = ...) -> None: ...

class DumpResponse(_message.Message):
    __slots__ = ("dump_json",)
    DUMP_JSON_FIELD_NUMBER: _ClassVar[int]
    dump_json: str
    def __init__(self, dump_json: _Optional[str] = ...) -> None: ...

class Entity(_message.Message):
    __slots__ = ("name", "type", "mention_count")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    MENTION_COUNT_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: str
    mention_count: int
    def __init__(self, name: _Optional[str] = ..., type: _Optional[str] = ..., mention_count: _Optional[int] = ...) -> None: ...

class Relation(_message.Message):
    __slots__ = ("source_name", "target_name", "relation_type")
    SOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    TARGET_NAME_FIELD_NUMBER: _ClassVar[int]
    RELATION_TYPE_FIELD_NUMBER: _ClassVar[int]
    source_name: str
    target_name: str
    relation_type: str
    def __init__(self, source_name: _Optional[str] = ..., target_name: _Optional[str] = ..., relation_type: _Optional[str] = ...) -> None: ...

class Triple(_message.Message):
    __slots__ = ("subject", "relation", "object", "subject_type", "object_type", "session_id")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    RELATION_FIELD_NUMBER: _ClassVar[int]
    OBJECT_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_TYPE_FIELD_NUMBER: _ClassVar[int]
    OBJECT_TYPE_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    subject: str
    relation: str
    object: str
    subject_type: str
    object_type: str
    session_id: str
    def __init__(self, subject: _Optional[str] = ..., relation: _Optional[str] = ..., object: _Optional[str] = ..., subject_type: _Optional[str] = ..., object_type: _Optional[str] = ..., session_id: _Optional[str] = ...) -> None: ...

class RecallRequest(_message.Message):
    __slots__ = ("keywords", "depth")
    KEYWORDS_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    keywords: _containers.RepeatedScalarFieldContainer[str]
    depth: int
    def __init__(self, keywords: _Optional[_Iterable[str]] = ..., depth: _Optional[int] = ...) -> None: ...

class RecallResponse(_message.Message):
    __slots__ = ("entities", "relations")
    ENTITIES_FIELD_NUMBER: _ClassVar[int]
    RELATIONS_FIELD_NUMBER: _ClassVar[int]
    entities: _containers.RepeatedCompositeFieldContainer[Entity]
    relations: _containers.RepeatedCompositeFieldContainer[Relation]
    def __init__(self, entities: _Optional[_Iterable[_Union[Entity, _Mapping]]] = ..., relations: _Optional[_Iterable[_Union[Relation, _Mapping]]] = ...) -> None: ...

class CommitRequest(_message.Message):
    __slots__ = ("triples",)
    TRIPLES_FIELD_NUMBER: _ClassVar[int]
    triples: _containers.RepeatedCompositeFieldContainer[Triple]
    def __init__(self, triples: _Optional[_Iterable[_Union[Triple, _Mapping]]] = ...) -> None: ...

class CommitResponse(_message.Message):
    __slots__ = ("committed",)
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    committed: int
    def __init__(self, committed: _Optional[int] = ...) -> None: ...

class IntrospectResponse(_message.Message):
    __slots__ = ("stats_json",)
    STATS_JSON_FIELD_NUMBER: _ClassVar[int]
    stats_json: str
    def __init__(self, stats_json: _Optional[str] = ...) -> None: ...

class MergeRequest(_message.Message):
    __slots__ = ("source", "target")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    source: str
    target: str
    def __init__(self, source: _Optional[str] = ..., target: _Optional[str] = ...) -> None: ...

class PurgeRequest(_message.Message):
    __slots__ = ("criteria", "mode")
    class CriteriaEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CRITERIA_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    criteria: _containers.ScalarMap[str, str]
    mode: str
    def __init__(self, criteria: _Optional[_Mapping[str, str]] = ..., mode: _Optional[str] = ...) -> None: ...

class CountResponse(_message.Message):
    __slots__ = ("count",)
    COUNT_FIELD_NUMBER: _ClassVar[int]
    count: int
    def __init__(self, count: _Optional[int] = ...) -> None: ...

class TextEvent(_message.Message):
    __slots__ = ("role", "content", "timestamp", "channel")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    role: str
    content: str
    timestamp: int
    channel: str
    def __init__(self, role: _Optional[str] = ..., content: _Optional[str] = ..., timestamp: _Optional[int] = ..., channel: _Optional[str] = ...) -> None: ...

class Doc(_message.Message):
    __slots__ = ("id", "title", "content", "score")
    ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    id: str
    title: str
    content: str
    score: float
    def __init__(self, id: _Optional[str] = ..., title: _Optional[str] = ..., content: _Optional[str] = ..., score: _Optional[float] = ...) -> None: ...

class DocQuery(_message.Message):
    __slots__ = ("text", "top_k")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    text: str
    top_k: int
    def __init__(self, text: _Optional[str] = ..., top_k: _Optional[int] = ...) -> None: ...

class DocsResponse(_message.Message):
    __slots__ = ("docs",)
    DOCS_FIELD_NUMBER: _ClassVar[int]
    docs: _containers.RepeatedCompositeFieldContainer[Doc]
    def __init__(self, docs: _Optional[_Iterable[_Union[Doc, _Mapping]]] = ...) -> None: ...

class IdRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class StatsResponse(_message.Message):
    __slots__ = ("stats_json",)
    STATS_JSON_FIELD_NUMBER: _ClassVar[int]
    stats_json: str
    def __init__(self, stats_json: _Optional[str] = ...) -> None: ...

class KnowledgeEntry(_message.Message):
    __slots__ = ("name", "content", "score")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    name: str
    content: str
    score: float
    def __init__(self, name: _Optional[str] = ..., content: _Optional[str] = ..., score: _Optional[float] = ...) -> None: ...

class KnowledgeQuery(_message.Message):
    __slots__ = ("query", "top_k")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    query: str
    top_k: int
    def __init__(self, query: _Optional[str] = ..., top_k: _Optional[int] = ...) -> None: ...

class KnowledgeResponse(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[KnowledgeEntry]
    def __init__(self, entries: _Optional[_Iterable[_Union[KnowledgeEntry, _Mapping]]] = ...) -> None: ...

class SourceRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class InjectRequest(_message.Message):
    __slots__ = ("source", "channel", "text", "user_id", "group_id", "priority")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    source: str
    channel: str
    text: str
    user_id: str
    group_id: str
    priority: _plugin_pb2.Priority
    def __init__(self, source: _Optional[str] = ..., channel: _Optional[str] = ..., text: _Optional[str] = ..., user_id: _Optional[str] = ..., group_id: _Optional[str] = ..., priority: _Optional[_Union[_plugin_pb2.Priority, str]] = ...) -> None: ...

class McpRequest(_message.Message):
    __slots__ = ("server", "method", "params_json")
    SERVER_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    PARAMS_JSON_FIELD_NUMBER: _ClassVar[int]
    server: str
    method: str
    params_json: str
    def __init__(self, server: _Optional[str] = ..., method: _Optional[str] = ..., params_json: _Optional[str] = ...) -> None: ...

class McpResponse(_message.Message):
    __slots__ = ("result_json",)
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    result_json: str
    def __init__(self, result_json: _Optional[str] = ...) -> None: ...
