"""LinkZone trigger matching as the broker does it (`broker/src/triggers/mod.rs`, ported;
keep the two in step): which registered trigger a message matches and the parameters
`sender.param(i)` then returns.

| type | name    | matches when                                              | params                          |
|------|---------|-----------------------------------------------------------|---------------------------------|
| 0    | command | the message is `pattern` or starts with `pattern` + space | the words after the command     |
| 1    | keyword | the message contains `pattern` (case-insensitive)         | the words without `pattern`     |
| 2    | regex   | the regular expression finds a match                      | its groups, else the whole match|
| 3    | segment | one segment of the message equals `pattern` (case-insens.)| the other segments, in order    |
| 4    | event   | the broker emits the event `pattern` (`*` = every event)  | the event's text                |

Words split at whitespace, a double-quoted run being one word (`\\"` inside). Whitespace
is Rust's (`char::is_whitespace`, Unicode White_Space: not `str.isspace`, which also
takes \\x1c-\\x1f), and a keyword is cut out of the message only when lower-casing kept
its UTF-8 length, as the broker does. Regexes are Python's `re` here and Rust's `regex`
in the broker: keep to their common syntax. The golden file tests/golden/triggers.json
holds cases the broker and this copy are both checked against.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from typing import List, Optional

__all__ = ["EVENTS", "Trigger", "TriggerMatch", "compile_trigger", "match_message", "match_event", "words"]

#: Broker events a type-4 trigger can name.
EVENTS = ("message", "reply")

#: Rust's `char::is_whitespace` (the Unicode White_Space property).
_WHITESPACE = frozenset("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
                        "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
_WHITESPACE_TEXT = "".join(sorted(_WHITESPACE))
_ASCII_PUNCTUATION = frozenset(string.punctuation)


def _is_space(c: str) -> bool:
    return c in _WHITESPACE


def _trim(text: str) -> str:
    """Rust's `str::trim`."""
    return text.strip(_WHITESPACE_TEXT)


@dataclass(frozen=True)
class Trigger:
    """A registered trigger: `type` (0 command, 1 keyword, 2 regex, 3 segment, 4 event)
    and `pattern`."""

    type: int
    pattern: str


@dataclass(frozen=True)
class TriggerMatch:
    """The trigger a message matched and the parameters parsed from it."""

    trigger: Trigger
    params: List[str]


def compile_trigger(t: Trigger) -> Optional[str]:
    """None when the broker accepts `t`, else why it leaves it out."""
    pattern = _trim(t.pattern)
    if not pattern:
        return f"type {t.type} trigger with an empty pattern"
    if t.type == 2:
        try:
            re.compile(t.pattern)
        except re.error as e:
            return f"invalid regex: {e}"
    elif t.type == 4:
        if pattern != "*" and pattern not in EVENTS:
            return f"unknown event `{pattern}`; events are {', '.join(EVENTS)} or `*`"
    elif t.type not in (0, 1, 3):
        return f"unknown trigger type {t.type}; types are 0 command, 1 keyword, 2 regex, 3 segment, 4 event"
    return None


def words(text: str) -> List[str]:
    """Splits at whitespace; a double-quoted run is one word (`\\"` escapes a quote)."""
    out: List[str] = []
    cur = ""
    quoted = started = False
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and quoted and text[i + 1:i + 2] == '"':
            cur += '"'
            i += 2
            continue
        if c == '"':
            quoted = not quoted
            started = True
        elif _is_space(c) and not quoted:
            if started:
                out.append(cur)
                cur, started = "", False
        else:
            cur += c
            started = True
        i += 1
    if started:
        out.append(cur)
    return out


def _is_cjk_punct(c: str) -> bool:
    o = ord(c)
    return (0x3000 <= o <= 0x303F or 0xFF00 <= o <= 0xFF0F or 0xFF1A <= o <= 0xFF20
            or 0xFF3B <= o <= 0xFF40 or 0xFF5B <= o <= 0xFF65)


def _segments(text: str) -> List[str]:
    out: List[str] = []
    cur = ""
    for c in text:
        ascii_punct = c in _ASCII_PUNCTUATION and c not in "'-"
        if _is_space(c) or ascii_punct or _is_cjk_punct(c):
            if cur:
                out.append(cur)
            cur = ""
        else:
            cur += c
    if cur:
        out.append(cur)
    return out


def _params(t: Trigger, text: str) -> Optional[List[str]]:
    pattern = _trim(t.pattern)
    if t.type == 0:
        if not text.startswith(pattern):
            return None
        rest = text[len(pattern):]
        if rest and not _is_space(rest[0]):
            return None
        return words(rest)
    if t.type == 1:
        lower, k = text.lower(), pattern.lower()
        at = lower.find(k)
        if at < 0:
            return None
        # Lower-casing can change UTF-8 lengths (e.g. 'İ', the Kelvin sign); the broker
        # cuts the original at the lower-cased text's byte offsets only when the two
        # have the same length in bytes, else drops nothing.
        raw = text.encode()
        if len(lower.encode()) == len(raw):
            start = len(lower[:at].encode())
            end = start + len(k.encode())
            rest = raw[:start].decode(errors="replace") + " " + raw[end:].decode(errors="replace")
        else:
            rest = text
        return words(rest)
    if t.type == 2:
        m = re.search(t.pattern, text)
        if m is None:
            return None
        if m.re.groups:
            return [g or "" for g in m.groups()]
        return [m.group(0)]
    if t.type == 3:
        segs = _segments(text)
        pos = next((i for i, s in enumerate(segs) if s.lower() == pattern.lower()), None)
        if pos is None:
            return None
        return [s for i, s in enumerate(segs) if i != pos]
    return None


def match_message(triggers: List[Trigger], text: str) -> Optional[TriggerMatch]:
    """The first message trigger (types 0–3) `text` matches, in registration order."""
    text = _trim(text)
    for t in triggers:
        if t.type == 4 or compile_trigger(t) is not None:
            continue
        params = _params(t, text)
        if params is not None:
            return TriggerMatch(t, params)
    return None


def match_event(triggers: List[Trigger], event: str, text: str) -> Optional[TriggerMatch]:
    """The event trigger (type 4) for `event`, if any; its params are `[text]`."""
    for t in triggers:
        if t.type == 4 and compile_trigger(t) is None and _trim(t.pattern) in ("*", event):
            return TriggerMatch(t, [text])
    return None
