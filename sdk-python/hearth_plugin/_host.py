"""Clients of the broker's host services (Settings, Memory, TextMemory, DocMemory,
Knowledge, Llm, Input, Mcp; proto/hearth/v1/host.proto).

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

import re
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Dict, List, Optional, Tuple

from ._channel import open_channel
from ._types import HostError

if TYPE_CHECKING:
    import asyncio

__all__ = ["SERVICES", "TOKEN_METADATA", "Connection", "Host", "ServiceClient", "build_request",
           "snake"]

#: Attribute name → service name in hearth.v1.
SERVICES = {
    "settings": "Settings",
    "memory": "Memory",
    "text_memory": "TextMemory",
    "doc_memory": "DocMemory",
    "knowledge": "Knowledge",
    "llm": "Llm",
    "input": "Input",
    "mcp": "Mcp",
}

TOKEN_METADATA = "x-hearth-token"


def snake(name: str) -> str:
    """`GetCore` → `get_core`, `InjectTextNoMemory` → `inject_text_no_memory`."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


class Connection:
    """The broker address, token and channel one served plugin uses for the session and
    every host call. The runtime creates it before `start()` runs, so host calls made in
    `start()` share the channel the session then attaches on; the channel itself is
    opened on first use, on `loop`.
    """

    def __init__(self, plugin: str, loop: asyncio.AbstractEventLoop, addr: str, token: str) -> None:
        self.plugin = plugin
        self.loop = loop
        self.addr = addr
        self.token = token
        self.channel: Any = None
        self._stubs: Dict[str, Any] = {}

    def ensure_channel(self) -> Any:
        """The channel (opened on first use; call on the event loop)."""
        if self.channel is None:
            self.channel = open_channel(self.addr)
        return self.channel

    def metadata(self) -> Tuple[Tuple[str, str], ...]:
        """Call metadata naming the plugin: its token."""
        return ((TOKEN_METADATA, self.token),)

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
            return await rpc(request, metadata=self.metadata(), timeout=timeout)
        except grpc.aio.AioRpcError as e:
            code = e.code()
            hint = (" (the broker does not serve this host service)"
                    if code == grpc.StatusCode.UNIMPLEMENTED else "")
            raise HostError(
                f"plugin {self.plugin}: {attr}.{snake(method)} (hearth.v1.{service}/{method}): "
                f"{code.name}: {e.details()}{hint}",
                code=code, method=f"hearth.v1.{service}/{method}", details=e.details() or "") from None

    def dispatch(self, make: Callable[[], Awaitable[Any]]) -> Any:
        """Run the coroutine `make()` on the plugin's loop: a Task when called on that loop,
        an awaitable future on another running loop, else block for the result."""
        import asyncio  # loaded by the time a plugin is served (~45 ms when imported cold)

        try:
            running: Optional[asyncio.AbstractEventLoop] = asyncio.get_running_loop()
        except RuntimeError:
            running = None

        async def run() -> Any:
            return await make()

        if running is self.loop:
            return self.loop.create_task(run())
        if self.loop.is_closed():
            raise RuntimeError(f"plugin {self.plugin}: host services are gone (the session ended)")
        fut = asyncio.run_coroutine_threadsafe(run(), self.loop)
        if running is not None:
            return asyncio.wrap_future(fut)
        return fut.result()

    async def close(self) -> None:
        if self.channel is not None:
            channel, self.channel = self.channel, None
            self._stubs.clear()
            await channel.close(grace=0.2)


def _request_class(method_desc: Any) -> Any:
    from .v1 import host_pb2, plugin_pb2
    mod = {"hearth/v1/host.proto": host_pb2, "hearth/v1/plugin.proto": plugin_pb2}[method_desc.input_type.file.name]
    return getattr(mod, method_desc.input_type.name)


def build_request(cls: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any], where: str) -> Any:
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
        self._methods: List[str] = []
        for m in desc.methods:
            name = snake(m.name)
            self._methods.append(name)
            setattr(self, name, self._make(conn_of, plugin, m.name, name, _request_class(m)))

    def _make(self, conn_of: Callable[[], Connection], plugin: str, method: str, name: str,
              cls: Any) -> Callable[..., Any]:
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
