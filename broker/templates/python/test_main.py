"""Tests of __NAME__, in process with hearth_plugin.testing: no broker needed."""

from pathlib import Path

import pytest

from hearth_plugin.testing import InvalidArguments, load

MAIN = Path(__file__).with_name("main.py")


def test_greets_by_name():
    with load(MAIN) as plugin:
        result = plugin.call("__TOOL__", {"name": "Ann"})
        assert result.success, result.error
        assert result.content == "Hello, Ann."
        assert plugin.call("__TOOL__", {"name": "Ann", "excited": True}).content == "Hello, Ann!"


def test_arguments_are_checked_against_the_schema_first():
    with load(MAIN) as plugin:
        with pytest.raises(InvalidArguments, match="name"):
            plugin.call("__TOOL__", {})
