"""`hearth_plugin.testing`: plugins of every style loaded in process and driven through
the public harness, sync (plain pytest) and async."""

import asyncio
import json
import textwrap

import pytest
from fakebroker import EXAMPLES, TEST_PLUGINS

from hearth_plugin import ConfigDef, MemItem, Plugin, PluginLoadError, Stage, StageContext, ToolCall, ToolResult
from hearth_plugin.testing import (SECRET_MASK, FakeHost, InvalidArguments, McpCall, NoTriggerMatched,
                                   PluginExited, RegistrationRejected, UnknownTool, load, load_async)


def write(tmp_path, source, name="main.py", manifest=None):
    d = tmp_path / "plug"
    d.mkdir(exist_ok=True)
    if manifest is not None:
        (d / "plugin.json").write_text(json.dumps(manifest))
    p = d / name
    p.write_text(textwrap.dedent(source))
    return p


DECORATED = '''
from dataclasses import dataclass
from typing import Optional

from hearth_plugin import Plugin, Sender, progress

plugin = Plugin("notes", version="2.0.0")
STOPPED = []


@dataclass
class Note:
    title: str
    tags: list[str]


@plugin.tool
def add(note: Note, pinned: Optional[bool] = None) -> dict:
    """Add a note."""
    progress("saving", 0.5)
    return {"kind": type(note).__name__, "title": note.title, "pinned": pinned}


@plugin.tool
async def whoami(sender: Sender) -> str:
    return sender.user_id + "@" + sender.channel


@plugin.tool
def boom() -> str:
    raise KeyError("nope")


def stop():
    STOPPED.append(True)

plugin.stop = stop   # a decorator-style plugin's stop(): runs at Shutdown
'''


def test_decorator_plugin_calls_validation_and_listing(tmp_path):
    path = write(tmp_path, DECORATED)
    with load(path) as t:
        assert t.name == "notes" and t.registration.plugin["version"] == "2.0.0"
        assert sorted(t.tools) == ["add", "boom", "whoami"]
        assert t.tools["add"].description == "Add a note."
        assert t.tools["add"].parameters["properties"]["note"]["required"] == ["title", "tags"]

        r = t.call("add", {"note": {"title": "a", "tags": ["x"]}, "pinned": None})
        assert r.success and r.data == {"kind": "Note", "title": "a", "pinned": None}
        assert [(p.message, p.fraction) for p in r.progress] == [("saving", 0.5)]

        with pytest.raises(InvalidArguments) as e:
            t.call("add", {"note": {"title": 1, "tags": []}})
        assert str(e.value) == 'tool add: argument `note.title`: 1 is not of type "string"'
        with pytest.raises(InvalidArguments, match=r"^tool add: arguments: \"note\" is a required property$"):
            t.call("add", {})
        with pytest.raises(InvalidArguments, match=r"Additional properties are not allowed \('colour' was unexpected\)"):
            t.call("add", {"note": {"title": "a", "tags": []}, "colour": "red"})
        with pytest.raises(UnknownTool, match="has no tool 'nope'"):
            t.call("nope")

        assert t.call("whoami", sender={"user_id": "ann", "channel": "qq"}).content == "ann@qq"
        r = t.call("boom")
        assert (r.success, r.error) == (False, "KeyError: 'nope'")
        assert t.plugin.stop.__globals__["STOPPED"] == []
    assert t.exit_code == 0                          # close() sent Shutdown: stop() ran
    assert t.plugin.stop.__globals__["STOPPED"] == [True] and sorted(t.tools) == ["add", "boom", "whoami"]
    with pytest.raises(PluginExited, match="the session has ended"):
        t.call("add", {"note": {"title": "a", "tags": []}})


def test_each_load_imports_the_file_afresh(tmp_path):
    path = write(tmp_path, "from hearth_plugin import tool\nN = []\n@tool\ndef bump() -> int:\n    N.append(1)\n    return len(N)\n")
    for _ in range(2):
        with load(path) as t:
            assert t.call("bump").content == "1"


def test_homeagent_plugin_with_settings_defs_and_secrets(tmp_path):
    source = '''
    from hearth_plugin import ConfigDef, HostError, Plugin

    class Weather(Plugin):
        def name(self):
            return "weather"

        def start(self, sdk):
            self.sdk = sdk
            s = sdk.settings()
            s.register_def(ConfigDef(key="days", type="number", display_name="Days", default=3))
            s.register_def({"key": "api_key", "display_name": "API key", "secret": True, "required": True})
            self.city_at_start = s.get("city")
            sdk.register_tool("weather_set", {"description": "set a setting",
                                              "parameters": {"type": "object"}}, self.set)
            sdk.register_tool("weather_info", {"description": "read settings"}, self.info)

        def set(self, args):
            try:
                self.sdk.settings().set(args["key"], args["value"])
            except HostError as e:
                return {"isError": True, "content": f"{e.code}: {e.details}"}
            return "ok"

        async def info(self, args):
            s = self.sdk.settings()
            return {"city": self.city_at_start, "days": await s.get("days"), "key": await s.get("api_key"),
                    "keys": await s.list(), "defs": [d.key for d in await s.defs()]}
    '''
    path = write(tmp_path, source)
    with load(path, settings={"city": "北京"}, secrets={"api_key": "sk-123"}) as t:
        assert t.call("weather_info").data == {"city": "北京", "days": 3, "key": "sk-123",
                                               "keys": ["api_key", "city", "days"], "defs": ["api_key", "days"]}
        # A value of the wrong type for a def is an error; the right type is stored.
        r = t.call("weather_set", {"key": "days", "value": "five"})
        assert (r.success, r.error) == (False, "INVALID_ARGUMENT: setting `days` of plugin weather: expected a "
                                               "number (its def's type is `number`), got \"five\" (a string)")
        assert t.call("weather_set", {"key": "days", "value": 5}).success
        assert t.host.settings.get("weather", "days") == 5
        # Secrets are masked in the dump (and for other plugins), clear for the plugin itself.
        dump = t.host.settings.dump()
        assert dump["plugins"]["weather"] == {"api_key": SECRET_MASK, "city": "北京", "days": 5}
        assert t.host.settings.get("weather", "api_key", masked=True) == SECRET_MASK


def test_setting_types_are_checked_as_the_broker_checks_them(tmp_path):
    source = '''
    import json

    from hearth_plugin import ConfigDef, HostError, Plugin

    class P(Plugin):
        def name(self):
            return "typed"

        def start(self, sdk):
            self.sdk = sdk
            s = sdk.settings()
            s.register_def(ConfigDef(key="n", type="integer", min=1, max=5))
            s.register_def(ConfigDef(key="mode", type="string", options=["a", "b"]))
            s.register_def(ConfigDef(key="pin", type="integer", secret=True))
            # The broker does not check a default against the type.
            s.register_def(ConfigDef(key="odd", type="number", default="three"))
            sdk.register_tool("put", {"description": "set", "parameters": {"type": "object"}}, self.put)

        def put(self, args):
            s = self.sdk.settings()
            scope, key, text = args["scope"], args["key"], args["json"]
            try:
                value = json.loads(text)
                if scope == "own":
                    s.set(key, value)
                elif scope == "core":
                    s.set_core(key, value)
                else:
                    s.set_plugin(scope, key, value)
            except HostError as e:
                return f"{e.code}: {e.details}"
            return "ok"
    '''
    path = write(tmp_path, source)
    host = FakeHost()
    host.settings.register_def(None, {"key": "core.port", "type": "integer", "display_name": "Port"})
    host.settings.register_def("qq", {"key": "enabled", "type": "boolean", "display_name": "On"})
    with load(path, host=host, capabilities=["settings_core", "settings_cross"]) as t:
        def put(scope, key, value):
            return t.call("put", {"scope": scope, "key": key, "json": json.dumps(value)}).content

        assert put("own", "n", 2.5) == ("INVALID_ARGUMENT: setting `n` of plugin typed: expected an integer "
                                        "(its def's type is `integer`), got 2.5 (a number with a fraction)")
        assert put("own", "n", 2.0) == "ok"  # a whole number is an integer
        # options, min and max are for a settings UI: the broker does not check them.
        assert put("own", "n", 99) == "ok"
        assert put("own", "mode", "z") == "ok"
        assert put("own", "mode", None) == "ok"  # null always fits
        assert put("own", "pin", "hunter2") == ("INVALID_ARGUMENT: setting `pin` of plugin typed: expected an "
                                                "integer (its def's type is `integer`), got a string (a secret: "
                                                "value not shown)")
        assert t.host.settings.get("typed", "odd") == "three"
        assert put("core", "core.port", "80") == ("INVALID_ARGUMENT: setting `core.port` of core: expected an "
                                                  "integer (its def's type is `integer`), got \"80\" (a string)")
        assert put("core", "core.port", 8080) == "ok"
        assert put("qq", "enabled", [True]) == ("INVALID_ARGUMENT: setting `enabled` of plugin qq: expected a "
                                                "boolean (true or false) (its def's type is `boolean`), got "
                                                "[true] (an array)")
        assert put("qq", "enabled", False) == "ok"
        assert (t.host.settings.get("typed", "n"), t.host.settings.get(None, "core.port")) == (99, 8080)


def test_seeded_settings_are_checked_against_their_defs():
    from hearth_plugin.testing import StoreError

    plugin = Plugin("seeded")

    @plugin.tool
    def ping() -> str:
        """Answer pong."""
        return "pong"

    defs = [ConfigDef(key="days", type="number")]
    with pytest.raises(StoreError) as e:
        load(plugin, defs=defs, settings={"days": "3"})
    assert (e.value.code, e.value.message) == (
        "INVALID_ARGUMENT", "setting `days` of plugin seeded: expected a number (its def's type is `number`), "
                            "got \"3\" (a string)")
    # A secret is set as `hearth settings set --secret` sets it: a key without a def
    # takes any value and gets a def with only `secret`.
    with load(plugin, secrets={"pin": 1234}) as t:
        assert t.host.settings.get("seeded", "pin") == 1234
        assert t.host.settings.defs("seeded") == [{"key": "pin", "type": "", "display_name": "", "secret": True}]
    with pytest.raises(StoreError) as e:
        load(plugin, defs=[ConfigDef(key="pin", type="integer")], secrets={"pin": "x"})
    assert e.value.message == ("setting `pin` of plugin seeded: expected an integer (its def's type is "
                               "`integer`), got \"x\" (a string)")


def test_capabilities_come_from_plugin_json_or_the_defaults(tmp_path):
    source = '''
    from hearth_plugin import HostError, Plugin

    class P(Plugin):
        def name(self):
            return "cap"

        def start(self, sdk):
            self.sdk = sdk
            sdk.register_tool("core", {"description": "read a core key"}, self.core)
            sdk.register_tool("other", {"description": "read another plugin's key"}, self.other)
            sdk.register_tool("remember", {"description": "commit a triple"}, self.remember)

        def core(self, args):
            try:
                return self.sdk.settings().get_core("llm.openai.api_key")
            except HostError as e:
                return {"isError": True, "content": str(e.code) + ": " + e.details}

        def other(self, args):
            return self.sdk.settings().get_plugin("qq", "token")

        def remember(self, args):
            return self.sdk.memory().commit([("ann", "likes", "tea")])
    '''
    core = {"llm.openai.api_key": "sk-core"}
    others = {"qq": {"token": "qq-secret"}}
    # No plugin.json: the broker's defaults (memory, knowledge, llm, input).
    with load(write(tmp_path, source), core_settings=core, plugin_settings=others) as t:
        r = t.call("core")
        assert (r.success, r.error) == (False, "PERMISSION_DENIED: plugin cap: Settings.GetCore needs capability "
                                               "`settings_core`; add it to `capabilities` in its plugin.json")
        assert t.call("remember").content == "1"
    # plugin.json grants settings_core but not settings_secrets: the credential-named key is masked.
    path = write(tmp_path, source, manifest={"capabilities": ["settings_core", "settings_cross"]})
    with load(path, core_settings=core, plugin_settings=others) as t:
        assert t.call("core").content == SECRET_MASK
        assert t.call("other").content == "qq-secret"   # no def makes it secret
        r = t.call("remember")
        assert not r.success and "Memory.Commit needs capability `memory`" in r.error
    with load(path, core_settings=core, capabilities=["settings_core", "settings_secrets"]) as t:
        assert t.call("core").content == "sk-core"


def test_linkzone_plugin_tool_events_and_triggers(tmp_path):
    with load(TEST_PLUGINS / "lz_translate.py") as t:
        reg = t.registration
        assert reg.inject == {"usage": "翻译文本到指定语言", "format": "/translate {text} {lang}",
                              "args": {"text": "要翻译的文本", "lang": "目标语言（如 en、ja、zh）"}}
        assert [(x.type, x.pattern) for x in reg.triggers] == [(0, "/translate")]
        ev = t.trigger('/translate "good morning" ja')
        assert ev.params == ["good morning", "ja"] and ev.trigger.pattern == "/translate"
        assert ev.error == "" and len(ev.replies) >= 1
        direct = t.handle_event("/translate hello en", ["hello", "en"])
        assert direct.params == ["hello", "en"] and direct.error == ""
        with pytest.raises(NoTriggerMatched, match="no trigger matches 'hello'"):
            t.trigger("hello")

    source = '''
    from hearth_plugin import Plugin

    metadata = {
        "name": "weather",
        "triggers": [{"type": 1, "pattern": "天气"}, {"type": 4, "pattern": "reply"}],
        "ai": {"tool": {"parameters": [
            {"name": "city", "type": "string", "description": "城市", "required": True},
            {"name": "days", "type": "number", "enum": [1, 3]}],
            "usage": "查询天气", "when_to_use": "用户问天气时"}},
    }

    class W(Plugin):
        def execute_tool(self, sender, args):
            return {"success": True, "content": args["city"] + " 晴", "data": {"days": args.get("days", 1)}}

        async def handle_event(self, sender):
            await sender.reply("params=" + ",".join(sender.params))
            if sender.param(0) == "boom":
                raise ValueError("bad city")
    '''
    with load(write(tmp_path, source)) as t:
        tool = t.tools["weather"]
        assert tool.description == "查询天气\nWhen to use: 用户问天气时"
        assert tool.parameters == {"type": "object", "required": ["city"], "properties": {
            "city": {"type": "string", "description": "城市"}, "days": {"type": "number", "enum": [1, 3]}}}
        r = t.call("weather", {"city": "上海", "days": 3})
        assert (r.success, r.content, r.data) == (True, "上海 晴", {"days": 3})
        with pytest.raises(InvalidArguments, match=r"argument `days`: 2 is not one of 1 or 3"):
            t.call("weather", {"city": "上海", "days": 2})
        ev = t.trigger("北京 天气 怎么样")                  # keyword: the other words are the params
        assert (ev.replies, ev.error, ev.params) == (["params=北京,怎么样"], "", ["北京", "怎么样"])
        ev = t.trigger("boom 天气")
        assert (ev.replies, ev.error) == (["params=boom"], "ValueError: bad city")
        assert t.broker_event("reply", "final text").replies == ["params=final text"]
        with pytest.raises(NoTriggerMatched):
            t.broker_event("message", "x")


HOOKS = '''
from hearth_plugin import MemItem, Plugin, Stage, ToolCall, ToolResult

def write_all(ctx):
    """Writes every field (lists it was not sent get an entry)."""
    if not ctx.tool_calls:
        ctx.tool_calls.append(ToolCall())
    ctx.raw_message = "changed"
    ctx.user_id = "mallory"
    ctx.group_id = "g"
    ctx.context_msgs = [{"role": "system", "content": "x"}]
    ctx.llm_text = "changed"
    ctx.reasoning_content = "changed"
    ctx.token_usage["total"] = 9
    ctx.tool_calls[0].arguments = {"a": 1}
    ctx.tool_calls[0].deny = True
    ctx.tool_results.append(ToolResult())
    ctx.final_text = "changed"
    ctx.response = "stop"
    ctx.phase = Stage.AFTER_OUTPUT
    ctx.memory.append(MemItem())
    ctx.no_memory = True
    ctx.extra = {"k": 1}

class Writer(Plugin):
    def name(self):
        return "writer"

    def start(self, sdk):
        for stage in Stage:
            sdk.register_stage(stage, write_all)
'''

# broker/src/pipeline/permissions.rs, `every_cell_of_the_matrix`: what each stage keeps.
ALLOWED = {
    "on_input": {"raw_message", "response", "extra"},
    "pre_action": {"context_msgs", "response", "extra"},
    "post_action": {"llm_text", "tool_calls", "response", "extra"},
    "before_toolcall": {"tool_calls", "tool_call.deny", "response", "extra"},
    "after_toolcall": {"tool_results", "response", "extra"},
    "before_output": {"final_text", "response", "extra"},
    "after_output": set(),
}
SEEN = {  # the stage-specific fields each stage's hooks receive
    "on_input": {"raw_message"}, "pre_action": {"context_msgs", "memory"},
    "post_action": {"llm_text", "reasoning_content", "tool_calls", "tool_call.deny"},
    "before_toolcall": {"tool_calls", "tool_call.deny"}, "after_toolcall": {"tool_results"},
    "before_output": {"final_text"}, "after_output": {"final_text"},
}
ALWAYS_SEEN = {"response", "extra", "user_id", "group_id", "token_usage", "no_memory"}


def base():
    return StageContext(raw_message="hi", user_id="u", context_msgs=[],
                        tool_calls=[ToolCall(id="c1", name="t", arguments={})], extra={})


def test_every_cell_of_the_permission_matrix(tmp_path):
    with load(write(tmp_path, HOOKS)) as t:
        assert [(h.hook_id, h.stage) for h in t.hooks] == [(f"{s.value}#{i}", s) for i, s in enumerate(Stage)]
        for stage in Stage:
            run = t.run_stage(stage, base())
            ctx = run.context
            kept = {
                "raw_message": ctx.raw_message == "changed",
                "context_msgs": ctx.context_msgs != [],
                "llm_text": ctx.llm_text == "changed",
                "tool_calls": ctx.tool_calls[0].arguments != {},
                "tool_call.deny": ctx.tool_calls[0].deny,
                "tool_results": ctx.tool_results != [],
                "final_text": ctx.final_text == "changed",
                "response": ctx.response is not None,
                "extra": ctx.extra != {},
            }
            seen = SEEN[stage.value] | ALWAYS_SEEN
            for f, was_kept in kept.items():
                assert was_kept == (f in ALLOWED[stage.value]), (stage, f)
                assert (f in run.dropped_fields) == (f in seen and f not in ALLOWED[stage.value]), (stage, f, run.dropped)
            for ro in ("user_id", "group_id", "reasoning_content", "token_usage", "memory", "no_memory"):
                assert (ro in run.dropped_fields) == (ro in seen), (stage, ro, run.dropped)
            assert "phase" not in run.dropped_fields and ctx.phase == stage
            assert (ctx.user_id, ctx.no_memory, ctx.token_usage) == ("u", False, {})
            assert run.errors == [] and run.ran == [f"{stage.value}#{list(Stage).index(stage)}"]
            if stage is not Stage.AFTER_OUTPUT:
                assert run.short_circuit == run.ran[0]  # response was set


ORDERED = '''
from hearth_plugin import Plugin

class Guard(Plugin):
    def name(self):
        return "guard"

    def start(self, sdk):
        sdk.register_stage("on_input", self.tag)
        sdk.register_stage("on_input", self.fail)
        sdk.register_stage("on_input", self.block)
        sdk.register_stage("on_input", self.never)
        sdk.register_stage_own_tools("before_toolcall", self.deny_rm)
        sdk.register_stage("pre_action", self.quiet, context_msgs=False)
        sdk.register_tool("rm", {"description": "remove"}, lambda args: "removed")

    async def tag(self, ctx):
        ctx.raw_message += " [seen]"
        ctx.extra["by"] = "tag"

    def fail(self, ctx):
        raise RuntimeError("flaky")

    async def block(self, ctx):
        if ctx.user_id == "blocked":
            ctx.response = "go away"
        ctx.raw_message += " [block]"

    async def never(self, ctx):
        ctx.raw_message = "unreachable for blocked users"

    def deny_rm(self, ctx):
        for call in ctx.tool_calls:
            call.deny, call.deny_reason = True, "no rm"

    async def quiet(self, ctx):
        assert ctx.context_msgs == []        # a hook that declared it does not read them
        ctx.context_msgs.append({"role": "system", "content": "ignored"})
'''


def test_stage_order_errors_short_circuit_and_own_tools(tmp_path):
    with load(write(tmp_path, ORDERED)) as t:
        run = t.run_stage("on_input", raw_message="hello", user_id="ann")
        assert run.ran == ["on_input#0", "on_input#1", "on_input#2", "on_input#3"]
        assert [(e.hook_id, e.error) for e in run.errors] == [("on_input#1", "stage hook on_input#1: RuntimeError: flaky")]
        assert run.context.raw_message == "unreachable for blocked users" and run.context.extra == {"by": "tag"}

        run = t.run_stage(Stage.ON_INPUT, StageContext(raw_message="hello", user_id="blocked"))
        assert run.short_circuit == "on_input#2" and run.ran == ["on_input#0", "on_input#1", "on_input#2"]
        assert (run.context.response, run.context.raw_message) == ("go away", "hello [seen] [block]")

        mine = [ToolCall(id="1", name="rm", arguments={"path": "/"})]
        run = t.run_stage("before_toolcall", tool_calls=mine)
        assert run.short_circuit == "before_toolcall#4" and run.context.tool_calls[0].deny_reason == "no rm"
        theirs = [ToolCall(id="2", name="ls", plugin="files", arguments={})]
        run = t.run_stage("before_toolcall", tool_calls=theirs)      # not its tool: the own-tools hook is skipped
        assert run.ran == [] and not run.context.tool_calls[0].deny

        msgs = [{"role": "user", "content": "hi"}]
        run = t.run_stage("pre_action", context_msgs=msgs)
        assert run.errors == [] and run.dropped == [] and run.context.context_msgs == msgs


def test_live_registration_updates_the_listing(tmp_path):
    source = '''
    from hearth_plugin import Plugin

    class Late(Plugin):
        def name(self):
            return "late"

        def start(self, sdk):
            self.sdk = sdk
            sdk.register_tool("late_add", {"description": "adds a tool"}, self.add)

        def add(self, args):
            self.sdk.register_tool("late_new", {"description": "new", "parameters": {
                "type": "object", "properties": {"n": {"type": "integer"}}}}, lambda a: a["n"] * 2)
            return "added"
    '''
    with load(write(tmp_path, source)) as t:
        assert list(t.tools) == ["late_add"]
        # RegisterTool is queued by the handler, before its result: listed once the call returned.
        assert t.call("late_add").content == "added"
        assert t.tools["late_new"].parameters["properties"] == {"n": {"type": "integer"}}
        assert t.call("late_new", {"n": 21}).content == "42"
        with pytest.raises(InvalidArguments):
            t.call("late_new", {"n": "x"})


def test_a_registration_the_broker_would_refuse(tmp_path):
    source = '''
    from hearth_plugin import Plugin

    metadata = {"name": "bad", "triggers": [{"type": 2, "pattern": "(unclosed"}]}

    class Bad(Plugin):
        def start(self, sdk):
            sdk.register_tool("bad_schema", {"description": "x", "parameters": {"type": "object", "required": True}},
                              lambda a: "x")
            sdk.register_tool("good", {"description": "fine"}, lambda a: "ok")
    '''
    path = write(tmp_path, source)
    with pytest.raises(RegistrationRejected) as e:
        load(path)
    assert [(i.kind, i.name) for i in e.value.items] == [("tool", "bad_schema"), ("trigger", "(unclosed")]
    assert "parameters is not a valid JSON Schema at /required" in str(e.value)
    with load(path, strict=False) as t:           # as the broker: the rest registers
        assert list(t.tools) == ["good"] and [i.kind for i in t.registration.rejected] == ["tool", "trigger"]
        assert t.call("good").content == "ok"


def test_load_errors_name_the_file(tmp_path):
    with pytest.raises(PluginLoadError, match="no plugin found"):
        load(write(tmp_path, "X = 1\n"))
    with pytest.raises(PluginLoadError, match=r"start\(\) failed: RuntimeError: no config"):
        load(write(tmp_path, "from hearth_plugin import Plugin\nclass P(Plugin):\n"
                             "    def start(self, sdk):\n        raise RuntimeError('no config')\n"))
    with pytest.raises(PluginExited, match="before Register"):
        load(write(tmp_path, "from hearth_plugin import Plugin, tool\nclass P(Plugin):\n"
                             "    hearth_after_hello = staticmethod(lambda: 7)\n"
                             "    @tool\n    def t(self) -> str:\n        return ''\n"))


class Counter(Plugin):
    """A plugin given as an object (HomeAgent style)."""

    def __init__(self):
        super().__init__("counter")
        self.n = 0

    def start(self, sdk):
        self.sdk = sdk
        sdk.register_tool("count", {"description": "count and remember"}, self.count)

    async def count(self, args):
        self.n += 1
        await self.sdk.memory().commit([("counter", "reached", str(self.n))])
        await self.sdk.inject_text("", "cli", f"count is {self.n}")
        await self.sdk.text_memory().append({"role": "assistant", "content": str(self.n)})
        await self.sdk.doc_memory().insert({"id": "d1", "title": "天气预报", "content": f"北京明天晴 {self.n}"})
        await self.sdk.knowledge().add("notes/today", "rust and python")
        return self.n


def test_async_harness_with_an_object_and_the_host_fakes():
    async def body():
        host = FakeHost()
        host.llm.sources = ["openai", "local"]
        async with load_async(Counter(), host=host) as t:
            assert (await t.call("count")).content == "1"
            assert (await t.call("count")).content == "2"
            assert t.plugin.n == 2
            entities, relations = host.memory.recall(["count"], 1)
            assert [e["name"] for e in entities] == ["counter", "1", "2"]
            assert relations == [{"source_name": "counter", "target_name": "1", "relation_type": "reached"},
                                 {"source_name": "counter", "target_name": "2", "relation_type": "reached"}]
            (inj1, inj2) = host.injected
            assert (inj2.plugin, inj2.source, inj2.user_id, inj2.channel, inj2.text, inj2.priority) == (
                "counter", "plugin:counter", "plugin:counter", "cli", "count is 2", 1)
            assert [e["content"] for e in host.text_memory.events] == ["1", "2"]
            (doc,) = host.docs.query("天气", 5)
            assert doc["id"] == "d1" and doc["content"].endswith("2") and doc["score"] > 0
            assert host.knowledge.list() == ["notes_today"]
            assert host.knowledge.search("python")[0]["name"] == "notes_today"
            assert [c.method for c in t.broker.host_calls][:5] == ["Commit", "InjectText", "Append", "Insert", "Add"]
            assert t.sdk.llm().current_source() is not None

    asyncio.run(body())


def test_examples_with_the_harness():
    with load(EXAMPLES / "calculator" / "main.py") as t:
        assert t.call("calculator", {"expression": "(2+3)*4"}).content == "(2+3)*4 = 20"
        with pytest.raises(InvalidArguments, match='argument `expression`: 12 is not of type "string"'):
            t.call("calculator", {"expression": 12})
    with load(EXAMPLES / "clock" / "main.py") as t:
        r = t.call("clock_date_diff", {"start": "2024-02-01", "end": "2024-03-01"})
        assert r.data["days"] == 29


LZ_CLASS_SOURCE = """
from hearth_plugin import Plugin

class Echo(Plugin):
    metadata = {"name": "echo_lz", "triggers": [{"type": 0, "pattern": "/echo"}],
                "ai": {"tool": {"parameters": [{"name": "text", "type": "string", "required": True}],
                                "usage": "echo"}}}

    def execute_tool(self, sender, args):
        return {"success": True, "content": args["text"]}

    def handle_event(self, sender):
        sender.reply(" ".join(sender.params))
"""


def test_a_module_or_a_plugin_class_as_the_target(tmp_path):
    import importlib.util

    path = write(tmp_path, LZ_CLASS_SOURCE, name="echo_mod.py")
    spec = importlib.util.spec_from_file_location("echo_mod_for_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with load(module) as t:                           # a module: its plugin is found as in a file
        assert t.name == "echo_lz" and t.call("echo_lz", {"text": "hi"}).content == "hi"
    with load(module.Echo) as t:                      # a Plugin subclass: instantiated
        assert t.trigger("/echo a b").replies == ["a b"]


MCP_READER = """
from hearth_plugin import HostError, Plugin

class Reader(Plugin):
    def name(self):
        return "reader"

    def start(self, sdk):
        self.sdk = sdk
        sdk.register_tool("read", {}, self.read)
        sdk.register_tool("greet", {}, self.greet)
        sdk.register_tool("probe", {}, self.probe)

    async def read(self, args):
        contents = await self.sdk.mcp().read_resource("files", args["uri"])
        return contents[0]["text"]

    def greet(self, args):
        return self.sdk.mcp().get_prompt("files", "greet", {"name": args["name"]})

    async def probe(self, args):
        mcp = self.sdk.mcp()
        try:
            return await mcp.request(args["server"], args["method"], args.get("params"))
        except HostError as e:
            return {"isError": True, "content": str(e.code) + ": " + e.details}
"""


def test_the_fake_mcp_servers_answer_canned_resources_and_prompts(tmp_path):
    host = FakeHost()
    host.mcp.add_resource("files", "test://doc/1", "hello resource", name="doc1")
    host.mcp.add_prompt("files", "greet", lambda a: f"Hello, {a['name']}!", description="Greet someone.",
                        arguments=["name"])
    host.mcp.set_result("files", "resources/templates/list", {"resourceTemplates": [{"uriTemplate": "test://doc/{id}"}]})
    host.mcp.add_server("down")
    host.mcp.set_connected("down", False)
    path = write(tmp_path, MCP_READER, manifest={"capabilities": ["mcp"]})
    with load(path, host=host) as t:
        assert t.call("read", {"uri": "test://doc/1"}).content == "hello resource"
        assert t.call("greet", {"name": "Ann"}).data == {
            "description": "Greet someone.",
            "messages": [{"role": "user", "content": {"type": "text", "text": "Hello, Ann!"}}]}
        probe = lambda server, method, params=None: t.call("probe", {"server": server, "method": method, "params": params})
        assert probe("files", "resources/list").data == {
            "resources": [{"uri": "test://doc/1", "name": "doc1", "mimeType": "text/plain"}]}
        assert probe("files", "prompts/list").data["prompts"] == [
            {"name": "greet", "description": "Greet someone.", "arguments": [{"name": "name"}]}]
        assert probe("files", "resources/templates/list").data["resourceTemplates"] == [{"uriTemplate": "test://doc/{id}"}]
        assert probe("nope", "resources/list").error == "NOT_FOUND: no MCP plugin named nope"
        assert probe("files", "tools/call").error.startswith("INVALID_ARGUMENT: `tools/call` is not one of resources/list")
        assert probe("files", "resources/read", ["x"]).error == (
            'INVALID_ARGUMENT: params of resources/read must be a JSON object, got ["x"]')
        assert probe("down", "resources/list").error == "UNAVAILABLE: MCP server down is not connected"
        assert probe("files", "resources/read", {"uri": "test://nope"}).error == (
            "FAILED_PRECONDITION: MCP server files: resources/read: Unknown resource: test://nope")
        assert host.mcp.requests[0] == McpCall("files", "resources/read", {"uri": "test://doc/1"})
        assert [c.method for c in t.broker.host_calls][:2] == ["Request", "Request"]
    # Without capability `mcp` (the broker's defaults do not grant it either).
    with load(path, host=host, capabilities=["memory", "knowledge", "llm", "input"]) as t:
        r = t.call("read", {"uri": "test://doc/1"})
        assert not r.success and "Mcp.Request needs capability `mcp`" in r.error
