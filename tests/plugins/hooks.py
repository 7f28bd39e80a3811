"""Stage-hook test plugin (Python, HomeAgent style), driven by env HOOKS.

P = $HEARTH_PLUGIN. Registers tool `P_ping` ("pong from P"). Directives (comma list):
- `noop` / `noop_async`: a hook at every stage that changes nothing (plain `def` /
  `async def`; the benchmarks' hook cost).
- `trace`: a hook at every stage appending "P:<stage>" to extra["trace"]; at
  after_output it prints `TRACE P after_output final=<final_text, newlines as \\n> trace=<json>`.
- `deny=<tool>`: before_toolcall denies calls of <tool> ("not allowed by P").
- `own`: an own-tools before_toolcall hook printing `OWN P <tool>`.
- `block=<user>`: on_input answers "blocked by P" for that user.
- `time`: pre_action appends a system message "Current time: HH:MM".
- `rewrite_output`: before_output appends " (checked by P)" to final_text.
- `rewrite_result`: after_toolcall prefixes the result content with "[seen by P] ".
- `write_all=<stage>`: at <stage>, writes every field of the context.
- `respond=<stage>`: at <stage>, sets response "short from <stage>".
- `fail=<stage>`: at <stage>, raises. `slow=<stage>`: at <stage>, sleeps 30 s.
- `blind`: a pre_action hook registered with `context_msgs=False`; prints
  `BLIND P saw=<len(ctx.context_msgs)>` and appends a system message "blind write"
  (which the broker must ignore).
Tool `P_inject {"text", "user"?, "group"?, "priority"?}` injects text on channel `test`
into that conversation (sdk.inject_text).
"""
import json
import os
import time

from hearth_plugin import Plugin

P = os.environ.get("HEARTH_PLUGIN", "hooks")
STAGES = ["on_input", "pre_action", "post_action", "before_toolcall", "after_toolcall",
          "before_output", "after_output"]


def directives():
    out = []
    for item in filter(None, os.environ.get("HOOKS", "").split(",")):
        key, _, value = item.partition("=")
        out.append((key.strip(), value.strip()))
    return out


def noop(ctx):
    pass


async def noop_async(ctx):
    pass


def write_all(ctx):
    ctx.raw_message = "changed"
    ctx.user_id = "mallory"
    ctx.group_id = "g"
    ctx.context_msgs = ctx.context_msgs + [{"role": "system", "content": "x"}]
    ctx.llm_text = "changed"
    ctx.reasoning_content = "changed"
    ctx.token_usage = dict(ctx.token_usage, total=999)
    for c in ctx.tool_calls:
        c.arguments = {"changed": True}
        c.deny = True
    ctx.final_text = "changed"
    ctx.no_memory = True
    ctx.extra = dict(ctx.extra, written_at=str(ctx.phase))
    print(f"WROTE {P} {ctx.phase}", flush=True)


class Hooks(Plugin):
    def name(self):
        return P

    def start(self, sdk):
        sdk.register_tool(f"{P}_ping", {"description": f"Answers pong from {P}.",
                                        "parameters": {"type": "object"}}, lambda args: f"pong from {P}")
        sdk.register_tool(f"{P}_inject", {"description": "Injects text.", "parameters": {"type": "object"}},
                          self.inject)
        self.sdk = sdk
        for key, value in directives():
            if key in ("noop", "noop_async"):
                for stage in STAGES:
                    sdk.register_stage(stage, noop_async if key == "noop_async" else noop)
            elif key == "trace":
                for stage in STAGES:
                    sdk.register_stage(stage, self.tracer(stage))
            elif key == "deny":
                sdk.register_stage("before_toolcall", self.denier(value))
            elif key == "own":
                sdk.register_stage_own_tools("before_toolcall", self.own)
            elif key == "block":
                sdk.register_stage("on_input", self.blocker(value))
            elif key == "time":
                sdk.register_stage("pre_action", self.add_time)
            elif key == "rewrite_output":
                sdk.register_stage("before_output", self.rewrite_output)
            elif key == "rewrite_result":
                sdk.register_stage("after_toolcall", self.rewrite_result)
            elif key == "write_all":
                sdk.register_stage(value, write_all)
            elif key == "respond":
                sdk.register_stage(value, self.responder(value))
            elif key == "fail":
                sdk.register_stage(value, self.failer(value))
            elif key == "blind":
                sdk.register_stage("pre_action", self.blind, context_msgs=False)
            elif key == "slow":
                sdk.register_stage(value, lambda ctx: time.sleep(30))
            else:
                raise ValueError(f"unknown HOOKS directive {key!r}")

    def tracer(self, stage):
        def hook(ctx):
            if stage == "after_output":
                final = ctx.final_text.replace("\n", "\\n")
                trace = json.dumps(ctx.extra.get("trace", []), separators=(",", ":"))
                print(f"TRACE {P} after_output final={final} trace={trace}", flush=True)
                return
            trace = list(ctx.extra.get("trace", []))
            trace.append(f"{P}:{stage}")
            ctx.extra = dict(ctx.extra, trace=trace)
        return hook

    async def inject(self, args):
        await self.sdk.inject_text("", "test", args["text"], user_id=args.get("user", ""),
                                   group_id=args.get("group", ""), priority=args.get("priority"))
        return "injected"

    async def blind(self, ctx):
        print(f"BLIND {P} saw={len(ctx.context_msgs)}", flush=True)
        ctx.context_msgs.append({"role": "system", "content": "blind write"})

    def denier(self, tool):
        def hook(ctx):
            for c in ctx.tool_calls:
                if c.name == tool:
                    c.deny = True
                    c.deny_reason = f"not allowed by {P}"
        return hook

    def own(self, ctx):
        for c in ctx.tool_calls:
            print(f"OWN {P} {c.name}", flush=True)

    def blocker(self, user):
        def hook(ctx):
            if ctx.user_id == user:
                ctx.response = f"blocked by {P}"
        return hook

    def add_time(self, ctx):
        ctx.context_msgs = ctx.context_msgs + [
            {"role": "system", "content": "Current time: " + time.strftime("%H:%M")}]

    def rewrite_output(self, ctx):
        ctx.final_text = f"{ctx.final_text} (checked by {P})"

    def rewrite_result(self, ctx):
        for r in ctx.tool_results:
            if isinstance(r.result, dict) and isinstance(r.result.get("content"), str):
                r.result = dict(r.result, content=f"[seen by {P}] " + r.result["content"])

    def responder(self, stage):
        def hook(ctx):
            ctx.response = f"short from {stage}"
        return hook

    def failer(self, stage):
        def hook(ctx):
            raise RuntimeError(f"{P} fails at {stage} on purpose")
        return hook
