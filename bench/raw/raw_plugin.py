"""Raw floor of a Python plugin for the benchmarks: the Attach stream with the
generated stubs only (grpc.aio, no SDK). Answers RunStage with its context unchanged,
InvokeTool with its arguments as content, Ping with Pong; exits on Shutdown or when
the stream ends. Dials HEARTH_ADDR with HEARTH_TOKEN like a real plugin.
"""
import asyncio
import os

import grpc

from hearth_plugin.v1 import plugin_pb2 as pb
from hearth_plugin.v1 import plugin_pb2_grpc as rpc

MAX = 64 << 20


async def main():
    addr = os.environ["HEARTH_ADDR"]
    options = [("grpc.default_authority", "localhost"),
               ("grpc.max_send_message_length", MAX), ("grpc.max_receive_message_length", MAX)]
    async with grpc.aio.insecure_channel(addr, options=options) as channel:
        call = rpc.PluginHostStub(channel).Attach(
            metadata=(("x-hearth-token", os.environ.get("HEARTH_TOKEN", "")),))
        while True:
            msg = await call.read()
            if msg is grpc.aio.EOF:
                return
            kind = msg.WhichOneof("msg")
            if kind == "run_stage":
                rs = msg.run_stage
                await call.write(pb.PluginMessage(
                    stage_result=pb.StageResult(call_id=rs.call_id, context=rs.context)))
            elif kind == "invoke_tool":
                it = msg.invoke_tool
                await call.write(pb.PluginMessage(
                    tool_result=pb.ToolResult(call_id=it.call_id, success=True, content=it.args_json)))
            elif kind == "ping":
                await call.write(pb.PluginMessage(pong=pb.Pong(nonce=msg.ping.nonce)))
            elif kind == "shutdown":
                return


asyncio.run(main())
