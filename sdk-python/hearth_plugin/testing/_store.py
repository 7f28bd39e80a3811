"""In-memory host services with the broker's semantics (`broker/src/storage/`,
`broker/src/grpc/host.rs`, `broker/src/grpc/agent.rs`), for `hearth_plugin.testing`.

Plain Python objects, no gRPC: `FakeBroker` serves them to a plugin, and a test reads
and seeds them directly (`t.host.settings.get("weather", "city")`). A failure is a
`StoreError` carrying the gRPC status name the broker would answer with and the
broker's message ("no `city` in config_weather").

Where this differs from the broker: searches (`DocStore.query`, `KnowledgeStore.search`)
rank by a simple term score, not SQLite FTS5 bm25 over jieba words (same contract:
best first, scores > 0, higher = better, CJK text matched by its character pairs);
and knowledge entries are not files. Settings follow the broker to the letter: a value
whose key has a `ConfigDef` of type `string`, `number`, `integer` or `boolean` must be
of that JSON type or null (`ConfigDef::check`, the golden file
tests/golden/setting-types.json), refused as INVALID_ARGUMENT with the broker's message;
`options`, `min` and `max` are not checked (the broker does not check them either).
"""

from __future__ import annotations

import copy
import json
import math
import re
import secrets as _secrets
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple, Union

__all__ = ["SECRET_MASK", "StoreError", "SettingsStore", "GraphStore", "DocStore", "KnowledgeStore",
           "TextMemoryStore", "LlmStore", "McpStore", "McpCall", "Injected", "FakeHost", "secret_by_name", "table_name",
           "check_setting", "json_loads", "json_text"]

#: What a masked secret reads as (the broker's `SECRET_MASK`).
SECRET_MASK = "••••••"
_SECRET_SUFFIXES = ("api_key", "apikey", "token", "secret", "password")
_MAX_NAME_CHARS = 48
DEFAULT_TOP_K = 5
MAX_TOP_K = 100
_MAX_KNOWLEDGE_NAME_BYTES = 200


class StoreError(Exception):
    """A host-service call the broker would refuse: `code` is the gRPC status name
    (`"NOT_FOUND"`, `"INVALID_ARGUMENT"`, `"PERMISSION_DENIED"` …), the message the
    broker's."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _not_found(table: str, key: str) -> StoreError:
    return StoreError("NOT_FOUND", f"no `{key}` in {table}")


def _invalid(what: str, reason: str) -> StoreError:
    return StoreError("INVALID_ARGUMENT", f"{what}: {reason}")


def secret_by_name(key: str) -> bool:
    """Whether a core key is secret by its name alone (`…api_key`, `…token`, …)."""
    k = key.lower().replace("-", "_")
    return any(k.endswith(end) for end in _SECRET_SUFFIXES)


def table_name(plugin: Optional[str]) -> str:
    """The settings table of a plugin (`config_<sanitized name>`), or `config` for core."""
    if plugin is None:
        return "config"
    return "config_" + "".join(c.lower() if c.isascii() and c.isalnum() else "_"
                               for c in plugin[:_MAX_NAME_CHARS])


def _now() -> int:
    return int(time.time())


# ---------------------------------------------------------------------------- settings

_DEF_FIELDS = ("key", "default", "type", "display_name", "description", "category", "options",
               "min", "max", "step", "required", "secret")


# JSON values as the broker's serde_json holds them: a number written with a fraction or
# an exponent, or an integer outside i64/u64 (or `-0`), is an f64 ("a number with a
# fraction"); text is serde_json's (object keys sorted, f64 in its shortest form).

_I64_MIN, _U64_MAX = -(1 << 63), (1 << 64) - 1


def _parse_int(text: str) -> Any:
    n = int(text)
    if n == 0 and text.startswith("-"):
        return -0.0
    if _I64_MIN <= n <= _U64_MAX:
        return n
    return _parse_float(text)


def _parse_float(text: str) -> float:
    try:
        f = float(text)
    except OverflowError:
        f = math.inf
    if math.isinf(f):
        raise ValueError(f"number out of range: {text}")
    return f


def _no_constant(text: str) -> Any:
    raise ValueError(f"expected value, got {text}")


def json_loads(text: str) -> Any:
    """JSON text → a value as serde_json reads it (see `json_text`): numbers with a
    fraction or an exponent, and integers beyond i64/u64, are floats; NaN and
    Infinity are refused. Raises ValueError."""
    return json.loads(text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_no_constant)


def _is_f64(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, float) or (isinstance(value, int) and not _I64_MIN <= value <= _U64_MAX)


def _f64_text(x: float) -> str:
    """serde_json's text of an f64: the shortest digits, laid out as `0.00001`,
    `12.5`, `3.0`, `1e-6`, `1.5e+16`."""
    if math.isnan(x) or math.isinf(x):
        return "null"
    sign = "-" if math.copysign(1.0, x) < 0 else ""
    x = abs(x)
    if x == 0:
        return sign + "0.0"
    mantissa, _, exp = repr(x).partition("e")
    whole, _, frac = mantissa.partition(".")
    digits = whole + frac
    point = len(whole) + (int(exp) if exp else 0)
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    digits = stripped.rstrip("0")
    n = len(digits)
    if n <= point <= 16:
        text = digits + "0" * (point - n) + ".0"
    elif 0 < point <= 16:
        text = digits[:point] + "." + digits[point:]
    elif -5 < point <= 0:
        text = "0." + "0" * -point + digits
    else:
        e = point - 1
        text = (digits if n == 1 else digits[0] + "." + digits[1:]) + ("e+" if e > 0 else "e") + str(e)
    return sign + text


def json_text(value: Any) -> str:
    """`value` as the broker's serde_json writes it (compact, object keys sorted,
    non-ASCII kept, f64 as in `_f64_text`)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if _is_f64(value):
        return _f64_text(float(value))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(json_text(v) for v in value) + "]"
    if isinstance(value, Mapping):
        items = sorted(((str(k), v) for k, v in value.items()), key=lambda kv: kv[0])
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + json_text(v) for k, v in items) + "}"
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if _is_f64(value):
        return "a number with a fraction"
    if isinstance(value, int):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "an array"
    return "an object"


_EXPECTED = {"string": "a string", "number": "a number", "integer": "an integer",
             "boolean": "a boolean (true or false)"}


def check_setting(definition: Mapping[str, Any], value: Any) -> Optional[str]:
    """None when `value` fits the def's `type`, else why not, in the broker's words
    (`ConfigDef::check`): only `string`, `number`, `integer` and `boolean` are
    checked, null always fits, and a secret def's value is not quoted."""
    kind = str(definition.get("type") or "")
    if kind == "string":
        fits = isinstance(value, str)
    elif kind == "number":
        fits = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif kind == "integer":
        fits = (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and math.isfinite(value) and value.is_integer())
    elif kind == "boolean":
        fits = isinstance(value, bool)
    else:
        return None
    if fits or value is None:
        return None
    expected = f"expected {_EXPECTED[kind]} (its def's type is `{kind}`)"
    if definition.get("secret"):
        return f"{expected}, got {_json_kind(value)} (a secret: value not shown)"
    shown = json_text(value)
    if len(shown) > 60:
        shown = shown[:60] + "…"
    return f"{expected}, got {shown} ({_json_kind(value)})"


class SettingsStore:
    """Settings: core keys (`plugin=None`) and each plugin's own table, with
    `ConfigDef`s (dicts with the seed's JSON names) and secrets.

    A plugin's table exists once it set a key or registered a def (then it is listed
    by `plugins()` and `dump()`). Values keep their JSON type; `get` of a key never set
    is NOT_FOUND naming the table. `get(..., masked=True)` reads a secret (its def says
    `secret`, or a core key named like a credential) as `SECRET_MASK`.
    """

    def __init__(self) -> None:
        self._values: Dict[Optional[str], Dict[str, Any]] = {None: {}}
        self._defs: Dict[Optional[str], Dict[str, Dict[str, Any]]] = {None: {}}

    @staticmethod
    def _check(plugin: Optional[str], key: Optional[str]) -> None:
        if plugin is not None and not plugin:
            raise _invalid("settings", "empty plugin name")
        if key is not None and not key:
            raise _invalid("settings", "empty key")

    def _table(self, plugin: Optional[str], create: bool) -> Optional[Dict[str, Any]]:
        table = self._values.get(plugin)
        if table is None and create:
            table = self._values[plugin] = {}
            self._defs.setdefault(plugin, {})
        return table

    def is_secret(self, plugin: Optional[str], key: str) -> bool:
        """Whether `key` of `plugin` (None = core) is secret, set or not."""
        if plugin is None and secret_by_name(key):
            return True
        return bool(self._defs.get(plugin, {}).get(key, {}).get("secret"))

    def get(self, plugin: Optional[str], key: str, *, masked: bool = False) -> Any:
        """The value (a copy), with its JSON type; NOT_FOUND when never set."""
        self._check(plugin, key)
        table = self._table(plugin, False)
        if table is None or key not in table:
            raise _not_found(table_name(plugin), key)
        if masked and self.is_secret(plugin, key):
            return SECRET_MASK
        return copy.deepcopy(table[key])

    def set(self, plugin: Optional[str], key: str, value: Any) -> None:
        """Sets `key` to any JSON value (None included), creating the plugin's table.
        INVALID_ARGUMENT when the key has a def whose type the value does not fit
        (`check_setting`), with the broker's message: "setting `days` of plugin
        weather: expected a number (its def's type is `number`), got "abc" (a string)"."""
        self._check(plugin, key)
        d = self._defs.get(plugin, {}).get(key)
        why = None if d is None else check_setting(d, value)
        if why is not None:
            raise _invalid(f"setting `{key}` of " + ("core" if plugin is None else f"plugin {plugin}"), why)
        table = self._table(plugin, True)
        assert table is not None
        table[key] = copy.deepcopy(value)

    def list(self, plugin: Optional[str], prefix: str = "") -> List[str]:
        """Keys set in the table starting with `prefix`, sorted."""
        self._check(plugin, None)
        return sorted(k for k in (self._table(plugin, False) or {}) if k.startswith(prefix))

    def register_def(self, plugin: Optional[str], definition: Mapping[str, Any]) -> None:
        """Records a def (a dict with the seed's names; replaces one of the same key) and
        writes its `default` when the key is unset (as the broker does, the default is
        not checked against the type). A def without `type` has none (nothing is
        checked). INVALID_ARGUMENT for an empty key or an unknown field."""
        unknown = [k for k in definition if k not in _DEF_FIELDS]
        if unknown:
            raise _invalid("Settings.RegisterDef", f"unknown field `{unknown[0]}`")
        key = str(definition.get("key") or "")
        self._check(plugin, key)
        d = {k: copy.deepcopy(v) for k, v in definition.items()}
        d.setdefault("type", "")
        self._table(plugin, True)
        self._defs.setdefault(plugin, {})[key] = d
        table = self._values[plugin]
        if "default" in d and key not in table:
            table[key] = copy.deepcopy(d["default"])

    def defs(self, plugin: Optional[str], prefix: str = "") -> List[Dict[str, Any]]:
        """The defs whose key starts with `prefix`, sorted by key (copies)."""
        self._check(plugin, None)
        found = self._defs.get(plugin, {}) if plugin in self._values else {}
        return [copy.deepcopy(found[k]) for k in sorted(found) if k.startswith(prefix)]

    def dump(self) -> Dict[str, Any]:
        """`{"core": {...}, "plugins": {name: {...}}}` with every secret masked."""
        def masked(plugin: Optional[str]) -> Dict[str, Any]:
            return {k: (SECRET_MASK if self.is_secret(plugin, k) else copy.deepcopy(v))
                    for k, v in sorted(self._values.get(plugin, {}).items())}
        return {"core": masked(None), "plugins": {p: masked(p) for p in self.plugins()}}

    def plugins(self) -> List[str]:
        """Names of the plugins with a table, sorted."""
        return sorted(p for p in self._values if p is not None)


# ---------------------------------------------------------------------------- graph memory


@dataclass
class _Entity:
    id: int
    name: str
    type: str
    mention_count: int


@dataclass
class _Relation:
    id: int
    source: int
    target: int
    relation_type: str
    session_id: str
    active: bool = True


def _fold(name: str) -> str:
    return name.strip().lower()


class GraphStore:
    """Graph memory: entities (identified by their trimmed, case-folded name) and
    relations, committed as triples, recalled by keyword (case-insensitive substring)
    with a breadth-first walk, merged and purged soft or hard — the broker's
    `storage::GraphMemory`. Entities and relations are plain dicts in the results."""

    PURGE_KEYS = ("subject_contains", "target_contains", "relation_type", "session_id")

    def __init__(self) -> None:
        self._entities: Dict[str, _Entity] = {}  # folded name → entity
        self._relations: List[_Relation] = []
        self._next = 1

    def _id(self) -> int:
        self._next += 1
        return self._next - 1

    def _upsert(self, name: str, kind: str) -> _Entity:
        e = self._entities.get(_fold(name))
        if e is None:
            e = self._entities[_fold(name)] = _Entity(self._id(), name, kind, 1)
        else:
            e.mention_count += 1
            if kind:
                e.type = kind
        return e

    def _by_id(self, ident: int) -> _Entity:
        return next(e for e in self._entities.values() if e.id == ident)

    @staticmethod
    def _entity(e: _Entity) -> Dict[str, Any]:
        return {"name": e.name, "type": e.type, "mention_count": e.mention_count}

    def commit(self, triples: Iterable[Mapping[str, str]]) -> int:
        """Stores triples (dicts: subject, relation, object, subject_type, object_type,
        session_id); returns how many relations were added (an identical active one is
        not added again). INVALID_ARGUMENT naming the triple for an empty subject,
        relation or object; then nothing is stored."""
        clean = []
        for i, t in enumerate(triples):
            c = {k: str(t.get(k) or "").strip() for k in
                 ("subject", "relation", "object", "subject_type", "object_type", "session_id")}
            for f in ("subject", "relation", "object"):
                if not c[f]:
                    raise _invalid(f"commit: triple {i}", f"empty `{f}`")
            clean.append(c)
        added = 0
        for c in clean:
            s = self._upsert(c["subject"], c["subject_type"])
            o = self._upsert(c["object"], c["object_type"])
            if not any(r.active and (r.source, r.target, r.relation_type) == (s.id, o.id, c["relation"])
                       for r in self._relations):
                self._relations.append(_Relation(self._id(), s.id, o.id, c["relation"], c["session_id"]))
                added += 1
        return added

    def recall(self, keywords: Iterable[str], depth: int = 1) -> Tuple[List[Dict[str, Any]], List[Dict[str, str]]]:
        """(entities, relations) within `depth` relations of the entities whose names
        contain a keyword: matched entities first, then each further level, most
        mentioned first within a level; each active relation once, level by level."""
        folded = sorted({_fold(k) for k in keywords if _fold(k)})
        visited: Dict[int, None] = {}
        seeds: List[int] = []
        for kw in folded:
            for e in sorted(self._entities.values(), key=lambda e: e.id):
                if kw in _fold(e.name) and e.id not in visited:
                    visited[e.id] = None
                    seeds.append(e.id)
        if not seeds:
            return [], []
        levels = [seeds]
        walked = set()
        edges: List[_Relation] = []
        for _ in range(max(depth, 0)):
            frontier = set(levels[-1])
            if not frontier:
                break
            nxt: List[int] = []
            for r in sorted(self._relations, key=lambda r: r.id):
                if not r.active or r.id in walked or not (r.source in frontier or r.target in frontier):
                    continue
                walked.add(r.id)
                edges.append(r)
                for end in (r.source, r.target):
                    if end not in visited:
                        visited[end] = None
                        nxt.append(end)
            levels.append(nxt)
        entities: List[Dict[str, Any]] = []
        for level in levels:
            es = sorted((self._by_id(i) for i in level), key=lambda e: (-e.mention_count, e.name))
            entities.extend(self._entity(e) for e in es)
        relations = [{"source_name": self._by_id(r.source).name, "target_name": self._by_id(r.target).name,
                      "relation_type": r.relation_type} for r in edges]
        return entities, relations

    def introspect(self) -> Dict[str, Any]:
        """Counts: entities, relations (active), inactive_relations, entity_types,
        relation_types, sessions, top_entities (10 most mentioned)."""
        active = [r for r in self._relations if r.active]
        types: Dict[str, int] = {}
        for e in self._entities.values():
            types[e.type] = types.get(e.type, 0) + 1
        rtypes: Dict[str, int] = {}
        for r in active:
            rtypes[r.relation_type] = rtypes.get(r.relation_type, 0) + 1
        top = sorted(self._entities.values(), key=lambda e: (-e.mention_count, e.name))[:10]
        return {"entities": len(self._entities), "relations": len(active),
                "inactive_relations": len(self._relations) - len(active),
                "entity_types": dict(sorted(types.items())), "relation_types": dict(sorted(rtypes.items())),
                "sessions": len({r.session_id for r in active if r.session_id}),
                "top_entities": [self._entity(e) for e in top]}

    def merge_entities(self, source: str, target: str) -> int:
        """Merges entity `source` into `target`; returns how many relations moved.
        NOT_FOUND (`entities`) for a missing one, INVALID_ARGUMENT for the same one."""
        source, target = source.strip(), target.strip()
        if _fold(source) == _fold(target):
            raise _invalid("merge entities", f"`{source}` and `{target}` are the same entity")
        s = self._entities.get(_fold(source))
        if s is None:
            raise _not_found("entities", source)
        t = self._entities.get(_fold(target))
        if t is None:
            raise _not_found("entities", target)
        keep = []
        for r in self._relations:
            if (r.source == s.id and r.target in (s.id, t.id)) or (r.target == s.id and r.source == t.id):
                continue  # would-be self-loop
            if r.active and r.source == s.id and any(
                    d.active and d.source == t.id and d.target == r.target and d.relation_type == r.relation_type
                    for d in self._relations):
                continue
            if r.active and r.target == s.id and any(
                    d.active and d.target == t.id and d.source == r.source and d.relation_type == r.relation_type
                    for d in self._relations):
                continue
            keep.append(r)
        self._relations = keep
        moved = 0
        for r in self._relations:
            if r.source == s.id:
                r.source = t.id
                moved += 1
            if r.target == s.id:
                r.target = t.id
                moved += 1
        t.mention_count += s.mention_count
        if not t.type:
            t.type = s.type
        del self._entities[_fold(source)]
        return moved

    def purge(self, criteria: Mapping[str, str], mode: str = "soft") -> int:
        """Removes the relations matching every criterion: "soft" marks active ones
        inactive, "hard" deletes them (and entities left without relations). Returns
        how many. INVALID_ARGUMENT for no criteria, an unknown one, or an unknown mode."""
        crit: Dict[str, str] = {}
        for k, v in criteria.items():
            if k not in self.PURGE_KEYS:
                raise _invalid("purge", f"unknown criterion `{k}` (expected one of {', '.join(self.PURGE_KEYS)})")
            if v and v.strip():
                crit[k] = v.strip()
        if mode not in ("soft", "hard"):
            raise _invalid("purge", f"mode {mode!r}: expected \"soft\" or \"hard\"".replace("'", '"'))
        if not crit:
            raise _invalid("purge", f"no criteria (give at least one of {', '.join(self.PURGE_KEYS)})")

        def hit(r: _Relation) -> bool:
            if "subject_contains" in crit and _fold(crit["subject_contains"]) not in _fold(self._by_id(r.source).name):
                return False
            if "target_contains" in crit and _fold(crit["target_contains"]) not in _fold(self._by_id(r.target).name):
                return False
            if "relation_type" in crit and r.relation_type != crit["relation_type"]:
                return False
            return not ("session_id" in crit and r.session_id != crit["session_id"])

        if mode == "soft":
            n = 0
            for r in self._relations:
                if r.active and hit(r):
                    r.active = False
                    n += 1
            return n
        gone = [r for r in self._relations if hit(r)]
        touched = {r.source for r in gone} | {r.target for r in gone}
        self._relations = [r for r in self._relations if not hit(r)]
        used = {r.source for r in self._relations} | {r.target for r in self._relations}
        for key, e in list(self._entities.items()):
            if e.id in touched and e.id not in used:
                del self._entities[key]
        return len(gone)


# ---------------------------------------------------------------------------- search

_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+")
_WORD = re.compile(r"[^\W_]+")


def _terms(text: str) -> List[str]:
    """Query terms: lower-cased words of non-CJK text, and each pair of adjacent
    characters of a CJK run (a single character alone)."""
    out: List[str] = []
    for part in _CJK.split(text):
        out.extend(w.lower() for w in _WORD.findall(part))
    for run in _CJK.findall(text):
        out.extend([run] if len(run) == 1 else [run[i:i + 2] for i in range(len(run) - 1)])
    return list(dict.fromkeys(out))


def _count(term: str, text: str, words: Dict[str, int]) -> int:
    if _CJK.fullmatch(term):
        return text.count(term)
    return words.get(term, 0)


def _rank(items: List[Tuple[Any, str]], query: str, top_k: int) -> List[Tuple[Any, float]]:
    """(item, score) of the items whose text matches a query term, best first."""
    terms = _terms(query)
    if not terms:
        return []
    limit = DEFAULT_TOP_K if top_k <= 0 else min(top_k, MAX_TOP_K)
    prepared = []
    for item, text in items:
        lowered = text.lower()
        words: Dict[str, int] = {}
        for w in _WORD.findall(" ".join(_CJK.split(lowered))):
            words[w] = words.get(w, 0) + 1
        prepared.append((item, lowered, words))
    n = len(prepared)
    scored = []
    for index, (item, text, words) in enumerate(prepared):
        score = 0.0
        for term in terms:
            tf = _count(term, text, words)
            if tf:
                df = sum(1 for _, t, w in prepared if _count(term, t, w))
                score += (1.0 + math.log(tf)) * math.log(1.0 + n / df)
        if score > 0:
            scored.append((-score, index, item, score))
    scored.sort(key=lambda x: (x[0], x[1]))
    return [(item, score) for _, _, item, score in scored[:limit]]


class DocStore:
    """DocMemory: documents by id (dicts: id, title, content), replaced by id, removed,
    and queried by text (best first, `score` > 0)."""

    def __init__(self) -> None:
        self._docs: Dict[str, Dict[str, Any]] = {}

    def insert(self, doc: Mapping[str, Any]) -> str:
        """Stores a doc; an empty id gets `doc_` + 16 hex digits. Returns the id.
        INVALID_ARGUMENT when title and content are both blank."""
        ident = str(doc.get("id") or "") or "doc_" + _secrets.token_hex(8)
        title, content = str(doc.get("title") or ""), str(doc.get("content") or "")
        if not title.strip() and not content.strip():
            raise _invalid(f"insert doc {ident}", "title and content are both empty")
        old = self._docs.pop(ident, None)
        now = _now()
        self._docs[ident] = {"id": ident, "title": title, "content": content,
                             "created_at": old["created_at"] if old else now, "updated_at": now}
        return ident

    def remove(self, ident: str) -> None:
        """Deletes doc `ident`; NOT_FOUND (`doc_memory`) when there is none."""
        if self._docs.pop(ident, None) is None:
            raise _not_found("doc_memory", ident)

    def get(self, ident: str) -> Optional[Dict[str, Any]]:
        """The doc `ident` (id, title, content) or None."""
        d = self._docs.get(ident)
        return None if d is None else {"id": d["id"], "title": d["title"], "content": d["content"]}

    def all(self) -> List[Dict[str, Any]]:
        """Every doc (id, title, content), oldest first."""
        return [{"id": d["id"], "title": d["title"], "content": d["content"]} for d in self._docs.values()]

    def query(self, text: str, top_k: int = 5) -> List[Dict[str, Any]]:
        """The best matching docs with `score`, at most `top_k` (0 = 5, at most 100)."""
        hits = _rank([(d, f"{d['title']}\n{d['content']}") for d in self._docs.values()], text, top_k)
        return [{"id": d["id"], "title": d["title"], "content": d["content"], "score": s} for d, s in hits]

    def stats(self) -> Dict[str, Any]:
        """docs, text_bytes, index_bytes (0 here), oldest, newest (None when empty)."""
        times = [d["updated_at"] for d in self._docs.values()]
        return {"docs": len(self._docs),
                "text_bytes": sum(len(d["title"].encode()) + len(d["content"].encode()) for d in self._docs.values()),
                "index_bytes": 0, "oldest": min(times) if times else None,
                "newest": max(times) if times else None}


class KnowledgeStore:
    """Knowledge: entries by name (sanitized as the broker names its files), listed
    sorted and searched by text."""

    def __init__(self) -> None:
        self._entries: Dict[str, str] = {}

    @staticmethod
    def sanitize_name(name: str) -> str:
        """The name an entry is stored under (`天气/北京` → `天气_北京`); INVALID_ARGUMENT
        when nothing is left."""
        trimmed = name.strip()
        if trimmed.endswith(".md"):
            trimmed = trimmed[:-3]
        out = ""
        for c in trimmed:
            if ord(c) < 32 or 0x7f <= ord(c) < 0xa0 or c in '/\\:*?"<>|':
                c = "_"
            if len((out + c).encode()) > _MAX_KNOWLEDGE_NAME_BYTES:
                break
            out += c
        if out.startswith("."):
            out = "_" + out[1:]
        out = out.rstrip()
        if not out:
            raise _invalid(f"knowledge entry name {name!r}".replace("'", '"'), "empty once sanitized")
        return out

    def add(self, name: str, content: str) -> str:
        """Writes entry `name` (replacing one of that name); returns the stored name."""
        stored = self.sanitize_name(name)
        self._entries[stored] = content
        return stored

    def get(self, name: str) -> Optional[str]:
        """The content of entry `name`, or None."""
        return self._entries.get(name)

    def list(self) -> List[str]:
        """Every entry's name, sorted."""
        return sorted(self._entries)

    def search(self, query: str, top_k: int = 5) -> List[Dict[str, Any]]:
        """The best matching entries (name, content, score), best first."""
        hits = _rank([(n, f"{n}\n{c}") for n, c in sorted(self._entries.items())], query, top_k)
        return [{"name": n, "content": self._entries[n], "score": s} for n, s in hits]


class TextMemoryStore:
    """TextMemory: the appended events (dicts: role, content, timestamp, channel), in
    order; a timestamp of 0 is stamped with the time of the append."""

    def __init__(self) -> None:
        self.events: List[Dict[str, Any]] = []

    def append(self, event: Mapping[str, Any]) -> None:
        """Appends one event; INVALID_ARGUMENT when `role` is empty."""
        role = str(event.get("role") or "")
        if not role.strip():
            raise _invalid("TextMemory.Append", "`role` is empty (system, user or assistant)")
        ts = int(event.get("timestamp") or 0) or _now()
        self.events.append({"role": role, "content": str(event.get("content") or ""),
                            "timestamp": ts, "channel": str(event.get("channel") or "")})


class LlmStore:
    """The LLM sources plugins see: names in priority order and the one chosen."""

    def __init__(self, sources: Iterable[str] = ()) -> None:
        self.sources: List[str] = list(sources)
        self.chosen: Optional[str] = None

    def current(self) -> str:
        """The chosen source, else the first, else ""."""
        return self.chosen or (self.sources[0] if self.sources else "")

    def set_current(self, name: str) -> None:
        """Chooses `name`; NOT_FOUND naming the known ones when there is no such source."""
        if name not in self.sources:
            raise StoreError("NOT_FOUND", f"unknown LLM source `{name}` (known: {', '.join(self.sources)})")
        self.chosen = name


#: The MCP methods the broker's Mcp service passes on (`broker/src/mcp/host.rs` READ_METHODS).
MCP_METHODS = ("resources/list", "resources/templates/list", "resources/read", "prompts/list",
               "prompts/get")

#: A canned MCP result: a JSON object, or a callable(params) → object (raise `StoreError`
#: to fail with that status).
McpResult = Union[Mapping[str, Any], Callable[[Dict[str, Any]], Any]]


@dataclass(frozen=True)
class McpCall:
    """One request a plugin sent through the Mcp service: the MCP plugin's name, the
    method and its params (a dict)."""

    server: str
    method: str
    params: Dict[str, Any]


class _McpServer:
    def __init__(self) -> None:
        self.connected = True
        self.resources: List[Dict[str, Any]] = []
        self.contents: Dict[str, List[Dict[str, Any]]] = {}
        self.prompts: List[Dict[str, Any]] = []
        self.prompt_results: Dict[str, Any] = {}
        self.results: Dict[str, McpResult] = {}


class McpStore:
    """MCP servers (plugins with `"runtime": "mcp"`) whose resources and prompts plugins
    read through the Mcp service (`sdk.mcp()`, capability `mcp`), with canned answers.

    Seed a server with `add_resource` / `add_prompt` (what `resources/list`,
    `resources/read`, `prompts/list` and `prompts/get` answer), or give any method's
    result outright with `set_result` (it takes precedence). The broker's errors:
    NOT_FOUND for a server never added, INVALID_ARGUMENT for a method outside
    `MCP_METHODS` or params that are not an object, UNAVAILABLE after
    `set_connected(server, False)`, FAILED_PRECONDITION (the server's error) for an
    unknown resource or prompt. `requests` lists what plugins sent.
    """

    def __init__(self) -> None:
        self._servers: Dict[str, _McpServer] = {}
        #: Requests plugins sent, in order.
        self.requests: List[McpCall] = []

    def add_server(self, server: str) -> None:
        """Declares MCP plugin `server` (connected, nothing listed); the other seeding
        methods declare it too."""
        self._servers.setdefault(server, _McpServer())

    def servers(self) -> List[str]:
        """Names of the MCP servers, sorted."""
        return sorted(self._servers)

    def set_connected(self, server: str, connected: bool) -> None:
        """A disconnected server answers UNAVAILABLE, as the broker does while it restarts."""
        self.add_server(server)
        self._servers[server].connected = connected

    def add_resource(self, server: str, uri: str, text: str, *, name: Optional[str] = None,
                     mime_type: str = "text/plain", description: str = "") -> None:
        """A text resource: listed by `resources/list`, `text` read by `resources/read`."""
        self.add_server(server)
        s = self._servers[server]
        entry: Dict[str, Any] = {"uri": uri, "name": name or uri, "mimeType": mime_type}
        if description:
            entry["description"] = description
        s.resources = [r for r in s.resources if r["uri"] != uri] + [entry]
        s.contents[uri] = [{"uri": uri, "mimeType": mime_type, "text": text}]

    def add_prompt(self, server: str, name: str, result: Any, *, description: str = "",
                   arguments: Iterable[Union[str, Mapping[str, Any]]] = ()) -> None:
        """A prompt: listed by `prompts/list` (with `description` and `arguments`, names
        or MCP argument dicts), answered by `prompts/get`. `result` is the text of one
        user message, a list of MCP messages, a whole result dict, or a callable(arguments
        dict) → any of these."""
        self.add_server(server)
        s = self._servers[server]
        args = [{"name": a} if isinstance(a, str) else dict(a) for a in arguments]
        entry: Dict[str, Any] = {"name": name}
        if description:
            entry["description"] = description
        if args:
            entry["arguments"] = args
        s.prompts = [p for p in s.prompts if p["name"] != name] + [entry]
        s.prompt_results[name] = result

    def set_result(self, server: str, method: str, result: Optional[McpResult]) -> None:
        """Answers `method` of `server` with `result` (a JSON object, or a callable(params)
        → object) instead of the seeded resources and prompts; None removes it."""
        if method not in MCP_METHODS:
            raise ValueError(f"McpStore.set_result: `{method}` is not one of {', '.join(MCP_METHODS)}")
        self.add_server(server)
        if result is None:
            self._servers[server].results.pop(method, None)
        else:
            self._servers[server].results[method] = result

    def request(self, server: str, method: str, params: Any) -> Any:
        """Answers one request as the broker's Mcp service would (`params`: the decoded
        params, None = {}); records it in `requests`."""
        if params is None:
            params = {}
        s = self._servers.get(server)
        if s is None:
            raise StoreError("NOT_FOUND", f"no MCP plugin named {server}")
        if method not in MCP_METHODS:
            raise StoreError("INVALID_ARGUMENT", f"`{method}` is not one of {', '.join(MCP_METHODS)}")
        if not isinstance(params, dict):
            raise StoreError("INVALID_ARGUMENT", f"params of {method} must be a JSON object, "
                                                 f"got {json.dumps(params)}")
        self.requests.append(McpCall(server, method, copy.deepcopy(params)))
        if not s.connected:
            raise StoreError("UNAVAILABLE", f"MCP server {server} is not connected")
        canned = s.results.get(method)
        if canned is not None:
            return copy.deepcopy(canned(params) if callable(canned) else dict(canned))

        def failed(why: str) -> StoreError:
            return StoreError("FAILED_PRECONDITION", f"MCP server {server}: {method}: {why}")

        if method == "resources/list":
            return {"resources": copy.deepcopy(s.resources)}
        if method == "resources/templates/list":
            return {"resourceTemplates": []}
        if method == "prompts/list":
            return {"prompts": copy.deepcopy(s.prompts)}
        if method == "resources/read":
            uri = params.get("uri")
            if uri not in s.contents:
                raise failed(f"Unknown resource: {uri}")
            return {"contents": copy.deepcopy(s.contents[str(uri)])}
        name = params.get("name")
        if name not in s.prompt_results:
            raise failed(f"Unknown prompt: {name}")
        result = s.prompt_results[str(name)]
        if callable(result):
            result = result(dict(params.get("arguments") or {}))
        if isinstance(result, str):
            result = [{"role": "user", "content": {"type": "text", "text": result}}]
        if isinstance(result, list):
            entry = next(p for p in s.prompts if p["name"] == name)
            out: Dict[str, Any] = {"messages": result}
            if entry.get("description"):
                out["description"] = entry["description"]
            return copy.deepcopy(out)
        return copy.deepcopy(dict(result))


@dataclass(frozen=True)
class Injected:
    """One input a plugin injected (`sdk.inject_text` …), as the broker queues it:
    `source` and `user_id` resolved (`plugin:<name>` for the plugin itself), `channel`
    defaulted to the plugin's name, `priority` 1–4 (background 1 … critical 4)."""

    plugin: str
    method: str  # "InjectText", "InjectTextNoMemory" or "InjectInterruptText"
    source: str
    channel: str
    text: str
    user_id: str
    group_id: str
    priority: int
    no_memory: bool
    interrupt: bool


@dataclass
class FakeHost:
    """Every host service's state, in memory; seed it before loading a plugin and read
    it in assertions. Shared by all plugins a `FakeBroker` serves."""

    settings: SettingsStore = field(default_factory=SettingsStore)
    memory: GraphStore = field(default_factory=GraphStore)
    docs: DocStore = field(default_factory=DocStore)
    knowledge: KnowledgeStore = field(default_factory=KnowledgeStore)
    text_memory: TextMemoryStore = field(default_factory=TextMemoryStore)
    llm: LlmStore = field(default_factory=LlmStore)
    #: MCP servers' resources and prompts (the Mcp service).
    mcp: McpStore = field(default_factory=McpStore)
    #: Inputs injected by plugins, in order.
    injected: List[Injected] = field(default_factory=list)
