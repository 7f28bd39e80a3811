"""Clients of the broker's host services (Settings, Memory, TextMemory, DocMemory,
Knowledge, Llm, Input; proto/hearth/v1/host.proto).

Every rpc is a method in snake_case (`settings.get`, `settings.get_core`,
`input.inject_text`, …) over the generated stub, carrying the plugin's token in
`x-hearth-token` and sharing the session's channel. A method takes the request message,
a dict of its fields, or keyword fields (one plain positional value fills the request's
first field: `settings.get("city")`), plus `timeout=` seconds, and returns the generated
response message. Called on the plugin's event loop (async handlers) it returns an
awaitable that already runs; called from any other thread (plain handlers, start(),
your own threads) it blocks and returns the response. Failures raise `HostError`.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any, Callable, Dict, Optional, Tuple

from ._env import token
from ._plugin import HostError

#: Attribute name → service name in hearth.v1.
SERVICES = {
    "settings": "Settings",
    "memory": "Memory",
    "text_memory": "TextMemory",
    "doc_memory": "DocMemory",
    "knowledge": "Knowledge",
    "llm": "Llm",
    "input": "Input",
}

TOKEN_METADATA = "x-hearth-token"


def snake(name: str) -> str:
    """`GetCore` → `get_core`, `InjectTextNoMemory` → `inject_text_no_memory`."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


class Connection:
    """The channel and token host calls use; one per plugin process.

    The session hands over its channel (`adopt`); a host call made before that (from
    `start()`) opens the channel itself from HEARTH_ADDR and the spawn token
    (`hearth_plugin._env.token`) and the session then reuses it.
    """

    def __init__(self, plugin: str, loop: asyncio.AbstractEventLoop) -> None:
        self.plugin = plugin
        self.loop = loop
        self.token = token()
        self.channel: Any = None
        self._stubs: Dict[str, Any] = {}

    def ensure_channel(self, addr: Optional[str] = None, token: Optional[str] = None) -> Any:
        """The channel (created on first use; call on the event loop)."""
        if token is not None:
            self.token = token
        if self.channel is None:
            import grpc.aio

            from ._runtime import MAX_MESSAGE, channel_target, read_env
            if addr is None:
                addr, self.token = read_env()
            target, options = channel_target(addr)
            options += [("grpc.max_send_message_length", MAX_MESSAGE),
                        ("grpc.max_receive_message_length", MAX_MESSAGE)]
            self.channel = grpc.aio.insecure_channel(target, options=options)
        return self.channel

    def stub(self, service: str) -> Any:
        stub = self._stubs.get(service)
        if stub is None:
            from .v1 import host_pb2_grpc
            stub = getattr(host_pb2_grpc, f"{service}Stub")(self.ensure_channel())
            self._stubs[service] = stub
        return stub

    async def call(self, attr: str, service: str, method: str, request: Any,
                   timeout: Optional[float]) -> Any:
        import grpc
        import grpc.aio

        rpc = getattr(self.stub(service), method)
        try:
            return await rpc(request, metadata=((TOKEN_METADATA, self.token),), timeout=timeout)
        except grpc.aio.AioRpcError as e:
            code = e.code()
            hint = (" (the broker does not serve this host service)"
                    if code == grpc.StatusCode.UNIMPLEMENTED else "")
            raise HostError(
                f"plugin {self.plugin}: {attr}.{snake(method)} (hearth.v1.{service}/{method}): "
                f"{code.name}: {e.details()}{hint}",
                code=code, method=f"hearth.v1.{service}/{method}", details=e.details() or "") from None

    def dispatch(self, make: Callable[[], Any]) -> Any:
        """Run the coroutine `make()` on the plugin's loop: a Task when called on that loop,
        an awaitable future on another running loop, else block for the result."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            return self.loop.create_task(make())
        if self.loop.is_closed():
            raise RuntimeError(f"plugin {self.plugin}: host services are gone (the session ended)")
        fut = asyncio.run_coroutine_threadsafe(make(), self.loop)
        if running is not None:
            return asyncio.wrap_future(fut)
        return fut.result()

    async def close(self) -> None:
        if self.channel is not None:
            channel, self.channel = self.channel, None
            self._stubs.clear()
            await channel.close(grace=0.2)


def _request_class(method_desc: Any) -> type:
    from .v1 import host_pb2, plugin_pb2
    mod = {"hearth/v1/host.proto": host_pb2, "hearth/v1/plugin.proto": plugin_pb2}[method_desc.input_type.file.name]
    return getattr(mod, method_desc.input_type.name)


def build_request(cls: type, args: Tuple[Any, ...], kwargs: Dict[str, Any], where: str) -> Any:
    """The request message from a message, a dict, or keyword fields (+ one positional value)."""
    if len(args) > 1:
        raise TypeError(f"{where}: takes at most one positional argument (the request, a dict "
                        f"or its first field); give the others by name")
    fields = dict(kwargs)
    if args:
        a = args[0]
        if isinstance(a, cls):
            if fields:
                raise TypeError(f"{where}: a request message and keyword fields cannot be mixed")
            return a
        if isinstance(a, dict):
            dup = set(a) & set(fields)
            if dup:
                raise TypeError(f"{where}: field {sorted(dup)[0]} given twice")
            fields = {**a, **fields}
        else:
            names = [f.name for f in cls.DESCRIPTOR.fields]
            if not names:
                raise TypeError(f"{where}: takes no arguments")
            if names[0] in fields:
                raise TypeError(f"{where}: field {names[0]} given twice")
            fields[names[0]] = a
    try:
        return cls(**fields)
    except (ValueError, TypeError) as e:
        raise TypeError(f"{where}: bad request {cls.__name__}: {e}") from None


class ServiceClient:
    """One host service; its rpcs are methods in snake_case (see the module doc)."""

    def __init__(self, conn_of: Callable[[], Connection], plugin: str, attr: str) -> None:
        from .v1 import host_pb2
        service = SERVICES[attr]
        desc = host_pb2.DESCRIPTOR.services_by_name[service]
        self._attr = attr
        self._service = service
        self._methods = []
        for m in desc.methods:
            name = snake(m.name)
            self._methods.append(name)
            setattr(self, name, self._make(conn_of, plugin, m.name, name, _request_class(m)))

    def _make(self, conn_of: Callable[[], Connection], plugin: str, method: str, name: str,
              cls: type) -> Callable[..., Any]:
        attr, service = self._attr, self._service

        def call(*args: Any, timeout: Optional[float] = None, **kwargs: Any) -> Any:
            request = build_request(cls, args, kwargs, f"plugin {plugin}: {attr}.{name}")
            conn = conn_of()
            return conn.dispatch(lambda: conn.call(attr, service, method, request, timeout))

        call.__name__ = name
        call.__qualname__ = f"{type(self).__name__}.{name}"
        call.__doc__ = f"hearth.v1.{service}/{method}({cls.__name__})"
        return call

    def __dir__(self) -> Any:
        return sorted(set(super().__dir__()) | set(self._methods))

    def __repr__(self) -> str:
        return f"<hearth host service {self._service}: {', '.join(self._methods)}>"


class Host:
    """`sdk.host`: the host-service clients as attributes (`sdk.host.settings.get("k")`)."""

    def __init__(self, client: Callable[[str], ServiceClient], plugin: str) -> None:
        self._client = client
        self.plugin = plugin

    def __getattr__(self, attr: str) -> ServiceClient:
        if attr in SERVICES:
            return self._client(attr)
        raise AttributeError(f"host services: no {attr!r} (one of {', '.join(SERVICES)})")

    def __dir__(self) -> Any:
        return sorted(set(super().__dir__()) | set(SERVICES))
