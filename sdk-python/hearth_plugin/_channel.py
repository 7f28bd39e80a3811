"""The gRPC channel to the broker: address forms, message-size limits, channel options.

One channel per served plugin carries the session (`PluginHost.Attach`) and every
host-service call. grpc is imported when a channel is opened, not before: it is most
of a plugin's start-up time (~65 ms measured, against ~30 ms for the interpreter).
"""

from __future__ import annotations

from typing import Any, List, Tuple

from ._env import ConfigError

__all__ = ["MAX_MESSAGE", "channel_target", "open_channel"]

#: Largest gRPC message either way (the broker's limit too, hearth_proto::MAX_MESSAGE_BYTES).
#: A tool result over it is replaced by an error result instead of failing the stream.
MAX_MESSAGE = 64 * 1024 * 1024


def channel_target(addr: str) -> Tuple[str, List[Tuple[str, Any]]]:
    """grpc target and extra channel options for a HEARTH_ADDR value
    (`unix:///abs/path.sock`, `http://127.0.0.1:PORT`, `host:port`)."""
    if addr.startswith("unix:"):
        # grpcio would send the percent-encoded socket path as :authority, which
        # hyper/h2 (the broker) rejects.
        return addr, [("grpc.default_authority", "localhost")]
    for scheme in ("http://", "https://", "dns:///"):
        if addr.startswith(scheme):
            addr = addr[len(scheme):]
            break
    addr = addr.rstrip("/")
    if not addr:
        raise ConfigError("HEARTH_ADDR has no host:port")
    return addr, []


def open_channel(addr: str) -> Any:
    """A `grpc.aio.Channel` to the broker at `addr` with the message limits set (call on
    the event loop that will use it)."""
    import grpc.aio

    target, options = channel_target(addr)
    options += [("grpc.max_send_message_length", MAX_MESSAGE),
                ("grpc.max_receive_message_length", MAX_MESSAGE)]
    return grpc.aio.insecure_channel(target, options=options)
