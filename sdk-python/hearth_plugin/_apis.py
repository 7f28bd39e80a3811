"""Typed host-service APIs with the seed's names (HomeAgent `SettingsAPI`, `MemoryAPI`,
`TextMemoryAPI`, `DocMemoryAPI`, `KnowledgeAPI`, `LLMAPI`), plus `McpAPI` (MCP servers'
resources and prompts), on top of the generic clients of `hearth_plugin._host`.

`sdk.settings()` → `SettingsAPI`, `sdk.memory()` → `MemoryAPI`, … Methods take the
seed's arguments and return plain Python values: settings values decoded from their
JSON text, `ConfigDef` / `Entity` / `Relation` / `Doc` / `KnowledgeEntry` records (each
with `to_dict()` giving the seed's JSON names), counts as ints. Like the generic
clients, a call blocks in plain code and returns an awaitable on the plugin's event
loop; `timeout=` seconds is optional; failures raise `HostError` (`.code` is the status
name, e.g. `"NOT_FOUND"`; `.details` the broker's message).
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple, Type, TypeVar

from ._host import SERVICES, Connection
from ._types import HostError

_R = TypeVar("_R", bound="_Record")

__all__ = ["ConfigDef", "Doc", "Entity", "KnowledgeEntry", "Relation", "TextEvent", "Triple",
           "SettingsAPI", "MemoryAPI", "TextMemoryAPI", "DocMemoryAPI", "KnowledgeAPI", "LLMAPI",
           "McpAPI", "MCP_METHODS"]


class _Record:
    """Attribute bag: keyword construction, readable repr, equality by fields, `to_dict()`."""

    __slots__: Tuple[str, ...] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if len(args) > len(self.__slots__):
            raise TypeError(f"{type(self).__name__}: at most {len(self.__slots__)} positional arguments")
        for name, value in zip(self.__slots__, args):
            if name in kwargs:
                raise TypeError(f"{type(self).__name__}: {name} given twice")
            kwargs[name] = value
        unknown = set(kwargs) - set(self.__slots__)
        if unknown:
            raise TypeError(f"{type(self).__name__}: unknown field {sorted(unknown)[0]!r} "
                            f"(fields: {', '.join(self.__slots__)})")
        for name in self.__slots__:
            setattr(self, name, kwargs.get(name, self._default(name)))

    @staticmethod
    def _default(name: str) -> Any:
        return ""

    @classmethod
    def from_dict(cls: Type[_R], d: Any) -> _R:
        """A record from a dict with the seed's JSON names (or the record itself)."""
        if isinstance(d, cls):
            return d
        if not isinstance(d, dict):
            raise TypeError(f"expected a {cls.__name__} or a dict, got {type(d).__name__}")
        return cls(**d)

    def to_dict(self) -> Dict[str, Any]:
        """The record with the seed's JSON field names."""
        return {k: getattr(self, k) for k in self.__slots__}

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__)
        return f"{type(self).__name__}({fields})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and all(
            getattr(self, k) == getattr(other, k) for k in self.__slots__)

    __hash__ = None  # type: ignore[assignment]


_UNSET = object()


class ConfigDef(_Record):
    """A setting's definition for a settings UI (seed `ConfigDef`, the broker's
    `storage::ConfigDef`), registered with `sdk.settings().register_def(...)`.

    Fields (keywords, or positional in this order; a dict with these names works too):

    - `key` (str, required): the setting it defines, in this plugin's own table.
    - `default` (any JSON value; leave it out for no default): written as the value
      when the key is unset at registration; a value already set is never overwritten.
      `None` is a default too (a stored null).
    - `type` (str, default `"string"`): `"string"`, `"number"`, `"integer"` or
      `"boolean"`: the broker (and `hearth_plugin.testing`'s fake host) refuses to set
      the key to a value of another JSON type (INVALID_ARGUMENT; `None` always fits).
      Any other type is only a hint for a settings UI.
    - `display_name` (str): the label in a settings UI.
    - `description` (str): longer help text.
    - `category` (str): the group in a settings UI.
    - `options` (list of str): the allowed values (a drop-down).
    - `min`, `max`, `step` (float or None): the range and step of a number input.
    - `required` (bool): the plugin needs a value to work.
    - `secret` (bool): sensitive (an API key …): masked (`"••••••"`) in `dump()` and in
      logs, and masked for other plugins without capability `settings_secrets`; the
      plugin itself reads its own secret in clear.

    `to_dict()` leaves out empty fields, like the seed's `omitempty`.
    """

    __slots__ = ("key", "default", "type", "display_name", "description", "category",
                 "options", "min", "max", "step", "required", "secret")
    key: str
    default: Any
    type: str
    display_name: str
    description: str
    category: str
    options: List[str]
    min: Optional[float]
    max: Optional[float]
    step: Optional[float]
    required: bool
    secret: bool

    @staticmethod
    def _default(name: str) -> Any:
        return {"default": _UNSET, "type": "string", "options": [], "min": None, "max": None,
                "step": None, "required": False, "secret": False}.get(name, "")

    @property
    def has_default(self) -> bool:
        """Whether a default is given (`None` is one)."""
        return self.default is not _UNSET

    def to_dict(self) -> Dict[str, Any]:
        """The def with the seed's JSON names, empty fields left out."""
        out: Dict[str, Any] = {"key": self.key}
        if self.has_default:
            out["default"] = self.default
        out["type"] = self.type
        out["display_name"] = self.display_name
        for k in ("description", "category"):
            if getattr(self, k):
                out[k] = getattr(self, k)
        if self.options:
            out["options"] = list(self.options)
        for k in ("min", "max", "step"):
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        for k in ("required", "secret"):
            if getattr(self, k):
                out[k] = True
        return out

    def __repr__(self) -> str:
        return f"ConfigDef({', '.join(f'{k}={v!r}' for k, v in self.to_dict().items())})"


class Entity(_Record):
    """A graph-memory node (seed `Entity`): `name`, `type`, `mention_count`."""

    __slots__ = ("name", "type", "mention_count")
    name: str
    type: str
    mention_count: int

    @staticmethod
    def _default(name: str) -> Any:
        return 0 if name == "mention_count" else ""


class Relation(_Record):
    """A graph-memory edge (seed `Relation`): `source_name` —`relation_type`→ `target_name`."""

    __slots__ = ("source_name", "target_name", "relation_type")
    source_name: str
    target_name: str
    relation_type: str


class Triple(_Record):
    """A fact to commit (seed `Triple`, plus the optional types and session of the wire)."""

    __slots__ = ("subject", "relation", "object", "subject_type", "object_type", "session_id")
    subject: str
    relation: str
    object: str
    subject_type: str
    object_type: str
    session_id: str

    @classmethod
    def from_dict(cls, d: Any) -> "Triple":
        """A Triple, a dict with its field names, or a tuple / list (subject, relation,
        object[, subject_type, object_type, session_id])."""
        if isinstance(d, (tuple, list)):
            if not 3 <= len(d) <= 6:
                raise TypeError(f"a triple tuple has 3 to 6 items (subject, relation, object, …), got {len(d)}")
            return cls(*d)
        return super().from_dict(d)


class TextEvent(_Record):
    """A TextMemory line (seed `TextEvent`): `role`, `content`, `timestamp` (Unix
    seconds; 0 = when appended), `channel`."""

    __slots__ = ("role", "content", "timestamp", "channel")
    role: str
    content: str
    timestamp: int
    channel: str

    @staticmethod
    def _default(name: str) -> Any:
        return 0 if name == "timestamp" else ""


class Doc(_Record):
    """A DocMemory document (seed `Doc`): `id`, `title`, `content`, `score` (query
    results: relevance, higher = better)."""

    __slots__ = ("id", "title", "content", "score")
    id: str
    title: str
    content: str
    score: float

    @staticmethod
    def _default(name: str) -> Any:
        return 0.0 if name == "score" else ""


class KnowledgeEntry(_Record):
    """A knowledge entry (seed `Knowledge`): `name`, `content`, and `score` in search
    results (higher = better)."""

    __slots__ = ("name", "content", "score")
    name: str
    content: str
    score: float

    @staticmethod
    def _default(name: str) -> Any:
        return 0.0 if name == "score" else ""


# ---------------------------------------------------------------- JSON text


def dumps(value: Any, where: str) -> str:
    """JSON text of a value for the wire; TypeError naming `where` if it has none."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{where}: value is not JSON: {e}") from None


def loads(text: str, where: str) -> Any:
    """A value from the broker's JSON text (empty = None)."""
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError as e:
        raise HostError(f"{where}: the broker sent invalid JSON: {e}", code="INTERNAL") from None


# ---------------------------------------------------------------- typed services


class _API:
    """Base of the typed APIs: one generic `ServiceClient`-like call path per rpc."""

    _attr = ""

    def __init__(self, conn_of: Callable[[], Connection], plugin: str) -> None:
        self._conn_of = conn_of
        self._plugin = plugin
        self._service = SERVICES[self._attr]

    def _call(self, method: str, request: Any, post: Callable[[Any], Any],
              timeout: Optional[float]) -> Any:
        """Runs `Service/method(request)` and maps the response through `post`:
        blocking, or an awaitable on the plugin's loop (see `Connection.dispatch`)."""
        conn = self._conn_of()
        attr, service = self._attr, self._service

        async def run() -> Any:
            return post(await conn.call(attr, service, method, request, timeout))

        return conn.dispatch(run)

    def _where(self, name: str) -> str:
        return f"plugin {self._plugin}: {self._attr}.{name}"

    def __repr__(self) -> str:
        names = [n for n in dir(type(self)) if not n.startswith("_")]
        return f"<hearth {type(self).__name__} of plugin {self._plugin}: {', '.join(names)}>"


def _pb() -> Any:
    from .v1 import host_pb2
    return host_pb2


def _none(_resp: Any) -> None:
    return None


def _keys(resp: Any) -> List[str]:
    return list(resp.keys)


class SettingsAPI(_API):
    """Seed `SettingsAPI`: this plugin's settings (`get`/`set`/`list`), core settings
    (`*_core`), other plugins' settings (`*_plugin`), definitions, `dump`, `plugins`."""

    _attr = "settings"

    def _value(self, name: str) -> Callable[[Any], Any]:
        return lambda resp: loads(resp.value_json, self._where(name))

    def get(self, key: str, *, timeout: Optional[float] = None) -> Any:
        """The value of `key` in this plugin's table, with its JSON type (NOT_FOUND if unset)."""
        return self._call("Get", _pb().KeyRequest(key=key), self._value("get"), timeout)

    def set(self, key: str, value: Any, *, timeout: Optional[float] = None) -> Any:
        """Sets `key` to any JSON value (None included)."""
        req = _pb().SetRequest(key=key, value_json=dumps(value, self._where("set")))
        return self._call("Set", req, _none, timeout)

    def list(self, prefix: str = "", *, timeout: Optional[float] = None) -> Any:
        """Keys of this plugin's table starting with `prefix`, sorted."""
        return self._call("List", _pb().PrefixRequest(prefix=prefix), _keys, timeout)

    def get_core(self, key: str, *, timeout: Optional[float] = None) -> Any:
        """A core setting (`core.daemon.data_dir` …; capability `settings_core`). A secret
        reads as `"••••••"` without capability `settings_secrets`."""
        return self._call("GetCore", _pb().KeyRequest(key=key), self._value("get_core"), timeout)

    def set_core(self, key: str, value: Any, *, timeout: Optional[float] = None) -> Any:
        """Sets a core setting (capability `settings_core`; a secret one also needs
        `settings_secrets`)."""
        req = _pb().SetRequest(key=key, value_json=dumps(value, self._where("set_core")))
        return self._call("SetCore", req, _none, timeout)

    def list_core(self, prefix: str = "", *, timeout: Optional[float] = None) -> Any:
        """Core keys starting with `prefix`, sorted (capability `settings_core`)."""
        return self._call("ListCore", _pb().PrefixRequest(prefix=prefix), _keys, timeout)

    def get_plugin(self, plugin: str, key: str, *, timeout: Optional[float] = None) -> Any:
        """`key` of another plugin's table (capability `settings_cross`). A secret reads as
        `"••••••"` without capability `settings_secrets`."""
        req = _pb().KeyRequest(key=key, plugin=plugin)
        return self._call("GetPlugin", req, self._value("get_plugin"), timeout)

    def set_plugin(self, plugin: str, key: str, value: Any, *, timeout: Optional[float] = None) -> Any:
        """Sets `key` of another plugin's table (capability `settings_cross`; a secret key
        also needs `settings_secrets`)."""
        req = _pb().SetRequest(key=key, plugin=plugin,
                               value_json=dumps(value, self._where("set_plugin")))
        return self._call("SetPlugin", req, _none, timeout)

    def list_plugin(self, plugin: str, prefix: str = "", *, timeout: Optional[float] = None) -> Any:
        """Keys of another plugin's table (capability `settings_cross`)."""
        req = _pb().PrefixRequest(prefix=prefix, plugin=plugin)
        return self._call("ListPlugin", req, _keys, timeout)

    def register_def(self, definition: Any, *, timeout: Optional[float] = None) -> Any:
        """Declares a setting: a `ConfigDef` or a dict with the seed's JSON names. Its
        `default` is written only when the key is unset."""
        d = ConfigDef.from_dict(definition)
        if not isinstance(d.key, str) or not d.key:
            raise ValueError(f"{self._where('register_def')}: ConfigDef needs a key")
        from .v1 import plugin_pb2
        req = plugin_pb2.ConfigDef(
            key=d.key, type=d.type or "string", display_name=d.display_name or "",
            description=d.description or "", category=d.category or "",
            options=[str(o) for o in (d.options or [])], required=bool(d.required),
            secret=bool(d.secret),
            default_json=dumps(d.default, self._where("register_def")) if d.has_default else "")
        for k in ("min", "max", "step"):
            if getattr(d, k) is not None:
                setattr(req, k, float(getattr(d, k)))
        return self._call("RegisterDef", req, _none, timeout)

    def defs(self, prefix: str = "", *, timeout: Optional[float] = None) -> Any:
        """This plugin's definitions whose key starts with `prefix`: `ConfigDef`s."""
        where = self._where("defs")

        def post(resp: Any) -> List[ConfigDef]:
            out = []
            for w in resp.defs:
                d = ConfigDef(key=w.key, type=w.type, display_name=w.display_name,
                              description=w.description, category=w.category,
                              options=list(w.options), required=w.required, secret=w.secret)
                if w.default_json:
                    d.default = loads(w.default_json, where)
                for k in ("min", "max", "step"):
                    if w.HasField(k):
                        setattr(d, k, getattr(w, k))
                out.append(d)
            return out

        return self._call("Defs", _pb().PrefixRequest(prefix=prefix), post, timeout)

    def dump(self, *, timeout: Optional[float] = None) -> Any:
        """Every setting, secrets masked: `{"core": {...}, "plugins": {name: {...}}}`
        (capability `settings_cross`)."""
        where = self._where("dump")
        return self._call("Dump", _pb().Empty(), lambda r: loads(r.dump_json, where) or {}, timeout)

    def plugins(self, *, timeout: Optional[float] = None) -> Any:
        """Names of the plugins that have settings."""
        return self._call("Plugins", _pb().Empty(), _keys, timeout)


class MemoryAPI(_API):
    """Seed `MemoryAPI` (graph memory, capability `memory`)."""

    _attr = "memory"

    def recall(self, keywords: Iterable[str], depth: int = 1, *,
               timeout: Optional[float] = None) -> Any:
        """Entities whose names contain any keyword and what lies within `depth`
        relations: `(entities, relations)`, lists of `Entity` and `Relation`."""
        if isinstance(keywords, str):
            keywords = [keywords]
        req = _pb().RecallRequest(keywords=[str(k) for k in keywords], depth=int(depth))

        def post(resp: Any) -> Tuple[List[Entity], List[Relation]]:
            return ([Entity(e.name, e.type, int(e.mention_count)) for e in resp.entities],
                    [Relation(r.source_name, r.target_name, r.relation_type) for r in resp.relations])

        return self._call("Recall", req, post, timeout)

    def commit(self, triples: Iterable[Any], *, timeout: Optional[float] = None) -> Any:
        """Stores triples (`Triple`s, dicts, or `(subject, relation, object)` tuples);
        returns how many relations were added (duplicates of active ones are not)."""
        pb = _pb()
        wire = []
        for i, t in enumerate(triples):
            try:
                t = Triple.from_dict(t)
            except TypeError as e:
                raise TypeError(f"{self._where('commit')}: triple {i}: {e}") from None
            wire.append(pb.Triple(**{k: str(getattr(t, k) or "") for k in Triple.__slots__}))
        return self._call("Commit", pb.CommitRequest(triples=wire), lambda r: int(r.committed), timeout)

    def introspect(self, *, timeout: Optional[float] = None) -> Any:
        """Counts of the graph as a dict (entities, relations, …)."""
        where = self._where("introspect")
        return self._call("Introspect", _pb().Empty(), lambda r: loads(r.stats_json, where) or {}, timeout)

    def merge_entities(self, source: str, target: str, *, timeout: Optional[float] = None) -> Any:
        """Merges entity `source` into `target`; returns how many relations moved."""
        req = _pb().MergeRequest(source=source, target=target)
        return self._call("MergeEntities", req, lambda r: int(r.count), timeout)

    def purge(self, criteria: Dict[str, str], mode: str = "soft", *,
              timeout: Optional[float] = None) -> Any:
        """Removes relations matching every criterion (`subject_contains`,
        `target_contains`, `relation_type`, `session_id`); mode "soft" marks them
        inactive, "hard" deletes them. Returns how many."""
        req = _pb().PurgeRequest(criteria={str(k): str(v) for k, v in dict(criteria).items()},
                                 mode=mode)
        return self._call("Purge", req, lambda r: int(r.count), timeout)


class TextMemoryAPI(_API):
    """Seed `TextMemoryAPI` (capability `memory`)."""

    _attr = "text_memory"

    def append(self, event: Any, *, timeout: Optional[float] = None) -> Any:
        """Appends a `TextEvent` (or a dict: role, content, timestamp, channel)."""
        e = TextEvent.from_dict(event)
        req = _pb().TextEvent(role=e.role or "", content=e.content or "",
                              timestamp=int(e.timestamp or 0), channel=e.channel or "")
        return self._call("Append", req, _none, timeout)


class DocMemoryAPI(_API):
    """Seed `DocMemoryAPI` (capability `memory`)."""

    _attr = "doc_memory"

    def query(self, text: str, top_k: int = 5, *, timeout: Optional[float] = None) -> Any:
        """The best matching documents, best first: `Doc`s with `score` (> 0)."""
        req = _pb().DocQuery(text=text, top_k=int(top_k))
        return self._call("Query", req, lambda r: [Doc(d.id, d.title, d.content, d.score) for d in r.docs], timeout)

    def insert(self, doc: Any, *, timeout: Optional[float] = None) -> Any:
        """Stores a `Doc` (or a dict: id, title, content); the same id replaces."""
        d = Doc.from_dict(doc)
        req = _pb().Doc(id=d.id or "", title=d.title or "", content=d.content or "")
        return self._call("Insert", req, _none, timeout)

    def remove(self, id: str, *, timeout: Optional[float] = None) -> Any:
        """Deletes document `id` (NOT_FOUND if there is none)."""
        return self._call("Remove", _pb().IdRequest(id=id), _none, timeout)

    def stats(self, *, timeout: Optional[float] = None) -> Any:
        """Counts and sizes as a dict (docs, text_bytes, …)."""
        where = self._where("stats")
        return self._call("Stats", _pb().Empty(), lambda r: loads(r.stats_json, where) or {}, timeout)


class KnowledgeAPI(_API):
    """Seed `KnowledgeAPI` (capability `knowledge`)."""

    _attr = "knowledge"

    def search(self, query: str, top_k: int = 5, *, timeout: Optional[float] = None) -> Any:
        """The best matching entries, best first: `KnowledgeEntry`s with `score` (> 0)."""
        req = _pb().KnowledgeQuery(query=query, top_k=int(top_k))
        return self._call("Search", req,
                          lambda r: [KnowledgeEntry(e.name, e.content, e.score) for e in r.entries], timeout)

    def add(self, name: str, content: str, *, timeout: Optional[float] = None) -> Any:
        """Adds an entry."""
        req = _pb().KnowledgeEntry(name=name, content=content)
        return self._call("Add", req, _none, timeout)

    def list(self, *, timeout: Optional[float] = None) -> Any:
        """Names of all entries."""
        return self._call("List", _pb().Empty(), _keys, timeout)


class LLMAPI(_API):
    """Seed `LLMAPI` (capability `llm`)."""

    _attr = "llm"

    def list_sources(self, *, timeout: Optional[float] = None) -> Any:
        """Names of the LLM sources, in priority order."""
        return self._call("ListSources", _pb().Empty(), _keys, timeout)

    def set_source(self, name: str, *, timeout: Optional[float] = None) -> Any:
        """Makes `name` the source requests go to first."""
        return self._call("SetSource", _pb().SourceRequest(name=name), _none, timeout)

    def current_source(self, *, timeout: Optional[float] = None) -> Any:
        """The source requests go to first ("" when there is none)."""
        return self._call("CurrentSource", _pb().Empty(), lambda r: r.name, timeout)


#: The MCP methods `McpAPI.request` may send (the broker refuses others, INVALID_ARGUMENT).
MCP_METHODS = ("resources/list", "resources/templates/list", "resources/read", "prompts/list",
               "prompts/get")

#: Most pages a listing helper of `McpAPI` follows (`nextCursor`) before it stops.
_MCP_MAX_PAGES = 1000


class McpAPI(_API):
    """Resources and prompts of the MCP servers the broker runs as plugins (`"runtime":
    "mcp"`), each named by its plugin name (capability `mcp`). Read-only: the methods
    of `MCP_METHODS`.

    Results are MCP's JSON as plain Python values, with MCP's field names (`uri`,
    `mimeType`, `text`, `messages` …). The listing helpers follow `nextCursor` and
    return every page's items. Errors raise `HostError` naming `mcp.request`, with
    `code` NOT_FOUND (no MCP plugin of that name), INVALID_ARGUMENT (a method outside
    `MCP_METHODS`, params not an object), UNAVAILABLE (the server is not connected),
    FAILED_PRECONDITION (the server's own error; `details` has its message) or
    PERMISSION_DENIED (no capability `mcp`).
    """

    _attr = "mcp"

    def _req(self, server: str, method: str, params: Optional[Mapping[str, Any]], where: str) -> Any:
        if params is None:
            text = ""
        else:  # not an object: the broker answers INVALID_ARGUMENT
            text = dumps(dict(params) if isinstance(params, Mapping) else params, where)
        return _pb().McpRequest(server=server, method=method, params_json=text)

    def request(self, server: str, method: str, params: Optional[Mapping[str, Any]] = None, *,
                timeout: Optional[float] = None) -> Any:
        """Sends `method` (one of `MCP_METHODS`) with `params` (None = `{}`) to MCP server
        `server`; returns its result object as a dict."""
        where = self._where("request")
        req = self._req(server, method, params, where)
        return self._call("Request", req, lambda r: loads(r.result_json, where) or {}, timeout)

    def _items(self, name: str, server: str, method: str, key: str, timeout: Optional[float]) -> Any:
        """Every item of `key` over the pages of a list method (following `nextCursor`)."""
        where = self._where(name)
        conn = self._conn_of()
        attr, service = self._attr, self._service

        async def run() -> List[Any]:
            items: List[Any] = []
            cursor: Optional[str] = None
            for _ in range(_MCP_MAX_PAGES):
                req = self._req(server, method, None if cursor is None else {"cursor": cursor}, where)
                resp = await conn.call(attr, service, "Request", req, timeout)
                result = loads(resp.result_json, where) or {}
                page = result.get(key, []) if isinstance(result, dict) else None
                if not isinstance(page, list):
                    raise HostError(f"{where}: {method} of MCP server {server}: no `{key}` list "
                                    f"in the result", code="INTERNAL")
                items.extend(page)
                nxt = result.get("nextCursor")
                if not nxt or nxt == cursor:
                    break
                cursor = str(nxt)
            return items

        return conn.dispatch(run)

    def resources(self, server: str, *, timeout: Optional[float] = None) -> Any:
        """The server's resources (`resources/list`): dicts with `uri`, `name`, `mimeType` …"""
        return self._items("resources", server, "resources/list", "resources", timeout)

    def resource_templates(self, server: str, *, timeout: Optional[float] = None) -> Any:
        """The server's resource templates (`resources/templates/list`): dicts with
        `uriTemplate`, `name` …"""
        return self._items("resource_templates", server, "resources/templates/list",
                           "resourceTemplates", timeout)

    def read_resource(self, server: str, uri: str, *, timeout: Optional[float] = None) -> Any:
        """The contents of resource `uri` (`resources/read`): a list of dicts with `uri`,
        `mimeType` and `text` (or `blob`, base64)."""
        where = self._where("read_resource")
        req = self._req(server, "resources/read", {"uri": uri}, where)
        return self._call("Request", req,
                          lambda r: list((loads(r.result_json, where) or {}).get("contents") or []), timeout)

    def prompts(self, server: str, *, timeout: Optional[float] = None) -> Any:
        """The server's prompts (`prompts/list`): dicts with `name`, `description`,
        `arguments` …"""
        return self._items("prompts", server, "prompts/list", "prompts", timeout)

    def get_prompt(self, server: str, name: str, arguments: Optional[Mapping[str, str]] = None, *,
                   timeout: Optional[float] = None) -> Any:
        """Prompt `name` filled with `arguments` (`prompts/get`): the result dict,
        `description` and `messages` (each with `role` and `content`)."""
        params: Dict[str, Any] = {"name": name, "arguments": dict(arguments or {})}
        return self.request(server, "prompts/get", params, timeout=timeout)


#: Service attribute → typed API class.
APIS = {cls._attr: cls for cls in (SettingsAPI, MemoryAPI, TextMemoryAPI, DocMemoryAPI,
                                   KnowledgeAPI, LLMAPI, McpAPI)}
