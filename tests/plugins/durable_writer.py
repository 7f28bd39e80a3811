"""Durability test plugin (Python, HomeAgent style): from start() on, a thread streams
host-service writes as fast as the broker acknowledges them — `settings.set("k<i>", i)`
then `memory.commit([("s<i>", "r", "o<i>")])` — and appends `<i>` to the file
$ACK_FILE (flushed) once both calls returned. The test SIGKILLs the broker mid-stream
and checks every acknowledged write is in hearth.db afterwards.

Tool `durable_acked` answers how many pairs were acknowledged so far.
"""
import os
import threading

from hearth_plugin import Plugin


class Durable(Plugin):
    acked = 0

    def name(self):
        return "durable"

    def start(self, sdk):
        sdk.register_tool("durable_acked", {"description": "Acknowledged write pairs so far.",
                                            "parameters": {"type": "object"}},
                          lambda args: str(Durable.acked))
        threading.Thread(target=self.write, args=(sdk,), daemon=True).start()

    def write(self, sdk):
        with open(os.environ["ACK_FILE"], "a", encoding="utf-8") as acks:
            i = 0
            while True:
                sdk.host.settings.set(key=f"k{i}", value_json=str(i))
                sdk.host.memory.commit(triples=[{"subject": f"s{i}", "relation": "r", "object": f"o{i}"}])
                acks.write(f"{i}\n")
                acks.flush()
                Durable.acked = i + 1
                i += 1
