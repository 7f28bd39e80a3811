"""LinkZone header comments: `ai.inject` declared at the top of a plugin file.

    \"\"\"
    @ai-triggerable true
    @ai-trigger-usage 查询天气信息
    @ai-trigger-format /weather {city}
    @ai-trigger-args {"city":"城市名称"}
    \"\"\"

The header is what comes before the first statement that is not the module docstring:
blank lines, `#` comment lines (a shebang and coding line included) and the docstring
(any quote style; read as written, escapes not processed). In it, a line whose text
(after the comment marker) starts with one of the four tags declares that field; other
lines and other `@` tags are prose. `@ai-triggerable true` (or the bare tag) turns the
block into an inject spec; `false` or no tag means none, whatever the other tags say.
The comment syntax is inject-only: `ai.tool` needs metadata. An explicit
`metadata["ai"]["inject"]` wins over the header (the loader decides; see `_loader`).

Mistakes are `HeaderError`s naming the file and line: `@ai-trigger-args` that is not a
JSON object of strings, a triggerable value other than true/false, a tag given twice,
and a triggerable header without usage or format.
"""

from __future__ import annotations

import re
from typing import Dict, Iterator, List, Optional, Tuple

_TAG = re.compile(r"@(ai-trigger(?:able|-usage|-format|-args))(?=\s|$)\s*(.*)$")
_STRING_START = re.compile(r"(?i)[rbuf]{0,2}(\"\"\"|'''|\"|')")


class HeaderError(ValueError):
    """A malformed header comment; the message names the file and the line."""


def _header_lines(text: str) -> Iterator[Tuple[int, str]]:
    """(1-based line number, text) of each header line: `#` comments without the `#`,
    docstring lines as written."""
    lines = text.splitlines()
    i = 0
    seen_docstring = False
    while i < len(lines):
        stripped = lines[i].strip()
        if not stripped or stripped.startswith("#"):
            if stripped:
                yield i + 1, stripped.lstrip("#")
            i += 1
            continue
        m = _STRING_START.match(stripped)
        if seen_docstring or m is None:
            return  # the first statement that is not the docstring ends the header
        seen_docstring = True
        quote = m.group(1)
        rest = stripped[m.end():]
        while True:
            end = rest.find(quote)
            if end >= 0:
                yield i + 1, rest[:end]
                break
            if len(quote) == 1:
                return  # not a well-formed one-line string: leave it to the import
            yield i + 1, rest
            i += 1
            if i >= len(lines):
                return
            rest = lines[i]
        i += 1


def parse_header(text: str, where: str) -> Optional[Dict[str, object]]:
    """The inject spec (`{usage, format, args}`) the header of `text` declares, or None.

    `where` names the file in errors ("plugin file /abs/main.py").
    """
    found: Dict[str, Tuple[int, str]] = {}
    for lineno, line in _header_lines(text):
        m = _TAG.search(line)
        if m is None or line[:m.start()].strip(" \t*/") != "":
            continue
        tag, value = m.group(1), m.group(2).strip()
        if tag in found:
            raise HeaderError(f"{where}: line {lineno}: @{tag} given twice "
                              f"(first on line {found[tag][0]})")
        found[tag] = (lineno, value)
    return _inject_of(found, where)


def _inject_of(found: Dict[str, Tuple[int, str]], where: str) -> Optional[Dict[str, object]]:
    args: Dict[str, str] = {}
    if "ai-trigger-args" in found:
        lineno, raw = found["ai-trigger-args"]
        args = parse_args(raw, f"{where}: line {lineno}: @ai-trigger-args")
    if "ai-triggerable" not in found:
        return None
    lineno, flag = found["ai-triggerable"]
    if flag.lower() in ("", "true"):
        pass
    elif flag.lower() == "false":
        return None
    else:
        raise HeaderError(f"{where}: line {lineno}: @ai-triggerable must be true or false, "
                          f"got '{flag}'")
    missing = [t for t in ("ai-trigger-usage", "ai-trigger-format")
               if not found.get(t, (0, ""))[1]]
    if missing:
        raise HeaderError(f"{where}: line {lineno}: @ai-triggerable true needs "
                          + " and ".join(f"@{t}" for t in missing))
    return {"usage": found["ai-trigger-usage"][1], "format": found["ai-trigger-format"][1],
            "args": args}


def parse_args(raw: str, where: str) -> Dict[str, str]:
    """`@ai-trigger-args` text → {name: description}; HeaderError unless a JSON object of strings."""
    import json

    if not raw:
        raise HeaderError(f"{where}: expected a JSON object of strings, e.g. "
                          '{"city":"城市名称"}, got nothing')
    try:
        value = json.loads(raw)
    except ValueError as e:
        raise HeaderError(f"{where}: not valid JSON ({e}): {raw}") from None
    if not isinstance(value, dict):
        raise HeaderError(f"{where}: expected a JSON object of strings, got {_json_type(value)}: {raw}")
    bad: List[str] = [k for k, v in value.items() if not isinstance(v, str)]
    if bad:
        raise HeaderError(f"{where}: argument '{bad[0]}': the description must be a string, "
                          f"got {json.dumps(value[bad[0]], ensure_ascii=False, separators=(',', ':'))}")
    return value


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def read_header(path: str) -> Optional[Dict[str, object]]:
    """The inject spec of the header of the file at `path` (None when it has none or
    cannot be read); HeaderError for a malformed header."""
    try:
        with open(path, encoding="utf-8-sig", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    if "@ai-trigger" not in text:
        return None
    return parse_header(text, f"plugin file {path}")
