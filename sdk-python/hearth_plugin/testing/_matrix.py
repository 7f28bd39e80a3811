"""The stage permission matrix, as the broker enforces it (`broker/src/pipeline/permissions.rs`,
ported line by line; keep the two in step).

`visible(stage, context_msgs)` says which stage-specific fields a hook receives,
`view` builds the context it is sent, and `apply` takes a hook's answer: only the
fields its stage may write are kept, and the names of the other changed fields are
returned ("dropped"). `extra` is writable at every stage but after_output; user_id,
group_id, reasoning_content, token_usage, phase, memory and no_memory are read-only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, List, Sequence, cast

from ..v1 import plugin_pb2 as pb

__all__ = ["Visible", "visible", "view", "apply"]

ON_INPUT, PRE_ACTION, POST_ACTION, BEFORE_TOOLCALL, AFTER_TOOLCALL, BEFORE_OUTPUT, AFTER_OUTPUT = range(1, 8)


@dataclass(frozen=True)
class Visible:
    """The stage-specific fields a hook receives (the fields every stage sees are
    always sent)."""

    raw_message: bool = False
    context_msgs: bool = False
    memory: bool = False
    llm_text: bool = False  # and reasoning_content
    tool_calls: bool = False
    tool_results: bool = False
    final_text: bool = False


def visible(stage: int, context_msgs: bool) -> Visible:
    """What a hook of `stage` (wire number) receives; `context_msgs` False for a hook
    that declared it does not read them."""
    return Visible(
        raw_message=stage == ON_INPUT,
        context_msgs=stage == PRE_ACTION and context_msgs,
        memory=stage == PRE_ACTION,
        llm_text=stage == POST_ACTION,
        tool_calls=stage in (POST_ACTION, BEFORE_TOOLCALL),
        tool_results=stage == AFTER_TOOLCALL,
        final_text=stage in (BEFORE_OUTPUT, AFTER_OUTPUT),
    )


def view(stage: int, ctx: pb.StageContext, vis: Visible) -> pb.StageContext:
    """The context a hook of `stage` receives: `ctx` with only the `vis` fields and
    those every stage sees."""
    out = pb.StageContext(
        raw_message=ctx.raw_message if vis.raw_message else "",
        user_id=ctx.user_id,
        group_id=ctx.group_id,
        context_msgs_json=ctx.context_msgs_json if vis.context_msgs else "",
        llm_text=ctx.llm_text if vis.llm_text else "",
        reasoning_content=ctx.reasoning_content if vis.llm_text else "",
        token_usage=dict(ctx.token_usage),
        final_text=ctx.final_text if vis.final_text else "",
        phase=cast("pb.Stage", stage),
        no_memory=ctx.no_memory,
        extra_json=ctx.extra_json,
    )
    if vis.tool_calls:
        out.tool_calls.extend(ctx.tool_calls)
    if vis.tool_results:
        out.tool_results.extend(ctx.tool_results)
    if vis.memory:
        out.memory.extend(ctx.memory)
    if ctx.HasField("response"):
        out.response = ctx.response
    return out


def _parse(text: str) -> Any:
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def same_json(a: str, b: str) -> bool:
    """True when JSON texts `a` and `b` hold the same value (SDKs re-serialize JSON)."""
    return a == b or _parse(a) == _parse(b)


def _same_calls_ignoring_deny(a: Sequence[pb.ToolCallInfo], b: Sequence[pb.ToolCallInfo]) -> bool:
    return len(a) == len(b) and all(
        x.id == y.id and x.name == y.name and x.plugin == y.plugin
        and same_json(x.arguments_json, y.arguments_json) for x, y in zip(a, b))


def _deny_changed(current: Sequence[pb.ToolCallInfo], proposed: Sequence[pb.ToolCallInfo]) -> bool:
    for p in proposed:
        c = next((c for c in current if c.id == p.id), None)
        deny, reason = (c.deny, c.deny_reason) if c is not None else (False, "")
        if (p.deny, p.deny_reason) != (deny, reason):
            return True
    return False


def _response(ctx: pb.StageContext) -> Any:
    return ctx.response if ctx.HasField("response") else None


def apply(stage: int, vis: Visible, current: pb.StageContext, proposed: pb.StageContext) -> List[str]:
    """Applies the writes of `proposed` (a hook's answer) to `current` as `stage`
    allows; returns the names of the fields whose changes were dropped. Only the
    fields the hook received are looked at."""
    dropped: List[str] = []

    def take(allowed: bool, changed: bool, name: str) -> bool:
        if changed and not allowed:
            dropped.append(name)
        return changed and allowed

    if vis.raw_message and take(stage == ON_INPUT, proposed.raw_message != current.raw_message, "raw_message"):
        current.raw_message = proposed.raw_message
    if vis.context_msgs:
        changed = not same_json(proposed.context_msgs_json, current.context_msgs_json)
        if take(stage == PRE_ACTION, changed, "context_msgs"):
            current.context_msgs_json = proposed.context_msgs_json
    if vis.llm_text and take(stage == POST_ACTION, proposed.llm_text != current.llm_text, "llm_text"):
        current.llm_text = proposed.llm_text
    if vis.tool_calls:
        calls_changed = not _same_calls_ignoring_deny(proposed.tool_calls, current.tool_calls)
        deny_changed = _deny_changed(current.tool_calls, proposed.tool_calls)
        if stage == BEFORE_TOOLCALL:
            if calls_changed or deny_changed:
                del current.tool_calls[:]
                current.tool_calls.extend(proposed.tool_calls)
        elif stage == POST_ACTION:
            take(False, deny_changed, "tool_call.deny")
            if calls_changed:
                del current.tool_calls[:]
                current.tool_calls.extend(proposed.tool_calls)
                for c in current.tool_calls:
                    c.deny = False
                    c.deny_reason = ""
        else:
            take(False, calls_changed, "tool_calls")
            take(False, deny_changed, "tool_call.deny")
    if vis.tool_results:
        a, b = proposed.tool_results, current.tool_results
        changed = len(a) != len(b) or any(
            x.call_id != y.call_id or x.name != y.name or x.plugin != y.plugin or x.success != y.success
            or not same_json(x.result_json, y.result_json) for x, y in zip(a, b))
        if take(stage == AFTER_TOOLCALL, changed, "tool_results"):
            del current.tool_results[:]
            current.tool_results.extend(proposed.tool_results)
    if vis.final_text and take(stage == BEFORE_OUTPUT, proposed.final_text != current.final_text, "final_text"):
        current.final_text = proposed.final_text
    if take(stage != AFTER_OUTPUT, _response(proposed) != _response(current), "response"):
        if proposed.HasField("response"):
            current.response = proposed.response
        else:
            current.ClearField("response")
    if take(stage != AFTER_OUTPUT, not same_json(proposed.extra_json, current.extra_json), "extra"):
        current.extra_json = proposed.extra_json
    read_only = [
        (proposed.user_id != current.user_id, "user_id"),
        (proposed.group_id != current.group_id, "group_id"),
        (vis.llm_text and proposed.reasoning_content != current.reasoning_content, "reasoning_content"),
        (dict(proposed.token_usage) != dict(current.token_usage), "token_usage"),
        (proposed.phase != current.phase, "phase"),
        (vis.memory and list(proposed.memory) != list(current.memory), "memory"),
        (proposed.no_memory != current.no_memory, "no_memory"),
    ]
    for changed, name in read_only:
        take(False, changed, name)
    return dropped
