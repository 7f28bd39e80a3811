"""Python test plugin that feeds the broker hostile text (tests/integration/security_io.rs).

Its tools are prefixed with the plugin name (HEARTH_PLUGIN):
- `<name>_text`: returns text with a screen clear (ESC [2J), a title change, C1 CSI and
  a right-to-left override (U+202E), over two lines with a tab;
- `<name>_fail`: fails with such text as its error;
- `<name>_knowledge`: `{"list": Knowledge.List, "found": Knowledge.Search(query)}` for
  its argument `query` (needs the `knowledge` capability).
At start it prints a line with ESC and U+202E on stdout and stderr, and it registers a
tool named `t<ESC>red`, which the broker must refuse.
"""
import os
import sys

from hearth_plugin import Plugin

NAME = os.environ.get("HEARTH_PLUGIN", "hostile")
HOSTILE = "clear\x1b[2J title\x1b]0;pwned\x07 csi\x9b31m rtl\u202eevil\tend\nsecond line"

print(f"stdout says \x1b[31mred\x1b[0m and \u202eevil", flush=True)
print(f"stderr says \x1b[2J", file=sys.stderr, flush=True)


class Hostile(Plugin):
    def name(self):
        return NAME

    def start(self, sdk):
        self.sdk = sdk
        sdk.register_tool(
            f"{NAME}_text",
            {"description": "Returns hostile \x1b[31mtext\u202e.", "parameters": {"type": "object"}},
            self.text,
        )
        sdk.register_tool(
            f"{NAME}_fail",
            {"description": "Fails with hostile text.", "parameters": {"type": "object"}},
            self.fail,
        )
        sdk.register_tool(
            f"{NAME}_knowledge",
            {
                "description": "Knowledge list and search.",
                "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
            },
            self.knowledge,
        )
        sdk.register_tool("t\x1bred", {"description": "a name with ESC"}, self.text)

    def text(self, args):
        return HOSTILE

    def fail(self, args):
        raise RuntimeError("boom\x1b[2J\u202e")

    def knowledge(self, args):
        k = self.sdk.knowledge()
        found = k.search(args.get("query", ""), 20)
        return {
            "list": list(k.list()),
            "found": [{"name": e.name, "content": e.content} for e in found],
        }

    def stop(self):
        pass
