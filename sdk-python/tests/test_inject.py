"""LinkZone inject mode: `@ai-trigger-*` header comments, Register's inject and triggers,
and HandleEvent → Reply* → EventDone, with the test plugins tests/plugins/lz_*.py."""

import json
import os
import shutil
import subprocess

import pytest
from fakebroker import REPO, TEST_PLUGINS, run

from hearth_plugin._header import HeaderError, parse_header

# ------------------------------------------------------------------ header parsing

WEATHER = {"usage": "查询天气信息", "format": "/weather {city}", "args": {"city": "城市名称"}}


def test_header_in_the_module_docstring():
    text = '''"""
@ai-triggerable true
@ai-trigger-usage 查询天气信息
@ai-trigger-format /weather {city}
@ai-trigger-args {"city":"城市名称"}
"""
from hearth_plugin import Plugin
'''
    assert parse_header(text, "F") == WEATHER


def test_header_in_hash_comments_around_a_docstring_with_prose():
    text = '''#!/usr/bin/env python3
# -*- coding: utf-8 -*-
# @ai-triggerable TRUE
r"""Weather plugin.

  @ai-trigger-usage 查询天气信息
  * @ai-trigger-format /weather {city}
Prose that mentions @ai-trigger-usage is not a tag, and @ai-trigger-other is ignored.
"""
# @ai-trigger-args {"city":"城市名称"}
import os
# @ai-trigger-usage after the first statement: not part of the header
'''
    assert parse_header(text, "F") == WEATHER


def test_header_one_line_docstring_bare_flag_and_no_args():
    assert parse_header('"""@ai-triggerable"""\n# @ai-trigger-usage u\n# @ai-trigger-format /u {x}\n',
                        "F") == {"usage": "u", "format": "/u {x}", "args": {}}


def test_header_without_triggerable_true_declares_nothing():
    tags = "# @ai-trigger-usage u\n# @ai-trigger-format /u\n"
    assert parse_header(tags, "F") is None
    assert parse_header("# @ai-triggerable false\n" + tags, "F") is None
    assert parse_header("import os\n# @ai-triggerable true\n" + tags, "F") is None
    assert parse_header("", "F") is None


@pytest.mark.parametrize("text, message", [
    ('# @ai-triggerable true\n# @ai-trigger-usage u\n# @ai-trigger-format f\n# @ai-trigger-args {city: 1}\n',
     "F: line 4: @ai-trigger-args: not valid JSON"),
    ('"""\n@ai-trigger-args ["city"]\n"""', 'F: line 2: @ai-trigger-args: expected a JSON object of strings, got array: ["city"]'),
    ('# @ai-trigger-args {"city": 1}', "F: line 1: @ai-trigger-args: argument 'city': the description must be a string, got 1"),
    ('# @ai-trigger-args', "F: line 1: @ai-trigger-args: expected a JSON object of strings"),
    ('# @ai-triggerable yes', "F: line 1: @ai-triggerable must be true or false, got 'yes'"),
    ('# @ai-triggerable true\n# @ai-trigger-usage u', "F: line 1: @ai-triggerable true needs @ai-trigger-format"),
    ('# @ai-trigger-usage a\n\n# @ai-trigger-usage b', "F: line 3: @ai-trigger-usage given twice (first on line 1)"),
])
def test_malformed_headers_name_the_line(text, message):
    with pytest.raises(HeaderError) as e:
        parse_header(text, "F")
    assert str(e.value).startswith(message)


HEADER_PLUGIN = '''"""A LinkZone plugin declaring inject in its header.

@ai-triggerable true
@ai-trigger-usage 查询天气信息
@ai-trigger-format /weather {city}
@ai-trigger-args {"city":"城市名称"}
"""
from hearth_plugin import Plugin

metadata = {"name": "hw", "triggers": [{"type": 0, "pattern": "/weather"}]%s}

class P(Plugin):
    def handle_event(self, sender):
        sender.reply("weather of " + sender.param(0))
'''


def test_header_comments_reach_register_and_explicit_metadata_wins(tmp_path):
    async def body(b):
        proc, s = await b.start_plugin(HEADER_PLUGIN % "", name="hw")
        reg = s.register
        assert reg.HasField("inject") and not reg.tools
        assert (reg.inject.usage, reg.inject.format, dict(reg.inject.args)) == \
            ("查询天气信息", "/weather {city}", {"city": "城市名称"})
        assert [(t.type, t.pattern) for t in reg.triggers] == [(0, "/weather")]
        assert await s.event("/weather 北京", ["北京"]) == (["weather of 北京"], "")

        explicit = ', "ai": {"inject": {"usage": "meta usage", "format": "/weather {place}"}}'
        proc, s = await b.start_plugin(HEADER_PLUGIN % explicit, name="hw2")
        assert (s.register.inject.usage, s.register.inject.format, dict(s.register.inject.args)) == \
            ("meta usage", "/weather {place}", {})

        off = (HEADER_PLUGIN % "").replace("@ai-triggerable true", "@ai-triggerable false")
        proc, s = await b.start_plugin(off, name="hw3")
        assert not s.register.HasField("inject")
        assert [(t.type, t.pattern) for t in s.register.triggers] == [(0, "/weather")]

    run(tmp_path, body)


def test_malformed_header_args_fail_the_load_naming_file_and_line(tmp_path):
    async def body(b):
        source = (HEADER_PLUGIN % "").replace('{"city":"城市名称"}', '{"city": 城市名称}')
        entry = b.write_plugin(source, name="badhdr")
        proc = b.spawn(entry)
        assert await proc.wait() == 2
        err = proc.stderr()
        assert f"plugin file {entry}: line 6: @ai-trigger-args: not valid JSON" in err, err

    run(tmp_path, body)


# ------------------------------------------------------------------ HandleEvent round trips

EVENTS = '''
import asyncio, json
from hearth_plugin import Plugin

metadata = {"name": "ev", "triggers": [{"type": 0, "pattern": "/ev"}, {"type": "keyword", "pattern": "ping"}],
            "ai": {"inject": {"usage": "events", "format": "/ev {what}"}}}

class Ev(Plugin):
    %(def)s handle_event(self, sender):
        what = sender.param(0)
        if what == "several":
            for i in range(3):
                %(await)ssender.reply(f"part {i}")
                %(pause)s
        elif what == "boom":
            %(await)ssender.reply("before the error")
            raise ValueError("no such thing: " + str(sender.param(1)))
        elif what == "silent":
            pass
        elif what == "json":
            sender.reply({"k": [1, "二"]})
        else:
            %(await)ssender.reply(json.dumps({
                "p0": sender.param(0), "p1": sender.param(1), "p9": sender.param(9),
                "neg": sender.param(-1), "message": sender.message, "params": sender.params,
                "user": sender.user_id, "group": sender.group_id, "channel": sender.channel,
            }, ensure_ascii=False))
'''


@pytest.mark.parametrize("style", ["sync", "async"])
def test_handle_event_round_trips(tmp_path, style):
    source = EVENTS % ({"def": "def", "await": "", "pause": "pass"} if style == "sync" else
                       {"def": "async def", "await": "await ", "pause": "await asyncio.sleep(0.01)"})

    async def body(b):
        proc, s = await b.start_plugin(source, name="ev")
        assert [(t.type, t.pattern) for t in s.register.triggers] == [(0, "/ev"), (1, "ping")]
        assert s.register.inject.format == "/ev {what}"

        replies, error = await s.event("/ev 中文 参数", ["中文", "参数"],
                                       sender={"user_id": "u1", "group_id": "g1", "channel": "qq"})
        assert error == "" and len(replies) == 1
        assert json.loads(replies[0]) == {
            "p0": "中文", "p1": "参数", "p9": None, "neg": None, "message": "/ev 中文 参数",
            "params": ["中文", "参数"], "user": "u1", "group": "g1", "channel": "qq"}
        replies, error = await s.event("ping", [], trigger=(1, "ping"))
        assert error == "" and json.loads(replies[0])["p0"] is None  # no params: None, not ""

        assert await s.event("/ev several", ["several"]) == (["part 0", "part 1", "part 2"], "")
        assert await s.event("/ev silent", ["silent"]) == ([], "")
        assert await s.event("/ev boom x", ["boom", "x"]) == \
            (["before the error"], "ValueError: no such thing: x")
        assert await s.event("/ev json", ["json"]) == (['{"k": [1, "二"]}'], "")

        # Several events in flight at once: each call's replies stay in order, matched by id.
        ids = [s.handle_event("/ev several", ["several"]) for _ in range(5)]
        done = await s.events(ids)
        assert all(done[i] == (["part 0", "part 1", "part 2"], "") for i in ids)
        assert proc.proc.poll() is None

    run(tmp_path, body)


def test_handle_event_without_a_handler_is_an_event_error(tmp_path):
    source = '''
from hearth_plugin import Plugin
metadata = {"name": "nohandler", "triggers": [{"type": 0, "pattern": "/x"}]}
class P(Plugin):
    pass
'''

    async def body(b):
        proc, s = await b.start_plugin(source, name="nohandler")
        replies, error = await s.event("/x", [])
        assert replies == [] and "has no handle_event" in error

    run(tmp_path, body)


# ------------------------------------------------------------------ LinkZone test plugins

CASES = json.loads((TEST_PLUGINS / "lz_translate_cases.json").read_text(encoding="utf-8"))["cases"]


def test_lz_translate_declares_inject_in_its_header_and_translates(tmp_path):
    async def body(b):
        proc, s = await b.start_plugin(TEST_PLUGINS / "lz_translate.py", name="translate")
        reg = s.register
        assert reg.plugin.name == "translate" and not reg.tools
        assert [(t.type, t.pattern) for t in reg.triggers] == [(0, "/translate")]
        assert (reg.inject.usage, reg.inject.format, dict(reg.inject.args)) == (
            "翻译文本到指定语言", "/translate {text} {lang}",
            {"text": "要翻译的文本", "lang": "目标语言（如 en、ja、zh）"})
        for case in CASES:
            got = await s.event(" ".join(["/translate", *case["params"]]), case["params"])
            assert got == (case["replies"], case["error"]), case

    run(tmp_path, body)


def node_weather(calls, today):
    """What examples/plugins/weather/index.js answers: [(content or error, reply)]."""
    script = r'''
const W = require(process.argv[1]);
const w = new W();
(async () => {
  const out = [];
  for (const [city, days] of JSON.parse(process.argv[2])) {
    let data, text;
    try { data = JSON.stringify(await w.fetchWeather(city, days)); } catch (e) { data = `${e.name}: ${e.message}`; }
    try { text = w.formatWeather(await w.fetchWeather(city)); } catch (e) { text = `${e.name}: ${e.message}`; }
    out.push([data, text]);
  }
  process.stdout.write(JSON.stringify(out));
})();
'''
    node = shutil.which("node")
    if node is None or not (REPO / "node_modules" / "hearth-plugin").exists():
        pytest.skip("node or the npm workspace (npm ci) is missing")
    r = subprocess.run([node, "-e", script, str(REPO / "examples/plugins/weather/index.js"),
                        json.dumps(calls)], capture_output=True, text=True, timeout=30,
                       env={**os.environ, "WEATHER_TODAY": today})
    assert r.returncode == 0, r.stderr
    return [tuple(x) for x in json.loads(r.stdout)]


WEATHER_CALLS = [["北京", 1], ["上海市", 3], ["Harbin", 7], ["悉尼", 2], ["london", None],
                 ["火星", 1], ["", 1], ["东京", 8], ["纽约", 2.5]]


@pytest.mark.parametrize("today", ["2024-01-15", "2025-07-20", "2024-02-30"])
def test_lz_weather_answers_like_the_node_example(tmp_path, today):
    expected = node_weather(WEATHER_CALLS, today)

    async def body(b):
        proc, s = await b.start_plugin(TEST_PLUGINS / "lz_weather.py", name="weather",
                                       env={"WEATHER_TODAY": today})
        reg = s.register
        assert reg.plugin.name == "weather"
        (tool,) = reg.tools
        assert tool.name == "weather" and tool.parameters_json == ""
        assert [(p.name, p.type, p.required) for p in tool.ai_tool.parameters] == \
            [("city", "string", True), ("days", "number", False)]
        assert tool.ai_tool.when_to_use == "当用户询问天气、气温、是否下雨等问题时"
        assert (reg.inject.usage, reg.inject.format, dict(reg.inject.args)) == \
            ("查询天气信息", "/weather {city}", {"city": "城市名称"})
        assert [(t.type, t.pattern) for t in reg.triggers] == [(0, "/weather")]

        for (city, days), (data, text) in zip(WEATHER_CALLS, expected):
            args = {"city": city} if days is None else {"city": city, "days": days}
            r = await s.call("weather", args)
            if data.startswith("{"):
                assert (r.success, r.content) == (True, data)
            else:
                assert (r.success, r.error) == (False, data)
            replies, error = await s.event(f"/weather {city}", [city] if city else [])
            if text.endswith("（离线示例数据）"):
                assert (replies, error) == ([text], "")
            else:
                assert (replies, error) == ([], text)

    run(tmp_path, body)
