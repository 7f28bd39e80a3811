"""Every `python` block of the README runs: a plugin block loads with the test harness
(and the ones with behaviour the README states are called), a test block (one that
imports `hearth_plugin.testing`) runs its `test_*` functions next to the README's first
plugin saved as main.py."""

import re
import subprocess
import sys

import pytest
from fakebroker import SDK_DIR

from hearth_plugin import Plugin
from hearth_plugin.testing import load

README = (SDK_DIR / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"^```python\n(.*?)^```", README, flags=re.S | re.M)
TESTS = [b for b in BLOCKS if "hearth_plugin.testing" in b]
PLUGINS = [b for b in BLOCKS if "hearth_plugin.testing" not in b]

RUN_TESTS = """
import runpy, sys
ns = runpy.run_path(sys.argv[1], run_name="readme_block")
tests = [f for name, f in ns.items() if name.startswith("test_") and callable(f)]
assert tests, "the block defines no test_* function"
for f in tests:
    f()
print("ran", len(tests))
"""


def test_the_readme_has_plugin_and_test_blocks():
    assert len(PLUGINS) >= 8 and len(TESTS) >= 2
    assert BLOCKS[0].startswith("# plugins/notes/main.py")


@pytest.mark.parametrize("index", range(len(TESTS)))
def test_readme_test_blocks_pass(tmp_path, index):
    (tmp_path / "main.py").write_text(BLOCKS[0], encoding="utf-8")
    block = tmp_path / "test_block.py"
    block.write_text(TESTS[index], encoding="utf-8")
    out = subprocess.run([sys.executable, "-c", RUN_TESTS, str(block)], cwd=str(tmp_path),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, TESTS[index] + "\n" + out.stdout + out.stderr
    assert out.stdout.startswith("ran ")


@pytest.mark.parametrize("index", range(len(PLUGINS)))
def test_readme_plugin_blocks_load(tmp_path, index):
    d = tmp_path / f"block{index}"
    d.mkdir()
    path = d / "main.py"
    path.write_text(PLUGINS[index], encoding="utf-8")
    with load(path) as t:
        assert t.tools or t.hooks or t.registration.inject or t.registration.triggers
        check = CHECKS.get(t.name)
        if check is not None:
            check(t)


def check_shop(t):
    s = t.tools["order"].parameters
    assert s["properties"]["coupon"] == {"type": ["string", "null"],
                                         "description": "A coupon code (LLMs often send null when there is none)."}
    assert s["properties"]["ship_to"]["properties"]["city"] == {"type": "string", "description": "City name."}
    r = t.call("order", {"items": [{"sku": "a", "qty": 2}], "ship_to": {"city": "Oslo"}, "coupon": None})
    assert r.data == {"to": "Oslo", "items": 2, "coupon": None, "size": "m"}
    r = t.call("order", {"items": [], "ship_to": {"city": "Oslo"}, "extra": 1}, validate_args=False)
    assert r.error == "tool order: arguments: unknown argument `extra` (the tool takes items, ship_to, coupon, size)"
    r = t.call("order", {"items": [], "ship_to": {}}, validate_args=False)   # as the README says
    assert r.error == "tool order: argument `ship_to`: missing field `city`"


def check_forecast(t):
    assert t.call("forecast_days").content == "3"
    (api_key, days) = t.host.settings.defs("forecast")
    assert (api_key["secret"], days["max"]) == (True, 7)


def check_cruncher(t):
    r = t.call("crunch", {"n": 2})
    assert r.content == "done" and [p.fraction for p in r.progress] == [0.5, 1.0]


def check_weather(t):
    assert t.call("weather_query", {"city": "北京"}).data == {"temp": 25, "weather": "晴"}


def check_calculator(t):
    assert t.tools["calculator"].parameters["required"] == ["expression"]
    assert t.registration.inject["format"] == "/calc {expression}"
    assert t.trigger("/calc 1+1").replies == ["result for 1+1"]


CHECKS = {"shop": check_shop, "forecast": check_forecast, "cruncher": check_cruncher,
          "weather": check_weather, "calculator": check_calculator}


def test_every_checked_block_exists():
    names = set()
    for i, block in enumerate(PLUGINS):
        for name in CHECKS:
            if f'"{name}"' in block:
                names.add(name)
    assert names == set(CHECKS)


def test_serve_example_is_a_plugin_not_run_on_import():
    block = next(b for b in PLUGINS if "hearth_plugin.serve(plugin)" in b)
    ns = {"__name__": "not_main"}
    exec(compile(block, "<readme serve block>", "exec"), ns)
    assert isinstance(ns["plugin"], Plugin)
