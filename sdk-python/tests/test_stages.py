"""HomeAgent stage hooks (Register → RunStage → StageResult) and host-service clients
(sdk.inject_text … reaching the fake broker's Input service with the token)."""

import asyncio
import json

from fakebroker import run

from hearth_plugin.v1 import plugin_pb2 as pb

HOOKS = '''
import threading
from hearth_plugin import HostError, Plugin, Stage, StageContext

class Hooks(Plugin):
    def name(self):
        return "hooks"

    def start(self, sdk):
        self.sdk = sdk
        sdk.inject_text_no_memory("", "boot", "started")        # host call from start()
        any_args = {"type": "object"}
        sdk.register_tool("hooks_sync", {"description": "d", "parameters": any_args}, self.sync_tool)
        sdk.register_tool("hooks_async", {"description": "d", "parameters": any_args}, self.async_tool)
        sdk.register_stage("on_input", self.on_input)                  # plain: thread pool
        sdk.register_stage(Stage.PRE_ACTION, self.pre_action)          # async
        sdk.register_stage_own_tools(Stage.BEFORE_TOOLCALL, self.deny)
        sdk.register_stage("post_action", self.boom)
        sdk.register_stage("before_output", self.replace)
        sdk.register_stage("pre_action", self.quiet, context_msgs=False)

    def on_input(self, ctx):
        assert threading.current_thread() is not threading.main_thread()
        if ctx.user_id == "blocked_user":
            ctx.response = "已被限制使用"
        ctx.raw_message = ctx.raw_message.upper()

    async def pre_action(self, ctx):
        ctx.context_msgs.append({"role": "system", "content": "当前时间: 12:00"})
        ctx.extra["recalled"] = [(m.role, m.content, m.score) for m in ctx.memory]
        ctx.extra["phase"] = ctx.phase
        ctx.token_usage["prompt"] += 1

    def deny(self, ctx):
        for call in ctx.tool_calls:
            if call.arguments.get("path", "").startswith("/etc"):
                call.deny, call.deny_reason = True, "system files are off limits"

    def boom(self, ctx):
        raise ValueError("bad llm text")

    async def quiet(self, ctx):
        pass

    async def replace(self, ctx):
        new = StageContext(final_text=ctx.final_text + "!", phase=ctx.phase, response=None)
        return new

    def sync_tool(self, args):
        self.sdk.inject_text("", "qq", args["text"])             # blocks in the handler thread
        try:
            self.sdk.settings().get("city")
        except HostError as e:
            return {"error": str(e), "code": e.code.name, "method": e.method}
        return "served?"

    async def async_tool(self, args):
        await self.sdk.inject_interrupt_text("alarm", "cli", args["text"])
        await self.sdk.inject_text("bot", "qq", "to the group", group_id="g1", priority="message")
        await self.sdk.inject_text("bot", "qq", "to ann", user_id="ann", priority=4)
        try:
            await self.sdk.inject_text("bot", "qq", "x", priority="urgent")
        except ValueError as e:
            return str(e)
        return "no error"
'''


async def run_stage(s, call_id, stage, hook_id, **ctx):
    s.send(pb.HostMessage(run_stage=pb.RunStage(
        call_id=call_id, stage=stage, hook_id=hook_id, context=pb.StageContext(**ctx), timeout_ms=5000)))
    msg = await s.next("stage_result")
    assert msg.stage_result.call_id == call_id
    return msg.stage_result


def test_stage_hooks_register_and_round_trip(tmp_path):
    async def body(broker):
        proc, s = await broker.start_plugin(HOOKS)
        assert [(h.stage, h.own_tools_only, h.hook_id, h.no_context_msgs) for h in s.register.stages] == [
            (pb.STAGE_ON_INPUT, False, "on_input#0", False), (pb.STAGE_PRE_ACTION, False, "pre_action#1", False),
            (pb.STAGE_BEFORE_TOOLCALL, True, "before_toolcall#2", False),
            (pb.STAGE_POST_ACTION, False, "post_action#3", False),
            (pb.STAGE_BEFORE_OUTPUT, False, "before_output#4", False),
            (pb.STAGE_PRE_ACTION, False, "pre_action#5", True)]

        # on_input: block a user by setting response; raw_message rewritten
        r = await run_stage(s, 1, pb.STAGE_ON_INPUT, "on_input#0", raw_message="hi", user_id="blocked_user",
                            group_id="g", phase=pb.STAGE_ON_INPUT)
        assert r.error == ""
        assert r.context.HasField("response") and r.context.response == "已被限制使用"
        assert (r.context.raw_message, r.context.user_id, r.context.group_id) == ("HI", "blocked_user", "g")
        r = await run_stage(s, 2, pb.STAGE_ON_INPUT, "on_input#0", raw_message="ok", user_id="u")
        assert not r.context.HasField("response") and r.context.raw_message == "OK"

        # pre_action (async): context_msgs appended, every other field carried back
        msgs = [{"role": "user", "content": "几点了", "n": 1}]
        r = await run_stage(s, 3, pb.STAGE_PRE_ACTION, "pre_action#1", context_msgs_json=json.dumps(msgs),
                            token_usage={"prompt": 10, "completion": 2}, no_memory=True,
                            memory=[pb.MemItem(role="user", content="likes tea", score=0.5)],
                            extra_json='{"k": {"deep": [1, 2]}}', phase=pb.STAGE_PRE_ACTION,
                            tool_results=[pb.ToolResultInfo(call_id="c0", name="t", success=True,
                                                            result_json='{"x": 1}')])
        c = r.context
        assert r.error == "" and c.phase == pb.STAGE_PRE_ACTION and c.no_memory
        assert json.loads(c.context_msgs_json) == msgs + [{"role": "system", "content": "当前时间: 12:00"}]
        assert dict(c.token_usage) == {"prompt": 11, "completion": 2}
        assert json.loads(c.extra_json) == {"k": {"deep": [1, 2]}, "recalled": [["user", "likes tea", 0.5]],
                                            "phase": "pre_action"}
        assert [(m.role, m.content, m.score) for m in c.memory] == [("user", "likes tea", 0.5)]
        assert [(t.call_id, t.success, json.loads(t.result_json)) for t in c.tool_results] == [("c0", True, {"x": 1})]

        # before_toolcall (own tools): deny one call
        calls = [pb.ToolCallInfo(id="1", name="files_read", plugin="hooks", arguments_json='{"path": "/etc/passwd"}'),
                 pb.ToolCallInfo(id="2", name="files_read", plugin="hooks", arguments_json='{"path": "/tmp/a"}')]
        r = await run_stage(s, 4, pb.STAGE_BEFORE_TOOLCALL, "before_toolcall#2", tool_calls=calls)
        assert [(t.id, t.deny, t.deny_reason, json.loads(t.arguments_json)) for t in r.context.tool_calls] == [
            ("1", True, "system files are off limits", {"path": "/etc/passwd"}), ("2", False, "", {"path": "/tmp/a"})]

        # a handler returning a new StageContext
        r = await run_stage(s, 5, pb.STAGE_BEFORE_OUTPUT, "before_output#4", final_text="done", user_id="u")
        assert (r.error, r.context.final_text, r.context.user_id) == ("", "done!", "")

        # handler error, unknown hook: StageResult.error
        r = await run_stage(s, 6, pb.STAGE_POST_ACTION, "post_action#3", llm_text="x")
        assert r.error == "stage hook post_action#3: ValueError: bad llm text"
        r = await run_stage(s, 7, pb.STAGE_ON_INPUT, "on_input#9", raw_message="x")
        assert r.error == "plugin hooks has no stage hook 'on_input#9'"
        assert "ValueError: bad llm text" in proc.stderr()

        # the plugin still serves tools and answers pings
        await s.ping(1)

    run(tmp_path, body)


def test_inject_text_reaches_the_input_service_with_the_token(tmp_path):
    async def body(broker):
        proc, s = await broker.start_plugin(HOOKS)
        got = await asyncio.wait_for(broker.injected.get(), 10)
        assert got[0] == "InjectTextNoMemory" and got[1] == broker.token
        assert (got[2].source, got[2].channel, got[2].text) == ("hooks", "boot", "started")

        r = await s.call("hooks_sync", {"text": "你好"})
        method, token, req = await asyncio.wait_for(broker.injected.get(), 10)
        assert (method, token, req.source, req.channel, req.text) == ("InjectText", broker.token, "hooks", "qq", "你好")
        # a failed host call: a clear HostError naming the method and the broker's message
        data = json.loads(r.data_json)
        assert data["code"] == "NOT_FOUND" and data["method"] == "hearth.v1.Settings/Get"
        assert data["error"] == ("plugin hooks: settings.get (hearth.v1.Settings/Get): NOT_FOUND: "
                                 "no `city` in config_hooks")

        r = await s.call("hooks_async", {"text": "wake up"})
        assert r.success and "unknown priority 'urgent'" in r.content, r
        method, token, req = await asyncio.wait_for(broker.injected.get(), 10)
        assert (method, token, req.source, req.channel, req.text) == (
            "InjectInterruptText", broker.token, "alarm", "cli", "wake up")
        # The conversation and priority travel with the input.
        _, _, req = await asyncio.wait_for(broker.injected.get(), 10)
        assert (req.text, req.group_id, req.user_id, req.priority) == ("to the group", "g1", "", 2)
        _, _, req = await asyncio.wait_for(broker.injected.get(), 10)
        assert (req.text, req.group_id, req.user_id, req.priority) == ("to ann", "", "ann", 4)

    run(tmp_path, body)


def test_stage_registration_rules():
    from hearth_plugin import PluginSDK, Stage
    from hearth_plugin._host import build_request
    from hearth_plugin.v1 import host_pb2

    sdk = PluginSDK("p")
    sdk.register_stage(3, lambda ctx: None)                      # wire number
    sdk.register_stage("AFTER_OUTPUT", lambda ctx: None)
    assert [(h.hook_id, h.stage) for h in sdk._stages] == [("post_action#0", Stage.POST_ACTION),
                                                           ("after_output#1", Stage.AFTER_OUTPUT)]
    for bad in ("on_output", 0, 8, None):
        try:
            sdk.register_stage(bad, lambda ctx: None)
            raise AssertionError(f"accepted {bad!r}")
        except ValueError as e:
            assert "unknown stage" in str(e)
    sdk._started = True
    try:
        sdk.register_stage_own_tools("before_toolcall", lambda ctx: None)
        raise AssertionError("accepted after start()")
    except RuntimeError as e:
        assert "only be registered in start()" in str(e)
    assert sdk.host.settings is sdk.host.settings and "get_core" in dir(sdk.host.settings)
    assert sdk.settings() is sdk.settings() and type(sdk.settings()).__name__ == "SettingsAPI"
    try:
        sdk.settings().get("k")
        raise AssertionError("host call without a broker")
    except RuntimeError as e:
        assert "only available while the plugin is served" in str(e)
    # request building: positional first field, dict, keywords, message
    assert build_request(host_pb2.KeyRequest, ("k",), {"plugin": "qq"}, "w") == host_pb2.KeyRequest(key="k", plugin="qq")
    assert build_request(host_pb2.DocQuery, ({"text": "t"},), {"top_k": 3}, "w") == host_pb2.DocQuery(text="t", top_k=3)
    assert build_request(host_pb2.Empty, (), {}, "w") == host_pb2.Empty()
    try:
        build_request(host_pb2.KeyRequest, (), {"nope": 1}, "settings.get")
        raise AssertionError("accepted an unknown field")
    except TypeError as e:
        assert str(e).startswith("settings.get: bad request KeyRequest")


def test_readme_stage_and_host_examples(tmp_path):
    from fakebroker import SDK_DIR

    blocks = (SDK_DIR / "README.md").read_text().split("```python\n")[1:]
    guard = next(b.split("```", 1)[0] for b in blocks if "class Guard" in b)
    reminder = next(b.split("```", 1)[0] for b in blocks if "class Reminder" in b)

    async def body(broker):
        _, s = await broker.start_plugin(guard, name="guard")
        assert [h.hook_id for h in s.register.stages] == ["on_input#0", "pre_action#1"]
        r = await run_stage(s, 1, pb.STAGE_ON_INPUT, "on_input#0", user_id="blocked_user")
        assert r.context.response == "已被限制使用"
        r = await run_stage(s, 2, pb.STAGE_PRE_ACTION, "pre_action#1", context_msgs_json="[]")
        (msg,) = json.loads(r.context.context_msgs_json)
        assert msg["role"] == "system" and msg["content"].startswith("当前时间: ")

        _, s = await broker.start_plugin(reminder, name="reminder")
        r = await s.call("remind", {"text": "喝水"})
        assert not r.success and "NOT_FOUND: no `city` in config_reminder" in r.error
        got = await asyncio.wait_for(broker.injected.get(), 10)
        assert (got[0], got[2].source, got[2].text) == ("InjectText", "reminder", "提醒: 喝水")
        assert (await s.call("alarm", {"text": "起床"})).content == "ok"
        got = await asyncio.wait_for(broker.injected.get(), 10)
        assert (got[0], got[2].channel, got[2].text) == ("InjectInterruptText", "cli", "⏰ 起床")

    run(tmp_path, body)


def test_context_fields_a_hook_does_not_use_go_back_untouched():
    from hearth_plugin._stages import from_wire, to_wire
    wire = pb.StageContext(raw_message="hi", context_msgs_json='[ {"role": "user", "content": "hi"} ]',
                           extra_json='{ "k": 1 }', token_usage={"prompt": 3}, phase=pb.STAGE_PRE_ACTION,
                           tool_calls=[pb.ToolCallInfo(id="1", name="t", arguments_json='{ "a": 1 }')])
    ctx = from_wire(wire)
    ctx.raw_message = "changed"
    w = to_wire(ctx)
    assert (w.context_msgs_json, w.extra_json, w.raw_message) == (wire.context_msgs_json, wire.extra_json, "changed")
    assert w.tool_calls[0].arguments_json == '{ "a": 1 }' and dict(w.token_usage) == {"prompt": 3}
    # A field read and changed in place, or replaced, is encoded again; the others are not.
    ctx = from_wire(wire)
    ctx.context_msgs.append({"role": "system", "content": "x"})
    ctx.extra = {"k": 2}
    w = to_wire(ctx)
    assert json.loads(w.context_msgs_json) == [{"role": "user", "content": "hi"}, {"role": "system", "content": "x"}]
    assert json.loads(w.extra_json) == {"k": 2}
    assert w.tool_calls[0].arguments_json == '{ "a": 1 }'
    assert ctx == from_wire(to_wire(ctx)) and "context_msgs=" in repr(ctx)
