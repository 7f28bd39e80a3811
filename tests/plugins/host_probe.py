"""A plugin that makes one host-service call per tool call, for the broker's
permission tests (tests/integration/security_secrets.rs): what a plugin with the
capabilities of its manifest is given or refused.

Tool `<name>_host {"call": "service.method", "args": [...], "kwargs": {...}}` calls the
Python SDK's typed method (`settings.get_plugin` → `sdk.settings().get_plugin(*args)`;
`input.inject_text` → `sdk.inject_text(*args, **kwargs)`) and answers
`{"ok": result}` or `{"error": "<gRPC status name>", "message": "<broker's message>"}`.
"""
import os

from hearth_plugin import HostError, Plugin

NAME = os.environ.get("HEARTH_PLUGIN", "host_probe")


def as_json(value):
    if isinstance(value, list):
        return [v.to_dict() if hasattr(v, "to_dict") else v for v in value]
    return value.to_dict() if hasattr(value, "to_dict") else value


class HostProbe(Plugin):
    def name(self):
        return NAME

    def start(self, sdk):
        self.sdk = sdk
        sdk.register_tool(f"{NAME}_host", {"description": "Makes one host-service call.",
                                           "parameters": {"type": "object"}}, self.host)

    async def host(self, args):
        service, method = args["call"].split(".", 1)
        if service == "input":
            fn = getattr(self.sdk, method)
        else:
            fn = getattr(getattr(self.sdk, service)(), method)
        try:
            result = await fn(*args.get("args", []), **args.get("kwargs", {}))
        except HostError as e:
            return {"error": str(e.code), "message": e.details}
        return {"ok": None if service == "input" else as_json(result)}
