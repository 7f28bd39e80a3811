"""Calculator: the LinkZone seed's Python calculator on Hearth.

Ported from LinkZone by changing the import only (`from hearth_plugin import Plugin`);
`safe_eval` is a real evaluator: it parses with `ast` and walks numbers and the
operators + - * / // % ** (unary + and - too) and nothing else.
"""

import ast
import math
import operator

from hearth_plugin import Plugin

metadata = {
    "name": "calculator",
    "ai": {
        "tool": {
            "parameters": [
                {"name": "expression", "type": "string", "description": "数学表达式", "required": True}
            ],
            "usage": "数学计算器",
            "when_to_use": "用户需要进行数学计算时"
        }
    }
}

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}

MAX_EXPONENT = 1000          # |b| in a ** b
MAX_BASE_FOR_POW = 10 ** 100  # |a| in a ** b when b > 1
MAX_LENGTH = 1000            # characters of the expression
MAX_DIGITS = 4300            # digits of any integer along the way


class CalculatorPlugin(Plugin):
    def execute_tool(self, sender, args):
        expression = args.get("expression", "")
        try:
            # 安全计算表达式
            result = self.safe_eval(expression)
            return {
                "success": True,
                "content": f"{expression} = {result}"
            }
        except Exception as e:
            return {
                "success": False,
                "error": f"计算错误: {str(e)}"
            }

    def safe_eval(self, expr):
        """Evaluate an arithmetic expression; raises ValueError / ZeroDivisionError."""
        if not isinstance(expr, str) or not expr.strip():
            raise ValueError("empty expression")
        if len(expr) > MAX_LENGTH:
            raise ValueError(f"expression longer than {MAX_LENGTH} characters")
        try:
            tree = ast.parse(expr.strip(), mode="eval")
        except SyntaxError as e:
            raise ValueError(f"invalid syntax in {expr!r}: {e.msg}") from None
        value = _eval(tree.body)
        return _format(value)


def _eval(node):
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise ValueError(f"not a number: {node.value!r}")
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            if abs(right) > MAX_EXPONENT:
                raise ValueError(f"exponent {right} too large (limit {MAX_EXPONENT})")
            if abs(left) > MAX_BASE_FOR_POW and abs(right) > 1:
                raise ValueError("power too large")
            if left == 0 and right < 0:
                raise ZeroDivisionError("0 cannot be raised to a negative power")
        if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
            raise ZeroDivisionError("division by zero")
        result = _BINARY[type(node.op)](left, right)
        if isinstance(result, complex):
            raise ValueError("result is not a real number")
        if isinstance(result, int) and result.bit_length() > MAX_DIGITS * 3.33:
            raise ValueError("result too large")
        if isinstance(result, float) and math.isinf(result):
            raise ValueError("result overflows")
        return result
    what = type(node).__name__
    if isinstance(node, ast.Name):
        what = f"name {node.id!r}"
    elif isinstance(node, ast.Call):
        what = "function call"
    elif isinstance(node, ast.Attribute):
        what = "attribute access"
    raise ValueError(f"unsupported element: {what}")


def _format(value):
    """Integers without '.0'; floats at up to 12 significant digits."""
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.12g}"
    return str(value)
