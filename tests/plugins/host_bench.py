"""Python plugin of the host-services benchmark (bench/host.rs): times host calls as a
plugin author sees them, in the plugin, with time.perf_counter_ns around each call of
the generic clients (`sdk.host.settings.get(...)` …).

Tools (HomeAgent style), both taking {op, n, warmup}:
- `host_bench_run`: a plain handler (runs on the SDK's thread pool; each host call
  blocks the thread until the broker answers);
- `host_bench_run_async`: an async handler (runs on the plugin's event loop; each host
  call is awaited).

Ops:
- `seed`: commits `n` relations of a deterministic graph (`n / 4` entities with
  two-word names such as `Kalomi Nedarus`) in batches of 100; answers {relations,
  committed, ms}. Run once before `memory_recall`.
- `settings_get`: `settings.get(key="bench_key")` (set once first);
- `settings_set`: `settings.set(key="bench_key", value_json=str(i))`;
- `memory_recall`: `memory.recall(keywords=[<a seeded entity>], depth=2)`, the entity
  drawn at random (fixed seed) for each call;
- `memory_commit`: `memory.commit(triples=[one new triple])` per call.

Each op first makes `warmup` calls (default 100, not timed), then `n` timed calls one
after another, and answers {op, mode, n, us: [latency µs of each call], p50_us, p99_us,
mean_us, max_us, sizes} (nearest-rank percentiles; `sizes` = mean relations returned
by recall).
"""

import math
import random
import time

from hearth_plugin import Plugin

KEY = "bench_key"
RELATION_TYPES = ["knows", "likes", "works_at", "lives_in", "visited", "owns",
                  "mentioned", "part_of", "related_to", "prefers", "dislikes", "uses"]


SYLLABLES = ["ka", "lo", "mi", "ne", "ta", "ru", "shi", "po", "an", "el", "or", "us", "ven",
             "dar", "li", "mo"]


def entity_name(i):
    """Two words of three syllables ("Kalomi Nedarus"), distinct for i < 2**24; the same
    names as bench/host.rs `entity`."""
    j = (i * 0x9E3779B1 + 0x5BD1E995) & 0xFFFFFF
    words = []
    for _ in range(2):
        w = ""
        for _ in range(3):
            w += SYLLABLES[j & 15]
            j >>= 4
        words.append(w.capitalize())
    return " ".join(words)


def seed_triples(n):
    """`n` relations over n/4 entities: subject uniform, object uniform 70% of the time
    and skewed towards low ids (a few hubs) 30% of the time."""
    rng = random.Random(42)
    entities = max(1, n // 4)
    out = []
    for _ in range(n):
        s = rng.randrange(entities)
        if rng.random() < 0.7:
            o = rng.randrange(entities)
        else:
            o = int(entities * rng.random() ** 3)
        out.append({"subject": entity_name(s), "relation": rng.choice(RELATION_TYPES),
                    "object": entity_name(o)})
    return out


def summary(op, mode, us, sizes=None):
    s = sorted(us)
    n = len(s)

    def rank(p):
        return s[min(max(math.ceil(p * n), 1), n) - 1]

    out = {"op": op, "mode": mode, "n": n, "us": us,
           "p50_us": rank(0.50), "p99_us": rank(0.99),
           "mean_us": sum(s) / n, "max_us": s[-1]}
    if sizes:
        out["sizes"] = sum(sizes) / len(sizes)
    return out


class HostBench(Plugin):
    def name(self):
        return "host_bench"

    def start(self, sdk):
        self.sdk = sdk
        self.entities = 1
        self.commits = 0
        schema = {
            "description": "Times n sequential host-service calls in the plugin.",
            "parameters": {
                "type": "object",
                "properties": {
                    "op": {"type": "string", "enum": ["seed", "settings_get", "settings_set",
                                                      "memory_recall", "memory_commit"]},
                    "n": {"type": "integer", "minimum": 1},
                    "warmup": {"type": "integer", "minimum": 0},
                },
                "required": ["op", "n"],
            },
        }
        sdk.register_tool("host_bench_run", schema, self.run)
        sdk.register_tool("host_bench_run_async", schema, self.run_async)

    # One call of `op` number i: (a zero-argument callable, or a coroutine factory) →
    # the response; the same request shapes in both modes.
    def _call(self, op, i, rng):
        h = self.sdk.host
        if op == "settings_get":
            return h.settings.get(key=KEY)
        if op == "settings_set":
            return h.settings.set(key=KEY, value_json=str(i))
        if op == "memory_recall":
            return h.memory.recall(keywords=[entity_name(rng.randrange(self.entities))], depth=2)
        if op == "memory_commit":
            self.commits += 1
            c = self.commits
            return h.memory.commit(triples=[{"subject": f"commit s{c}", "relation": "wrote",
                                              "object": f"commit o{c}"}])
        raise ValueError(f"unknown op {op!r}")

    def _seed(self, n):
        triples = seed_triples(n)
        self.entities = max(1, n // 4)
        started = time.perf_counter_ns()
        committed = 0
        for at in range(0, n, 100):
            committed += self.sdk.host.memory.commit(triples=triples[at:at + 100]).committed
        ms = (time.perf_counter_ns() - started) / 1e6
        return {"op": "seed", "relations": n, "committed": committed, "ms": ms}

    def run(self, args):
        op, n, warmup = args["op"], args["n"], args.get("warmup", 100)
        if op == "seed":
            return self._seed(n)
        self.sdk.host.settings.set(key=KEY, value_json="0")
        rng = random.Random(7)
        for i in range(warmup):
            self._call(op, i, rng)
        us, sizes = [], []
        for i in range(n):
            t = time.perf_counter_ns()
            r = self._call(op, i, rng)
            us.append((time.perf_counter_ns() - t) / 1e3)
            if op == "memory_recall":
                sizes.append(len(r.relations))
        return summary(op, "plain", us, sizes)

    async def run_async(self, args):
        op, n, warmup = args["op"], args["n"], args.get("warmup", 100)
        if op == "seed":
            raise ValueError("seed with host_bench_run")
        await self.sdk.host.settings.set(key=KEY, value_json="0")
        rng = random.Random(7)
        for i in range(warmup):
            await self._call(op, i, rng)
        us, sizes = [], []
        for i in range(n):
            t = time.perf_counter_ns()
            r = await self._call(op, i, rng)
            us.append((time.perf_counter_ns() - t) / 1e3)
            if op == "memory_recall":
                sizes.append(len(r.relations))
        return summary(op, "async", us, sizes)

    def stop(self):
        pass
