"""The example plugins in examples/plugins/, served as the broker would serve them."""

import json
from datetime import date, datetime, timedelta, timezone

from fakebroker import EXAMPLES, run


def test_calculator_example(tmp_path):
    async def body(b):
        proc, s = await b.start_plugin(EXAMPLES / "calculator" / "main.py", name="calculator")
        reg = s.register
        assert reg.plugin.name == "calculator" and reg.plugin.version == "1.0.0"
        (t,) = reg.tools
        assert t.name == "calculator" and t.parameters_json == ""
        (p,) = t.ai_tool.parameters
        assert (p.name, p.type, p.required) == ("expression", "string", True)
        assert t.ai_tool.usage == "数学计算器"

        async def calc(expr):
            return await s.call("calculator", {"expression": expr})

        r = await calc("(2+3)*4")
        assert (r.success, r.content) == (True, "(2+3)*4 = 20")
        assert (await calc("7/2")).content == "7/2 = 3.5"
        assert (await calc("2**10 - -1 + 17 // 5 % 2")).content == "2**10 - -1 + 17 // 5 % 2 = 1026"
        assert (await calc("4/2")).content == "4/2 = 2"  # no ".0"
        r = await calc("1/0")
        assert not r.success and "division by zero" in r.error and r.error.startswith("计算错误")
        r = await calc("(2+")
        assert not r.success and "invalid syntax" in r.error
        r = await calc("__import__('os').system('true')")
        assert not r.success and "unsupported" in r.error
        r = await calc("x + 1")
        assert not r.success and "name 'x'" in r.error
        r = await calc("9**9**9")
        assert not r.success and "too large" in r.error

    run(tmp_path, body)


def test_clock_example(tmp_path):
    async def body(b):
        proc, s = await b.start_plugin(EXAMPLES / "clock" / "main.py", name="clock")
        tools = {t.name: t for t in s.register.tools}
        assert sorted(tools) == ["clock_date_diff", "clock_now"]
        assert json.loads(tools["clock_date_diff"].parameters_json)["required"] == ["start"]

        r = await s.call("clock_now", {})
        now = json.loads(r.data_json)
        got = datetime.fromisoformat(now["iso"])
        assert abs((got - datetime.now(timezone.utc)).total_seconds()) < 60
        assert now["timezone"] == "UTC"

        r = await s.call("clock_now", {"timezone": "Asia/Shanghai"})
        assert r.success and json.loads(r.data_json)["iso"].endswith("+08:00")
        r = await s.call("clock_now", {"timezone": "Mars/Olympus_Mons"})
        assert not r.success and "Mars/Olympus_Mons" in r.error

        r = await s.call("clock_date_diff", {"start": "2024-02-01", "end": "2024-03-01"})
        assert json.loads(r.data_json)["days"] == 29
        r = await s.call("clock_date_diff", {"start": "2024-12-25", "days": 10})
        d = json.loads(r.data_json)
        assert d["date"] == (date(2024, 12, 25) + timedelta(days=10)).isoformat() == "2025-01-04"
        assert d["weekday"] == "Saturday"
        r = await s.call("clock_date_diff", {"start": "2024-13-01"})
        assert not r.success and "bad date" in r.error

    run(tmp_path, body)


def test_readme_plugin_works(tmp_path):
    from fakebroker import SDK_DIR

    readme = (SDK_DIR / "README.md").read_text()
    source = readme.split("```python\n", 1)[1].split("```", 1)[0]

    async def body(b):
        proc, s = await b.start_plugin(source, name="notes")
        assert sorted(t.name for t in s.register.tools) == ["note_list", "note_put"]
        assert (await s.call("note_put", {"title": "b", "text": "longer text"})).content == "saved 'b'"
        assert (await s.call("note_put", {"title": "a", "text": "xyzxyzxyzxyzxyz"})).success
        assert json.loads((await s.call("note_list", {})).content) == ["a", "b"]
        assert json.loads((await s.call("note_list", {"order": "length"})).content) == ["b", "a"]

    run(tmp_path, body)
