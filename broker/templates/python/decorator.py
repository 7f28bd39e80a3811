"""__NAME__: a Hearth plugin in Python (decorator style).

Serve it with the broker (`hearth dev .`) or by hand: `python -m hearth_plugin run main.py`.
Type hints and the docstring become the tool's JSON Schema.
"""

from hearth_plugin import Plugin

plugin = Plugin("__NAME__", version="0.1.0", description="__NAME__: says hello")


@plugin.tool
def __TOOL__(name: str, excited: bool = False) -> str:
    """Greet someone by name.

    Args:
        name: Who to greet.
        excited: End with an exclamation mark instead of a full stop.
    """
    return f"Hello, {name}{'!' if excited else '.'}"
