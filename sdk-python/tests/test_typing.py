"""Static types: `mypy --strict` passes on the package, and sees a decorated tool's real
signature (the decorators are typed with ParamSpec, not `Any`)."""

import os
import re
import subprocess
import sys
import textwrap

import pytest
from fakebroker import SDK_DIR

pytest.importorskip("mypy", reason="mypy is not installed (pip install -e 'sdk-python[dev]')")


def mypy(*args, cwd, cache):
    env = {**os.environ, "MYPYPATH": str(SDK_DIR)}
    return subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(cache), *args],
                          cwd=str(cwd), capture_output=True, text=True, env=env, timeout=600)


def test_the_package_is_clean_under_mypy_strict(tmp_path):
    # The configuration in pyproject.toml ([tool.mypy]: strict; grpc and the generated
    # service stubs excluded) applies: mypy runs from sdk-python/.
    r = mypy("--strict", "-p", "hearth_plugin", cwd=SDK_DIR, cache=tmp_path / "cache")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Success: no issues found" in r.stdout


EXAMPLE = '''
from typing import Optional

from hearth_plugin import Plugin, Sender, StageContext, tool
from hearth_plugin.testing import ToolCallResult, load

plugin = Plugin("typed")


@plugin.tool
def add(a: int, b: int = 1) -> int:
    return a + b


@plugin.tool(name="greet", serial=True)
async def greet(name: str, sender: Sender) -> str:
    return name + sender.user_id


@tool
def shout(text: Optional[str] = None) -> str:
    return (text or "").upper()


class Counter(Plugin):
    @tool
    def bump(self, by: int = 1) -> int:
        return by

    def start(self, sdk):  # type: ignore[no-untyped-def]
        sdk.register_stage("on_input", self.hook)

    async def hook(self, ctx: StageContext) -> None:
        ctx.raw_message = ctx.raw_message.upper()


reveal_type(add)
reveal_type(greet)
reveal_type(shout)
reveal_type(Counter().bump)
total: int = add(1, b=2)
add("1")
bad: str = add(1)
shout(text=3)


def check() -> None:
    with load(__file__) as t:
        r = t.call("add", {"a": 1})
        reveal_type(r)
        reveal_type(r.content)
'''


def test_decorated_tools_keep_their_signatures(tmp_path):
    example = tmp_path / "example.py"
    example.write_text(textwrap.dedent(EXAMPLE))
    r = mypy("--strict", "--config-file", str(SDK_DIR / "pyproject.toml"), str(example), cwd=tmp_path,
             cache=tmp_path / "cache")
    out = r.stdout
    # (mypy before 2.0 spells builtins in full: builtins.int)
    revealed = [t.replace("builtins.", "") for t in re.findall(r'Revealed type is "(.*)"', out)]
    assert revealed == [
        "def (a: int, b: int =) -> int",
        "def (name: str, sender: hearth_plugin._types.Sender) -> typing.Coroutine[Any, Any, str]",
        "def (text: str | None =) -> str",
        "def (by: int =) -> int",
        "hearth_plugin.testing._harness.ToolCallResult",
        "str",
    ], out
    errors = [line.split(": error: ")[1] for line in out.splitlines() if ": error: " in line]
    assert errors == [
        'Argument 1 to "add" has incompatible type "str"; expected "int"  [arg-type]',
        'Incompatible types in assignment (expression has type "int", variable has type "str")  [assignment]',
        'Argument "text" to "shout" has incompatible type "int"; expected "str | None"  [arg-type]',
    ], out
