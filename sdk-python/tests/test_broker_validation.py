"""The schemas the SDK emits are accepted by the broker's validator, and the test
harness's argument check answers exactly as the broker does.

`golden/broker_validation.json` holds, for each case, the JSON Schema and the verdict
of the broker's own validator (the `jsonschema` crate, version pinned in
broker/Cargo.toml) on each argument set: "META-INVALID …" when the schema fails the
meta-schema, else "ok" or the broker's message. The tests check that the SDK still
emits those schemas and that `hearth_plugin.testing.validate_arguments` gives the same
answers. The broker's own tests (broker/src/golden.rs) check this file against the
broker's `ArgsSchema`, so a change in the broker fails there until the file is
regenerated. Regenerate after a deliberate change, with cargo and the crate in
~/.cargo/registry (it builds a throwaway checker in a temp dir, offline):

    .venv/bin/python sdk-python/tests/test_broker_validation.py --update
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Dict, List, Literal, Optional, Union

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_params import Node, Order, Size  # noqa: E402

from hearth_plugin._schema import function_schema  # noqa: E402
from hearth_plugin.testing import validate_arguments  # noqa: E402

GOLDEN = Path(__file__).resolve().parent / "golden" / "broker_validation.json"


def f_nullable(coupon: Optional[str] = None, n: int | None = None, mode: Literal["a", "b"] | None = None,
               either: Union[int, str, None] = None, must: Optional[int] = 0) -> None: ...


def f_nested(order: Order, tags: Annotated[set[str], "Labels"] = frozenset(), size: Size = Size.S) -> None: ...


def f_recursive(tree: Node) -> None: ...


def f_kwargs(a: int, **rest: str) -> None: ...


def f_maps(d: Dict[str, Optional[List[int]]], t: tuple[int, ...] = (), lit: Literal[1, "x", None] = 1) -> None: ...


FUNCTIONS = {
    "nullable": (f_nullable, [{}, {"coupon": None}, {"coupon": 3}, {"n": None, "mode": None}, {"mode": "c"},
                              {"either": None}, {"either": 1.5}, {"x": 1}, {"n": 2.0}]),
    "nested": (f_nested, [
        {"order": {"items": [{"sku": "a", "qty": 1, "size": "s"}], "ship_to": {"city": "x"}}},
        {"order": {"items": [], "ship_to": {"city": 1}}},
        {"order": {"items": [], "ship_to": {"city": "x"}, "gift": None, "dims": [1, 2]}},
        {"order": {"items": [], "ship_to": {"city": "x"}, "dims": [1]}},
        {"order": {"items": [], "ship_to": {"city": "x", "zz": 1}}},
        {"order": {"items": [], "ship_to": {"city": "x"}}, "tags": ["a", "a"]},
        {"order": {"items": [], "ship_to": {"city": "x"}}, "size": "xl"}]),
    "recursive": (f_recursive, [{"tree": {"label": "a", "children": [{"label": "b"}]}},
                                {"tree": {"label": "a", "children": [{"label": 1}]}}]),
    "kwargs": (f_kwargs, [{"a": 1, "b": "x"}, {"a": "1"}]),
    "maps": (f_maps, [{"d": {"k": None, "j": [1]}}, {"d": {"k": ["x"]}}, {"d": {}, "t": [1, 2, 3], "lit": None},
                      {"d": {}, "lit": 2}]),
}

RAW = {"type": "object", "properties": {
    "n": {"type": "number", "minimum": 1, "maximum": 10, "multipleOf": 0.5},
    "x": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 5},
    "s": {"type": "string", "minLength": 2, "maxLength": 4, "pattern": "^[a-z]+$"},
    "a": {"type": "array", "minItems": 1, "maxItems": 3, "uniqueItems": True, "items": {"type": "integer"}},
    "t": {"type": "array", "prefixItems": [{"type": "string"}], "items": False},
    "c": {"const": "fixed"}, "e": {"enum": [1, 2, 3, 4, 5]},
    "o": {"oneOf": [{"type": "integer"}, {"type": "number"}]},
    "no": {"not": {"type": "string"}},
    "cond": {"if": {"type": "integer"}, "then": {"minimum": 3}, "else": {"type": "string"}},
    "m": {"type": "object", "minProperties": 1, "maxProperties": 2, "propertyNames": {"pattern": "^k"},
          "patternProperties": {"^k": {"type": "boolean"}}},
    "any": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    "all": {"allOf": [{"type": "integer"}, {"minimum": 2}]},
    "dep": {"type": "object", "dependentRequired": {"a": ["b"]}},
    "ct": {"type": "array", "contains": {"type": "string"}},
}, "required": ["n"], "additionalProperties": False}
RAW_ARGS = [
    {"n": 1}, {"n": 0}, {"n": 11}, {"n": 1.25}, {"n": 1, "x": 0}, {"n": 1, "x": 5}, {"n": 1, "s": "a"},
    {"n": 1, "s": "abcde"}, {"n": 1, "s": "AB"}, {"n": 1, "a": []}, {"n": 1, "a": [1, 2, 3, 4]}, {"n": 1, "a": [1, 1]},
    {"n": 1, "t": ["a", 1]}, {"n": 1, "c": "other"}, {"n": 1, "e": 9}, {"n": 1, "o": 1}, {"n": 1, "o": "s"},
    {"n": 1, "no": "s"}, {"n": 1, "cond": 2}, {"n": 1, "cond": 1.5}, {"n": 1, "m": {}},
    {"n": 1, "m": {"k1": True, "k2": True, "k3": True}}, {"n": 1, "m": {"z": 1}}, {"n": 1, "m": {"k": 1}},
    {"n": 1, "any": 3}, {"n": 1, "all": 1}, {"n": 1, "all": "x"}, {"n": 1, "dep": {"a": 1}}, {"n": 1, "ct": [1, 2]},
    {"n": 1, "zz": 1, "aa": 2}, {"n": 1, "a": ["x"]}, {}, {"n": True}]


def cases():
    out = {name: (function_schema(f).parameters, args) for name, (f, args) in FUNCTIONS.items()}
    out["keywords"] = (RAW, RAW_ARGS)
    return out


def test_the_sdk_emits_the_schemas_the_broker_accepted():
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    for name, (schema, args) in cases().items():
        assert schema == golden[name]["schema"], f"{name}: the emitted schema changed; regenerate the golden file"
        assert not str(golden[name]["broker"]).startswith("META-INVALID"), golden[name]["broker"]


def test_the_harness_answers_as_the_broker_does():
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    for name, (schema, args) in cases().items():
        assert args == golden[name]["args"], name
        for a, want in zip(args, golden[name]["broker"]):
            assert (validate_arguments(schema, a) or "ok") == want, (name, a)


CHECKER = r'''
use std::io::BufRead;
fn main() {
    for line in std::io::stdin().lock().lines() {
        let v: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
        let schema = &v["schema"];
        if let Err(e) = jsonschema::meta::validate(schema) {
            println!("{}", serde_json::to_string(&format!("META-INVALID {e}")).unwrap());
            continue;
        }
        let validator = jsonschema::validator_for(schema).unwrap();
        let mut out = vec![];
        for a in v["args"].as_array().unwrap() {
            out.push(match validator.iter_errors(a).next() {
                None => "ok".to_string(),
                Some(err) => {
                    let arg = err.instance_path().to_string().trim_start_matches('/').replace('/', ".");
                    if arg.is_empty() { format!("arguments: {err}") } else { format!("argument `{arg}`: {err}") }
                }
            });
        }
        println!("{}", serde_json::to_string(&out).unwrap());
    }
}
'''


def update() -> None:
    """Regenerate the golden file with the broker's validator crate (cargo, offline)."""
    repo = Path(__file__).resolve().parents[2]
    lock = (repo / "Cargo.lock").read_text()
    version = lock.split('name = "jsonschema"\nversion = "', 1)[1].split('"', 1)[0]
    with tempfile.TemporaryDirectory() as d:
        Path(d, "src").mkdir()
        Path(d, "Cargo.toml").write_text(
            '[package]\nname = "jsck"\nversion = "0.0.0"\nedition = "2021"\n[workspace]\n[dependencies]\n'
            f'jsonschema = {{ version = "={version}", default-features = false }}\nserde_json = "1"\n')
        Path(d, "src", "main.rs").write_text(CHECKER)
        subprocess.run(["cargo", "build", "--offline", "-q"], cwd=d, check=True,
                       env={**os.environ, "CARGO_TARGET_DIR": str(Path(d, "target"))})
        all_cases = cases()
        lines = "".join(json.dumps({"schema": s, "args": a}) + "\n" for s, a in all_cases.values())
        out = subprocess.run([str(Path(d, "target", "debug", "jsck"))], input=lines, capture_output=True,
                             text=True, check=True).stdout.splitlines()
    golden = {name: {"schema": s, "args": a, "broker": json.loads(line)}
              for (name, (s, a)), line in zip(all_cases.items(), out)}
    golden["_generated_with"] = f"jsonschema {version} (the broker's validator)"
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps(golden, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {GOLDEN}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit("usage: test_broker_validation.py --update")
    update()
