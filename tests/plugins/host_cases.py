"""Runs the shared host-service cases (tests/host_cases.json) through the Python SDK's
typed API (HomeAgent style: `sdk.settings().get(...)`, `sdk.memory().recall(...)` …).

HOST_CASES_ROLE picks what the plugin does (its name is HEARTH_PLUGIN):
- `runner` (default): tool `<name>_run` runs the file's `cases` (awaited calls on the
  plugin's loop) and answers the report {lang, section, total, passed, failed: [...]};
- `nocap`: the same tool runs `refusals` (blocking calls from the handler thread),
  for a plugin whose manifest has `"capabilities": []`;
- `other`: declares the setting `greeting` (default "hello") in start(), the target
  of the cases' cross-plugin settings calls; tool `<name>_ping`.
HOST_CASES_OTHER names that other plugin (`${other}` in the cases).
"""

import json
import os
import re
from pathlib import Path

from hearth_plugin import HostError, Plugin

NAME = os.environ.get("HEARTH_PLUGIN", "host_cases_py")
ROLE = os.environ.get("HOST_CASES_ROLE", "runner")
CASES = Path(os.environ.get("HOST_CASES_FILE") or Path(__file__).resolve().parent.parent / "host_cases.json")
LANG = "py"


# ---------------------------------------------------------------- variables and matching

VAR = re.compile(r"\$\{(\w+)\}")


def subst(value, env):
    """`${name}` substitution (module doc of tests/host_cases.json)."""
    if isinstance(value, str):
        whole = VAR.fullmatch(value)
        if whole:
            if whole.group(1) not in env:
                raise KeyError(f"unknown variable ${{{whole.group(1)}}}")
            return env[whole.group(1)]

        def text(m):
            if m.group(1) not in env:
                raise KeyError(f"unknown variable ${{{m.group(1)}}}")
            v = env[m.group(1)]
            return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)

        return VAR.sub(text, value)
    if isinstance(value, list):
        return [subst(v, env) for v in value]
    if isinstance(value, dict):
        return {subst(k, env): subst(v, env) for k, v in value.items()}
    return value


def is_num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


TYPES = {
    "string": lambda v: isinstance(v, str),
    "number": is_num,
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "null": lambda v: v is None,
}


def show(v):
    return json.dumps(v, ensure_ascii=False)


def match(exp, got, path="$"):
    """None when `got` satisfies `exp`, else why not."""
    if isinstance(exp, dict) and len(exp) == 1 and next(iter(exp)).startswith("$"):
        (op, arg), = exp.items()
        if op == "$any":
            return None
        if op == "$type":
            return None if TYPES[arg](got) else f"{path}: expected a {arg}, got {show(got)}"
        if op == "$gt":
            return None if is_num(got) and got > arg else f"{path}: expected a number > {arg}, got {show(got)}"
        if op == "$contains":
            return None if isinstance(got, str) and arg in got else f"{path}: expected a string containing {show(arg)}, got {show(got)}"
        if op == "$no_text":
            return None if arg not in show(got) else f"{path}: {show(arg)} must not appear in {show(got)}"
        if op == "$len":
            return None if isinstance(got, (list, str, dict)) and len(got) == arg else f"{path}: expected length {arg}, got {show(got)}"
        if op == "$subset":
            if not isinstance(got, dict):
                return f"{path}: expected an object, got {show(got)}"
            for k, e in arg.items():
                if k not in got:
                    return f"{path}: missing key {show(k)} in {show(got)}"
                why = match(e, got[k], f"{path}.{k}")
                if why:
                    return why
            return None
        if op == "$includes":
            if not isinstance(got, list):
                return f"{path}: expected an array, got {show(got)}"
            for e in arg:
                if all(match(e, g) for g in got):
                    return f"{path}: no element matches {show(e)} in {show(got)}"
            return None
        if op == "$unordered":
            if not isinstance(got, list) or len(got) != len(arg):
                return f"{path}: expected {len(arg)} elements in any order, got {show(got)}"
            left = list(got)
            for e in arg:
                i = next((i for i, g in enumerate(left) if not match(e, g)), None)
                if i is None:
                    return f"{path}: no element matches {show(e)} in {show(got)}"
                left.pop(i)
            return None
        if op == "$each":
            if not isinstance(got, list):
                return f"{path}: expected an array, got {show(got)}"
            for i, g in enumerate(got):
                why = match(arg, g, f"{path}[{i}]")
                if why:
                    return why
            return None
        if op == "$desc_by":
            if not isinstance(got, list) or any(not isinstance(g, dict) or not is_num(g.get(arg)) for g in got):
                return f"{path}: expected objects with a numeric {arg}, got {show(got)}"
            vals = [g[arg] for g in got]
            return None if vals == sorted(vals, reverse=True) else f"{path}: not sorted by {arg}, highest first: {vals}"
        if op == "$all":
            for e in arg:
                why = match(e, got, path)
                if why:
                    return why
            return None
        return f"{path}: unknown matcher {op}"
    if isinstance(exp, dict):
        if not isinstance(got, dict):
            return f"{path}: expected an object, got {show(got)}"
        if set(exp) != set(got):
            return f"{path}: keys {sorted(got)} instead of {sorted(exp)}"
        for k in exp:
            why = match(exp[k], got[k], f"{path}.{k}")
            if why:
                return why
        return None
    if isinstance(exp, list):
        if not isinstance(got, list) or len(got) != len(exp):
            return f"{path}: expected {show(exp)}, got {show(got)}"
        for i, (e, g) in enumerate(zip(exp, got)):
            why = match(e, g, f"{path}[{i}]")
            if why:
                return why
        return None
    if is_num(exp):
        # Integer and float are told apart: a setting stored as 42 must not come back 42.0.
        return None if is_num(got) and type(got) is type(exp) and got == exp else f"{path}: expected {show(exp)}, got {show(got)}"
    if isinstance(exp, bool) or exp is None or isinstance(exp, str):
        return None if type(got) is type(exp) and got == exp else f"{path}: expected {show(exp)}, got {show(got)}"
    return f"{path}: cannot compare with {show(exp)}"


# ---------------------------------------------------------------- calls


def as_json(call, value):
    """An SDK result as the JSON the cases expect."""
    if call.startswith("input."):
        return None
    if call == "memory.recall":
        entities, relations = value
        return {"entities": [e.to_dict() for e in entities], "relations": [r.to_dict() for r in relations]}
    if isinstance(value, list):
        return [v.to_dict() if hasattr(v, "to_dict") else v for v in value]
    return value


def method_of(sdk, call):
    """`service.method` → the SDK's typed method."""
    service, method = call.split(".", 1)
    if service == "input":
        inject = getattr(sdk, method)
        return lambda channel, text: inject("", channel, text)
    return getattr(getattr(sdk, service)(), method)


def record(step, case, args, expected, got):
    return {"step": step, "note": case.get("note", ""), "call": case["call"], "args": args,
            "expected": expected, "got": got}


def check(step, case, env, outcome):
    """A failure record, or None. `outcome` is ("ok", value) or ("error", HostError|Exception)."""
    args = subst(case.get("args", []), env)
    kind, value = outcome
    if "error" in case:
        want = subst(case["error"], env)
        if kind == "ok":
            return record(step, case, args, {"error": want}, as_json(case["call"], value))
        if not isinstance(value, HostError):
            return record(step, case, args, {"error": want}, {"exception": f"{type(value).__name__}: {value}"})
        got = {"error": str(value.code), "message": value.details}
        if str(value.code) != want["code"] or any(c not in value.details for c in want.get("contains", [])):
            return record(step, case, args, {"error": want}, got)
        return None
    expected = subst(case["expect"], env)
    if kind == "error":
        got = ({"error": str(value.code), "message": value.details} if isinstance(value, HostError)
               else {"exception": f"{type(value).__name__}: {value}"})
        return record(step, case, args, expected, got)
    got = as_json(case["call"], value)
    why = match(expected, got)
    if why:
        r = record(step, case, args, expected, got)
        r["why"] = why
        return r
    if "save" in case:
        env[case["save"]] = got
    return None


def env_vars():
    return {"self": NAME, "other": os.environ.get("HOST_CASES_OTHER", ""), "lang": LANG}


def report(section, failed, total):
    return {"lang": LANG, "section": section, "total": total, "passed": total - len(failed), "failed": failed}


class HostCases(Plugin):
    def name(self):
        return NAME

    def start(self, sdk):
        self.sdk = sdk
        if ROLE == "other":
            sdk.settings().register_def({"key": "greeting", "type": "string",
                                         "display_name": "Greeting", "default": "hello"})
            sdk.register_tool(f"{NAME}_ping", {"description": "Answers pong."}, lambda args: "pong")
        elif ROLE == "nocap":
            sdk.register_tool(f"{NAME}_run", {"description": "Runs the refusal cases (blocking calls)."},
                              self.run_blocking)
        else:
            sdk.register_tool(f"{NAME}_run", {"description": "Runs the host-service cases (awaited calls)."},
                              self.run_awaited)

    def cases(self, section):
        return json.loads(CASES.read_text(encoding="utf-8"))[section]

    async def run_awaited(self, args):
        cases, env, failed = self.cases("cases"), env_vars(), []
        for step, case in enumerate(cases, 1):
            try:
                fn = method_of(self.sdk, case["call"])
                outcome = ("ok", await fn(*subst(case.get("args", []), env)))
            except Exception as e:  # noqa: BLE001 (every failure goes in the report)
                outcome = ("error", e)
            f = check(step, case, env, outcome)
            if f:
                failed.append(f)
        return report("cases", failed, len(cases))

    def run_blocking(self, args):
        cases, env, failed = self.cases("refusals"), env_vars(), []
        for step, case in enumerate(cases, 1):
            try:
                fn = method_of(self.sdk, case["call"])
                outcome = ("ok", fn(*subst(case.get("args", []), env)))
            except Exception as e:  # noqa: BLE001
                outcome = ("error", e)
            f = check(step, case, env, outcome)
            if f:
                failed.append(f)
        return report("refusals", failed, len(cases))
