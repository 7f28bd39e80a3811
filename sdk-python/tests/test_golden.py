"""The broker's rules that `hearth_plugin.testing` copies, checked against the golden files
in the repository's tests/golden/, which the broker's own tests check the broker against
(broker/src/golden.rs). A change of a rule in the broker fails there until the golden file
is regenerated, and then here until the copy follows:

- setting-types.json: the type check of a setting value against its ConfigDef
  (`_store.check_setting`, the broker's `ConfigDef::check`);
- stage-permissions.json: the stage permission matrix (`_matrix`, the broker's
  pipeline/permissions.rs);
- triggers.json: trigger compiling and matching (`_triggers`, the broker's triggers/).

Skipped when the golden files are not there (an SDK copied out of the repository).
"""

import json
from pathlib import Path

import pytest

from hearth_plugin.testing import _matrix
from hearth_plugin.testing._store import SettingsStore, StoreError, check_setting, json_loads, json_text
from hearth_plugin.testing._triggers import Trigger, compile_trigger, match_event, match_message
from hearth_plugin.v1 import plugin_pb2 as pb

GOLDEN = Path(__file__).resolve().parents[2] / "tests" / "golden"


def golden(name):
    path = GOLDEN / name
    if not path.is_file():
        pytest.skip(f"{path} not found (run from the Hearth repository)")
    return json.loads(path.read_text(encoding="utf-8"))


# ------------------------------------------------------------------ setting types


def test_setting_types_match_the_broker():
    cases = golden("setting-types.json")["cases"]
    assert len(cases) > 20
    wrong = []
    for c in cases:
        value = json_loads(c["value_json"])
        got = check_setting({"type": c["type"], "secret": c["secret"]}, value)
        if got != c["error"]:
            wrong.append(f"{c}: got {got!r}")
    assert not wrong, "\n".join(wrong)


def test_a_refused_setting_names_key_and_scope_and_writes_nothing():
    for c in golden("setting-types.json")["cases"]:
        for scope, where in ((None, "core"), ("weather", "plugin weather")):
            s = SettingsStore()
            s.register_def(scope, {"key": "k", "type": c["type"], "secret": c["secret"]})
            value = json_loads(c["value_json"])
            if c["error"] is None:
                s.set(scope, "k", value)
                assert json_text(s.get(scope, "k")) == json_text(value)
                continue
            with pytest.raises(StoreError) as e:
                s.set(scope, "k", value)
            assert (e.value.code, e.value.message) == ("INVALID_ARGUMENT", f"setting `k` of {where}: {c['error']}")
            with pytest.raises(StoreError):
                s.get(scope, "k")


# ------------------------------------------------------------------ permission matrix

STAGES = {"on_input": 1, "pre_action": 2, "post_action": 3, "before_toolcall": 4, "after_toolcall": 5,
          "before_output": 6, "after_output": 7}


def full_context(stage):
    return pb.StageContext(
        raw_message="hi", user_id="u", group_id="g", context_msgs_json='[{"role":"user","content":"hi"}]',
        llm_text="text", reasoning_content="why", token_usage={"total": 1},
        tool_calls=[pb.ToolCallInfo(id="c1", name="t", plugin="p", arguments_json="{}")],
        tool_results=[pb.ToolResultInfo(call_id="c1", name="t", plugin="p", success=True, result_json="1")],
        final_text="final", response="earlier", phase=stage,
        memory=[pb.MemItem(role="user", content="m", score=1.0)], no_memory=True, extra_json='{"a":1}')


def _response(c):
    return c.response if c.HasField("response") else None


FIELD_OF = {
    "raw_message": lambda c: c.raw_message,
    "user_id": lambda c: c.user_id,
    "group_id": lambda c: c.group_id,
    "context_msgs": lambda c: c.context_msgs_json,
    "llm_text": lambda c: c.llm_text,
    "reasoning_content": lambda c: c.reasoning_content,
    "token_usage": lambda c: dict(c.token_usage),
    "tool_calls": lambda c: list(c.tool_calls),
    "tool_call.deny": lambda c: list(c.tool_calls),
    "tool_results": lambda c: list(c.tool_results),
    "final_text": lambda c: c.final_text,
    "response": _response,
    "phase": lambda c: c.phase,
    "memory": lambda c: list(c.memory),
    "no_memory": lambda c: c.no_memory,
    "extra": lambda c: c.extra_json,
}


def write_field(sent, field):
    """A hook's answer: what it was sent with `field` written (a list it was not sent
    gets an entry)."""
    c = pb.StageContext()
    c.CopyFrom(sent)
    if field == "raw_message":
        c.raw_message = "changed"
    elif field == "user_id":
        c.user_id = "mallory"
    elif field == "group_id":
        c.group_id = "other"
    elif field == "context_msgs":
        c.context_msgs_json = '[{"role":"system","content":"x"}]'
    elif field == "llm_text":
        c.llm_text = "changed"
    elif field == "reasoning_content":
        c.reasoning_content = "changed"
    elif field == "token_usage":
        c.token_usage["total"] = 9
    elif field == "tool_calls":
        if c.tool_calls:
            c.tool_calls[0].arguments_json = '{"a":1}'
        else:
            c.tool_calls.append(pb.ToolCallInfo(id="new", name="t", arguments_json="{}"))
    elif field == "tool_call.deny":
        if c.tool_calls:
            c.tool_calls[0].deny, c.tool_calls[0].deny_reason = True, "no"
        else:
            c.tool_calls.append(pb.ToolCallInfo(id="new", deny=True, deny_reason="no"))
    elif field == "tool_results":
        if c.tool_results:
            c.tool_results[0].result_json = "2"
        else:
            c.tool_results.append(pb.ToolResultInfo(call_id="new", result_json="2"))
    elif field == "final_text":
        c.final_text = "changed"
    elif field == "response":
        c.response = "changed"
    elif field == "phase":
        c.phase = c.phase % 7 + 1
    elif field == "memory":
        if c.memory:
            c.memory[0].content = "changed"
        else:
            c.memory.append(pb.MemItem(role="user", content="changed", score=1.0))
    elif field == "no_memory":
        c.no_memory = not c.no_memory
    elif field == "extra":
        c.extra_json = '{"k":1}'
    else:
        raise AssertionError(field)
    return c


def differs(field, before, after):
    if field == "tool_call.deny":
        return any((a.deny, a.deny_reason) != (b.deny, b.deny_reason)
                   for a, b in zip(before.tool_calls, after.tool_calls))
    return FIELD_OF[field](before) != FIELD_OF[field](after)


def test_the_permission_matrix_matches_the_broker():
    g = golden("stage-permissions.json")
    assert sorted(g["fields"]) == sorted(FIELD_OF), "a StageContext field the test does not know"
    assert [(h["stage"], h["no_context_msgs"]) for h in g["hooks"]] == \
        [(s, False) for s in STAGES] + [("pre_action", True)]
    wrong = []
    for hook in g["hooks"]:
        stage = STAGES[hook["stage"]]
        vis = _matrix.visible(stage, not hook["no_context_msgs"])
        for field in g["fields"]:
            full = full_context(stage)
            sent = _matrix.view(stage, full, vis)
            visible = FIELD_OF[field](sent) == FIELD_OF[field](full)
            current = pb.StageContext()
            current.CopyFrom(full)
            dropped = _matrix.apply(stage, vis, current, write_field(sent, field))
            kept = differs(field, full, current)
            want = hook["fields"][field]
            where = f"{hook['stage']} (no_context_msgs {hook['no_context_msgs']}) {field}"
            if {"visible": visible, "kept": kept} != want:
                wrong.append(f"{where}: golden {want}, harness visible {visible} kept {kept}")
            if dropped != ([field] if visible and not kept else []):
                wrong.append(f"{where}: reported {dropped}")
    assert not wrong, "\n".join(wrong)


# ------------------------------------------------------------------ triggers


def test_trigger_matching_matches_the_broker():
    cases = golden("triggers.json")["cases"]
    assert len(cases) > 20
    wrong = []
    for c in cases:
        triggers = [Trigger(t, p) for t, p in c["triggers"]]
        compiled = []
        for t in triggers:
            why = compile_trigger(t)
            compiled.append(why.split(":", 1)[0] if why is not None and t.type == 2 else why)
        kept = [t for t, why in zip(triggers, compiled) if why is None]
        if "event" in c:
            m = match_event(kept, c["event"], c["message"])
        else:
            m = match_message(kept, c["message"])
        got = None if m is None else {"trigger": triggers.index(m.trigger), "params": m.params}
        if compiled != c["compiled"]:
            wrong.append(f"{c['triggers']}: compiled {compiled}, golden {c['compiled']}")
        if got != c["match"]:
            wrong.append(f"{c['triggers']} {c['message']!r}: matched {got}, golden {c['match']}")
    assert not wrong, "\n".join(wrong)
