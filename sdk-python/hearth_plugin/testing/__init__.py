"""Test a Hearth plugin in process, no broker needed.

`load()` imports a plugin (a file such as ``main.py``, a module, or a `Plugin`
instance or subclass; decorator, HomeAgent or LinkZone style), runs its ``start()``,
and serves it with its own session code to a `FakeBroker` on a temporary Unix socket,
which plays the broker's part: it checks the registration, checks a tool's arguments
against its JSON Schema before calling it, runs stage hooks through the permission
matrix, matches triggers, and answers host-service calls from an in-memory `FakeHost`
(settings with defs and secrets, graph memory, doc memory, text memory, knowledge, LLM
sources, input, MCP servers' resources and prompts)::

    from hearth_plugin.testing import load

    def test_calculator():
        with load("main.py") as t:
            r = t.call("calculator", {"expression": "1+1"})
            assert r.success and r.content == "1+1 = 2"

Plain pytest is enough: the sync `PluginHarness` runs its event loop in a thread. In
async tests use ``async with load_async("main.py") as t: await t.call(...)``.

- `PluginHarness.call(tool, args)` → `ToolCallResult` (success, content, error,
  data_json, data, progress); `InvalidArguments` when the args violate the schema.
- `registration` / `tools` / `hooks`: what the plugin registered (`Registration`,
  `RegisteredTool` with the JSON Schema the broker checks against, `RegisteredHook`).
- `run_stage(stage, **fields)` → `StageRun`: the context after the matrix, the
  `dropped` writes, hook `errors`, `short_circuit`.
- `handle_event(message, params)`, `trigger(text)`, `broker_event(event, text)` →
  `EventResult` (the `sender.reply` texts, the handler's error).
- `host` (`FakeHost`): read and seed the host services' state; `broker.host_calls`
  lists every host call, `broker.override(service, method, reply)` injects failures.
"""

from ._broker import ALL_CAPABILITIES, BrokerSession, FakeBroker, HostCall
from ._harness import (DEFAULT_CAPABILITIES, AsyncPluginHarness, DroppedWrite, EventResult,
                       HarnessError, HookFailure, InvalidArguments, NoTriggerMatched, PluginExited,
                       PluginHarness, ProgressReport, RegisteredHook, RegisteredTool, Registration,
                       RegistrationRejected, RejectedItem, StageRun, ToolCallResult, UnknownTool, load,
                       load_async)
from ._jsonschema import validate as validate_arguments
from ._store import (SECRET_MASK, DocStore, FakeHost, GraphStore, Injected, KnowledgeStore, LlmStore,
                     McpCall, McpStore, SettingsStore, StoreError, TextMemoryStore)
from ._triggers import Trigger

__all__ = [
    "ALL_CAPABILITIES", "DEFAULT_CAPABILITIES", "SECRET_MASK",
    "load", "load_async", "PluginHarness", "AsyncPluginHarness",
    "ToolCallResult", "ProgressReport", "Registration", "RegisteredTool", "RegisteredHook",
    "RejectedItem", "StageRun", "DroppedWrite", "HookFailure", "EventResult", "Trigger",
    "HarnessError", "InvalidArguments", "UnknownTool", "NoTriggerMatched", "PluginExited",
    "RegistrationRejected",
    "FakeBroker", "BrokerSession", "HostCall",
    "FakeHost", "SettingsStore", "GraphStore", "DocStore", "KnowledgeStore", "TextMemoryStore",
    "LlmStore", "McpStore", "McpCall", "Injected", "StoreError", "validate_arguments",
]
