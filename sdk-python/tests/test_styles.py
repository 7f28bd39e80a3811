"""Registration contents and result mapping of each plugin style, over a real session."""

import json
import os

from fakebroker import run

import hearth_plugin

HOMEAGENT = '''
import sys
from hearth_plugin import Plugin

print("banner: weather plugin v2 starting", flush=True)
sys.stdout.buffer.write(b"\\x00\\xff\\xfe binary junk\\n")
sys.stdout.flush()

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "城市名称"}},
    "required": ["city"],
}

class Weather(Plugin):
    def name(self):
        return "weather"

    def start(self, sdk):
        sdk.register_tool("weather_query", {"description": "查询指定城市的天气", "parameters": SCHEMA},
                          self.query)
        sdk.register_tool("weather_text", {"description": "text", "parameters": SCHEMA},
                          lambda args: "晴 25°C in " + args["city"])
        sdk.register_tool("weather_fail", {"description": "isError", "parameters": SCHEMA},
                          lambda args: {"isError": True, "content": "城市不存在: " + args["city"]})
        sdk.register_tool("weather_boom", {"description": "raises", "parameters": SCHEMA}, self.boom)

    def query(self, args):
        print("junk on stdout while handling", args, flush=True)
        return {"temp": 25, "weather": "晴", "city": args["city"]}

    async def boom(self, args):
        raise ValueError("no station for " + args["city"])
'''

LINKZONE = '''
from hearth_plugin import Plugin

metadata = {
    "name": "weather_lz",
    "version": "2.1.0",
    "triggers": [{"type": 0, "pattern": "/weather"}, {"type": "regex", "pattern": "^天气(.*)$"}],
    "ai": {
        "inject": {"usage": "查询天气信息", "format": "/weather {city}", "args": {"city": "城市名称"}},
        "tool": {
            "parameters": [
                {"name": "city", "type": "string", "description": "城市名称", "required": True,
                 "example": "北京"},
                {"name": "days", "type": "number", "description": "预报天数", "required": False,
                 "default": 1, "enum": [1, 3, 7]},
            ],
            "usage": "查询指定城市的天气信息",
            "when_to_use": "当用户询问天气时",
            "continue": True,
            "chainable": False,
            "max_calls": 3,
            "confirm": True,
            "cooldown": 2.5,
            "timeout": 30,
        },
    },
}

class WeatherPlugin(Plugin):
    async def execute_tool(self, sender, args):
        if args.get("city") == "nowhere":
            return {"success": False, "error": "城市不存在"}
        return {
            "success": True,
            "content": f"{args['city']} {args.get('days', 1)}天: 晴",
            "data": {"city": args["city"], "user": sender.user_id, "group": sender.group_id,
                     "channel": sender.channel, "session": sender.session_id},
        }

    def handle_event(self, sender):
        sender.reply("天气: " + (sender.param(0) or "?"))
        sender.reply("second reply")
'''

DECORATORS = '''
from typing import Literal, Optional

from hearth_plugin import Plugin, Sender, tool

plugin = Plugin("deco", version="0.3.0", description="decorator style")

@plugin.tool
def search(query: str, limit: int = 5, tags: list[str] = [], exact: bool = False,
           lang: Optional[str] = None, mode: Literal["fast", "deep"] = "fast") -> dict:
    """Search the notes.

    Longer explanation that is not part of the description.

    Args:
        query: What to look for.
        limit: At most this many hits,
            counted after filtering.
        tags (list[str]): Only notes with all these tags.
    """
    return {"query": query, "limit": limit, "tags": tags, "exact": exact, "lang": lang, "mode": mode}

@tool(name="ratio", description="Divide a by b.")
async def divide(a: float, b: float, sender: Sender) -> float:
    return {"value": a / b, "user": sender.user_id}

@tool
def shout(text: str) -> str:
    """Upper-case the text."""
    return text.upper()
'''

CLASS_METHODS = '''
from hearth_plugin import Plugin, tool

class Counter(Plugin):
    def __init__(self):
        super().__init__("counter")
        self.n = 0

    @tool
    def bump(self, by: int = 1) -> int:
        """Add `by` to the counter."""
        self.n += by
        return self.n
'''


def test_homeagent_registration_and_results(tmp_path):
    async def body(b):
        proc, s = await b.start_plugin(HOMEAGENT, name="weather")
        assert s.hello.protocol_version == "1.0.0"
        assert s.hello.sdk == "hearth-plugin-python"
        assert s.hello.sdk_version == hearth_plugin.__version__
        assert set(s.hello.features) >= {"cancel", "progress"}
        assert s.hello.pid == proc.pid
        reg = s.register
        assert reg.plugin.name == "weather"
        tools = {t.name: t for t in reg.tools}
        assert list(tools) == ["weather_query", "weather_text", "weather_fail", "weather_boom"]
        q = tools["weather_query"]
        assert q.description == "查询指定城市的天气"
        assert json.loads(q.parameters_json) == {
            "type": "object", "properties": {"city": {"type": "string", "description": "城市名称"}},
            "required": ["city"]}
        assert not q.HasField("ai_tool")

        r = await s.call("weather_query", {"city": "北京"})
        assert r.success and r.error == ""
        assert json.loads(r.data_json) == {"temp": 25, "weather": "晴", "city": "北京"}
        assert json.loads(r.content) == json.loads(r.data_json)
        assert "晴" in r.content  # ensure_ascii=False
        r = await s.call("weather_text", {"city": "上海"})
        assert (r.success, r.content, r.data_json) == (True, "晴 25°C in 上海", "")
        r = await s.call("weather_fail", {"city": "火星"})
        assert (r.success, r.error) == (False, "城市不存在: 火星")
        r = await s.call("weather_boom", {"city": "x"})
        assert (r.success, r.error) == (False, "ValueError: no station for x")
        r = await s.call("weather_query", {"city": "广州"})  # still serving after the exception
        assert r.success and json.loads(r.data_json)["city"] == "广州"
        r = await s.call("no_such_tool", {})
        assert not r.success and "no_such_tool" in r.error
        assert b"banner: weather plugin" in proc.stdout() and b"\xff\xfe binary junk" in proc.stdout()
        assert "ValueError: no station for x" in proc.stderr()  # traceback logged, naming the tool
        assert "weather_boom" in proc.stderr()

    run(tmp_path, body)


def test_linkzone_registration_and_results(tmp_path):
    async def body(b):
        proc, s = await b.start_plugin(LINKZONE, name="weather_lz")
        reg = s.register
        assert reg.plugin.name == "weather_lz" and reg.plugin.version == "2.1.0"
        assert len(reg.tools) == 1
        t = reg.tools[0]
        assert t.name == "weather_lz"
        assert t.parameters_json == "" and t.description == ""
        ai = t.ai_tool
        assert (ai.usage, ai.when_to_use) == ("查询指定城市的天气信息", "当用户询问天气时")
        assert ai.continue_conversation and ai.confirm
        assert ai.HasField("chainable") and ai.chainable is False
        assert (ai.max_calls, ai.cooldown_s, ai.timeout_s) == (3, 2.5, 30.0)
        city, days = ai.parameters
        assert (city.name, city.type, city.description, city.required, city.example) == \
            ("city", "string", "城市名称", True, "北京")
        assert city.default_json == "" and city.enum_json == ""
        assert (days.name, days.type, days.required) == ("days", "number", False)
        assert json.loads(days.default_json) == 1 and json.loads(days.enum_json) == [1, 3, 7]
        assert reg.HasField("inject")
        assert (reg.inject.usage, reg.inject.format, dict(reg.inject.args)) == \
            ("查询天气信息", "/weather {city}", {"city": "城市名称"})
        assert [(x.type, x.pattern) for x in reg.triggers] == [(0, "/weather"), (2, "^天气(.*)$")]

        r = await s.call("weather_lz", {"city": "北京", "days": 3},
                         sender={"user_id": "u1", "group_id": "g1", "channel": "qq", "session_id": "s9"})
        assert (r.success, r.content) == (True, "北京 3天: 晴")
        assert json.loads(r.data_json) == {"city": "北京", "user": "u1", "group": "g1",
                                           "channel": "qq", "session": "s9"}
        r = await s.call("weather_lz", {"city": "nowhere"})
        assert (r.success, r.error, r.data_json) == (False, "城市不存在", "")

        # inject mode: HandleEvent → Reply* → EventDone
        from hearth_plugin.v1 import plugin_pb2 as pb
        s.send(pb.HostMessage(handle_event=pb.HandleEvent(
            call_id=77, message="/weather 杭州", params=["杭州"], sender=pb.Sender(user_id="u1"))))
        got = [await s.next() for _ in range(3)]
        assert [m.WhichOneof("msg") for m in got] == ["reply", "reply", "event_done"]
        assert got[0].reply.call_id == 77 and got[0].reply.text == "天气: 杭州"
        assert got[2].event_done.call_id == 77 and got[2].event_done.error == ""

    run(tmp_path, body)


def test_decorator_registration_and_results(tmp_path):
    async def body(b):
        proc, s = await b.start_plugin(DECORATORS, name="deco")
        reg = s.register
        assert (reg.plugin.name, reg.plugin.version, reg.plugin.description) == \
            ("deco", "0.3.0", "decorator style")
        tools = {t.name: t for t in reg.tools}
        assert sorted(tools) == ["ratio", "search", "shout"]
        assert tools["search"].description == "Search the notes."
        assert json.loads(tools["search"].parameters_json) == {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to look for."},
                "limit": {"type": "integer", "description": "At most this many hits, counted after filtering.",
                          "default": 5},
                "tags": {"type": "array", "items": {"type": "string"},
                         "description": "Only notes with all these tags.", "default": []},
                "exact": {"type": "boolean", "default": False},
                "lang": {"type": ["string", "null"]},
                "mode": {"type": "string", "enum": ["fast", "deep"], "default": "fast"},
            },
            "required": ["query"],
            "additionalProperties": False,
        }
        assert tools["ratio"].description == "Divide a by b."
        assert json.loads(tools["ratio"].parameters_json) == {
            "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"], "additionalProperties": False}
        assert tools["shout"].description == "Upper-case the text."

        r = await s.call("search", {"query": "q", "tags": ["a"]})
        assert r.success and json.loads(r.data_json) == {
            "query": "q", "limit": 5, "tags": ["a"], "exact": False, "lang": None, "mode": "fast"}
        r = await s.call("search", {"query": "q", "lang": None})      # an explicit null is fine
        assert r.success and json.loads(r.data_json)["lang"] is None
        r = await s.call("ratio", {"a": 1, "b": 4}, sender={"user_id": "alice"})
        assert r.success and json.loads(r.data_json) == {"value": 0.25, "user": "alice"}
        r = await s.call("ratio", {"a": 1, "b": 0})
        assert (r.success, r.error) == (False, "ZeroDivisionError: division by zero")
        r = await s.call("shout", {"text": "héllo"})
        assert (r.success, r.content, r.data_json) == (True, "HÉLLO", "")
        # Unknown and missing arguments fail before the handler runs, naming them.
        r = await s.call("shout", {"text": "x", "extra": 1, "more": 2})
        assert (r.success, r.error) == (
            False, "tool shout: arguments: unknown arguments `extra`, `more` (the tool takes text)")
        r = await s.call("shout", {})
        assert (r.success, r.error) == (False, "tool shout: arguments: missing argument `text`")
        assert "tool shout" not in proc.stderr()  # not a handler failure: nothing logged

    run(tmp_path, body)


def test_decorated_methods_of_a_plugin_class(tmp_path):
    async def body(b):
        proc, s = await b.start_plugin(CLASS_METHODS, name="counter")
        assert s.register.plugin.name == "counter"
        (t,) = s.register.tools
        assert t.name == "bump" and t.description == "Add `by` to the counter."
        assert json.loads(t.parameters_json) == {
            "type": "object", "properties": {"by": {"type": "integer", "default": 1}},
            "additionalProperties": False}
        assert (await s.call("bump", {})).content == "1"
        assert (await s.call("bump", {"by": 5})).content == "6"

    run(tmp_path, body)


def test_file_without_a_plugin_is_a_clear_error(tmp_path):
    async def body(b):
        entry = b.write_plugin("X = 1\n", name="empty")
        proc = b.spawn(entry)
        assert await proc.wait() == 2
        err = proc.stderr()
        assert str(entry) in err and "no plugin found" in err

        entry = b.write_plugin("import nonexistent_module_xyz\n", name="broken")
        proc = b.spawn(entry)
        assert await proc.wait() == 2
        assert str(entry) in proc.stderr() and "nonexistent_module_xyz" in proc.stderr()

        entry = b.write_plugin(
            "from hearth_plugin import Plugin\nmetadata = {'name': 'm', 'ai': {'tool': {}}}\n"
            "class P(Plugin):\n    pass\n", name="noexec")
        proc = b.spawn(entry)
        assert await proc.wait() == 2
        assert "execute_tool" in proc.stderr() and str(entry) in proc.stderr()

        entry = b.write_plugin(
            "from hearth_plugin import Plugin\nclass P(Plugin):\n    def name(self): return 'st'\n"
            "    def start(self, sdk): raise RuntimeError('no config')\n", name="badstart")
        proc = b.spawn(entry)
        assert await proc.wait() == 2
        assert "plugin st" in proc.stderr() and "start() failed: RuntimeError: no config" in proc.stderr()

    run(tmp_path, body)


def test_missing_addr_is_a_clear_error(tmp_path):
    async def body(b):
        entry = b.write_plugin(CLASS_METHODS, name="noaddr")
        proc = b.spawn(entry, env={"HEARTH_ADDR": ""})
        assert await proc.wait() == 2
        assert "HEARTH_ADDR is not set" in proc.stderr()

    run(tmp_path, body)


def test_args_are_passed_to_the_plugin(tmp_path):
    async def body(b):
        entry = b.write_plugin(
            "import sys, os\nfrom hearth_plugin import tool\n"
            "@tool\ndef argv() -> list:\n    return [sys.argv[1:], os.getcwd()]\n", name="argv")
        b.spawn(entry)  # no args: sys.argv[1:] == []
        s = await b.session(b.procs[-1])
        await s.handshake()
        r = await s.call("argv", {})
        assert json.loads(r.content) == [[], str(entry.parent)]
        assert s.register.plugin.name == "argv"  # from the directory name of main.py

    run(tmp_path, body)
