"""The typed host-service APIs (`sdk.settings()`, `sdk.memory()`, …): the request each
method sends and what it makes of the response, against scripted replies of the fake
broker (`host_replies`, its overrides), called both blocking (from a thread) and
awaited (on the plugin's loop)."""

import asyncio
import json

import grpc
import pytest

from fakebroker import run
from hearth_plugin import ConfigDef, Doc, Entity, HostError, KnowledgeEntry, PluginSDK, Relation, Triple
from hearth_plugin._host import Connection
from hearth_plugin.v1 import host_pb2 as h
from hearth_plugin.v1 import plugin_pb2 as pb


def sdk_on(broker, loop):
    """A PluginSDK whose host calls go to the fake broker (as the runtime wires it)."""
    sdk = PluginSDK("typed")
    sdk._conn = Connection("typed", loop, broker.addr, broker.token)
    return sdk


def in_thread(fn, *args, **kwargs):
    """Runs a blocking host call off the loop (as plain handlers do)."""
    return asyncio.get_running_loop().run_in_executor(None, lambda: fn(*args, **kwargs))


def last(broker, service, method):
    calls = [c for c in broker.host_calls if (c.service, c.method) == (service, method)]
    assert calls, f"no {service}/{method} call in {[(c.service, c.method) for c in broker.host_calls]}"
    assert calls[-1].token == broker.token
    return calls[-1].request


def test_settings_values_keys_defs_dump(tmp_path):
    async def body(broker):
        sdk = sdk_on(broker, asyncio.get_running_loop())
        s = sdk.settings()
        assert sdk.settings() is s and sdk.host.settings is not s
        r = broker.host_replies
        r[("Settings", "Get")] = lambda req: h.ValueResponse(value_json={"n": "42", "f": "2.5", "b": "true", "o": '{"a":[1,null]}', "z": "null"}[req.key])
        for key, want in [("n", 42), ("f", 2.5), ("b", True), ("o", {"a": [1, None]}), ("z", None)]:
            got = await s.get(key)                       # awaited on the loop
            assert got == want and type(got) is type(want), (key, got)
            assert await in_thread(s.get, key) == want   # blocking in a thread
        assert last(broker, "Settings", "Get") == h.KeyRequest(key="z")

        r[("Settings", "Set")] = h.Empty()
        assert await s.set("k", {"城市": "北京", "n": 1, "x": None}) is None
        req = last(broker, "Settings", "Set")
        assert (req.key, json.loads(req.value_json), req.plugin) == ("k", {"城市": "北京", "n": 1, "x": None}, "")
        assert "北京" in req.value_json                    # UTF-8 kept, not \\u escapes
        await in_thread(s.set, "flag", False)
        assert last(broker, "Settings", "Set").value_json == "false"
        with pytest.raises(TypeError, match="settings.set: value is not JSON"):
            s.set("bad", object())

        r[("Settings", "List")] = h.KeysResponse(keys=["a", "b"])
        assert await s.list("p") == ["a", "b"] and last(broker, "Settings", "List") == h.PrefixRequest(prefix="p")
        assert await s.list() == ["a", "b"] and last(broker, "Settings", "List").prefix == ""

        r[("Settings", "GetCore")] = h.ValueResponse(value_json='"/data"')
        assert await s.get_core("core.daemon.data_dir") == "/data"
        r[("Settings", "SetCore")] = h.Empty()
        await s.set_core("core.x", 7)
        assert last(broker, "Settings", "SetCore") == h.SetRequest(key="core.x", value_json="7")
        r[("Settings", "ListCore")] = h.KeysResponse(keys=["core.x"])
        assert await s.list_core("core.") == ["core.x"]

        r[("Settings", "GetPlugin")] = h.ValueResponse(value_json='"http://napcat"')
        assert await s.get_plugin("qq", "napcat_url") == "http://napcat"
        assert last(broker, "Settings", "GetPlugin") == h.KeyRequest(key="napcat_url", plugin="qq")
        r[("Settings", "SetPlugin")] = h.Empty()
        await s.set_plugin("qq", "k", [1, 2])
        assert last(broker, "Settings", "SetPlugin") == h.SetRequest(key="k", value_json="[1, 2]", plugin="qq")
        r[("Settings", "ListPlugin")] = h.KeysResponse(keys=["k"])
        assert await s.list_plugin("qq", "k") == ["k"]
        assert last(broker, "Settings", "ListPlugin") == h.PrefixRequest(prefix="k", plugin="qq")

        r[("Settings", "RegisterDef")] = h.Empty()
        await s.register_def({"key": "days", "type": "number", "display_name": "Days", "default": 3,
                              "min": 0, "max": 7, "options": ["1", "3"], "secret": True})
        w = last(broker, "Settings", "RegisterDef")
        assert (w.key, w.type, w.display_name, w.default_json, w.min, w.max, list(w.options), w.secret) == \
            ("days", "number", "Days", "3", 0.0, 7.0, ["1", "3"], True)
        assert w.HasField("min") and not w.HasField("step")
        await s.register_def(ConfigDef(key="api_key", display_name="API Key", required=True))
        w = last(broker, "Settings", "RegisterDef")
        assert (w.key, w.type, w.default_json, w.required, w.HasField("min")) == ("api_key", "string", "", True, False)
        await s.register_def(ConfigDef(key="n", default=None))
        assert last(broker, "Settings", "RegisterDef").default_json == "null"   # a null default is a default
        with pytest.raises(TypeError, match="unknown field 'colour'"):
            s.register_def({"key": "x", "colour": "red"})
        with pytest.raises(ValueError, match="needs a key"):
            s.register_def({"type": "string"})

        r[("Settings", "Defs")] = h.DefsResponse(defs=[
            pb.ConfigDef(key="days", default_json="3", type="number", display_name="Days", min=0, step=1),
            pb.ConfigDef(key="api_key", type="string", display_name="API Key", description="密钥", secret=True, required=True),
        ])
        defs = await s.defs("")
        assert [d.to_dict() for d in defs] == [
            {"key": "days", "default": 3, "type": "number", "display_name": "Days", "min": 0.0, "step": 1.0},
            {"key": "api_key", "type": "string", "display_name": "API Key", "description": "密钥", "required": True, "secret": True},
        ]
        assert isinstance(defs[0], ConfigDef) and defs[0].max is None and not defs[1].has_default

        r[("Settings", "Dump")] = h.DumpResponse(dump_json='{"core": {}, "plugins": {"typed": {"api_key": "••••••"}}}')
        assert await s.dump() == {"core": {}, "plugins": {"typed": {"api_key": "••••••"}}}
        r[("Settings", "Plugins")] = h.KeysResponse(keys=["qq", "typed"])
        assert await in_thread(s.plugins) == ["qq", "typed"]

    run(tmp_path, body)


def test_memory_and_the_other_services(tmp_path):
    async def body(broker):
        sdk = sdk_on(broker, asyncio.get_running_loop())
        r = broker.host_replies
        m = sdk.memory()
        r[("Memory", "Recall")] = h.RecallResponse(
            entities=[h.Entity(name="Alice", type="Person", mention_count=3)],
            relations=[h.Relation(source_name="Alice", target_name="tea", relation_type="likes")])
        entities, relations = await m.recall(["alice", "茶"], 2)
        assert entities == [Entity("Alice", "Person", 3)] and relations == [Relation("Alice", "tea", "likes")]
        assert entities[0].to_dict() == {"name": "Alice", "type": "Person", "mention_count": 3}
        assert type(entities[0].mention_count) is int
        assert last(broker, "Memory", "Recall") == h.RecallRequest(keywords=["alice", "茶"], depth=2)
        await m.recall("solo", 0)
        assert last(broker, "Memory", "Recall") == h.RecallRequest(keywords=["solo"], depth=0)

        r[("Memory", "Commit")] = h.CommitResponse(committed=2)
        n = await m.commit([("Alice", "likes", "tea"),
                            {"subject": "Bob", "relation": "knows", "object": "Alice", "session_id": "s"},
                            Triple("Acme", "in", "Paris", object_type="Location")])
        assert n == 2
        assert list(last(broker, "Memory", "Commit").triples) == [
            h.Triple(subject="Alice", relation="likes", object="tea"),
            h.Triple(subject="Bob", relation="knows", object="Alice", session_id="s"),
            h.Triple(subject="Acme", relation="in", object="Paris", object_type="Location")]
        with pytest.raises(TypeError, match="triple 1: a triple tuple has 3 to 6 items"):
            m.commit([("a", "b", "c"), ("a", "b")])

        r[("Memory", "Introspect")] = h.IntrospectResponse(stats_json='{"entities": 2, "relations": 1}')
        assert await m.introspect() == {"entities": 2, "relations": 1}
        r[("Memory", "MergeEntities")] = h.CountResponse(count=4)
        assert await m.merge_entities("Bobby", "Bob") == 4
        assert last(broker, "Memory", "MergeEntities") == h.MergeRequest(source="Bobby", target="Bob")
        r[("Memory", "Purge")] = h.CountResponse(count=1)
        assert await in_thread(m.purge, {"relation_type": "likes"}, "hard") == 1
        req = last(broker, "Memory", "Purge")
        assert (dict(req.criteria), req.mode) == ({"relation_type": "likes"}, "hard")

        r[("TextMemory", "Append")] = h.Empty()
        assert await sdk.text_memory().append({"role": "user", "content": "你好", "timestamp": 17}) is None
        assert last(broker, "TextMemory", "Append") == h.TextEvent(role="user", content="你好", timestamp=17)

        d = sdk.doc_memory()
        r[("DocMemory", "Query")] = h.DocsResponse(docs=[h.Doc(id="d1", title="t", content="c", score=1.5)])
        docs = await d.query("天气", 3)
        assert docs == [Doc("d1", "t", "c", 1.5)] and docs[0].to_dict()["score"] == 1.5
        assert last(broker, "DocMemory", "Query") == h.DocQuery(text="天气", top_k=3)
        r[("DocMemory", "Insert")] = h.Empty()
        await d.insert(Doc(id="d2", title="T", content="C"))
        assert last(broker, "DocMemory", "Insert") == h.Doc(id="d2", title="T", content="C")
        await d.insert({"title": "only title"})
        assert last(broker, "DocMemory", "Insert") == h.Doc(title="only title")
        r[("DocMemory", "Remove")] = h.Empty()
        await d.remove("d2")
        assert last(broker, "DocMemory", "Remove") == h.IdRequest(id="d2")
        r[("DocMemory", "Stats")] = h.StatsResponse(stats_json='{"docs": 1}')
        assert await d.stats() == {"docs": 1}

        k = sdk.knowledge()
        r[("Knowledge", "Search")] = h.KnowledgeResponse(entries=[h.KnowledgeEntry(name="n", content="c", score=0.25)])
        assert await k.search("q", 2) == [KnowledgeEntry("n", "c", 0.25)]
        assert last(broker, "Knowledge", "Search") == h.KnowledgeQuery(query="q", top_k=2)
        r[("Knowledge", "Add")] = h.Empty()
        await k.add("n", "内容")
        assert last(broker, "Knowledge", "Add") == h.KnowledgeEntry(name="n", content="内容")
        r[("Knowledge", "List")] = h.KeysResponse(keys=["n"])
        assert await k.list() == ["n"]

        llm = sdk.llm()
        r[("Llm", "ListSources")] = h.KeysResponse(keys=["a", "b"])
        assert await llm.list_sources() == ["a", "b"]
        r[("Llm", "SetSource")] = h.Empty()
        await llm.set_source("b")
        assert last(broker, "Llm", "SetSource") == h.SourceRequest(name="b")
        r[("Llm", "CurrentSource")] = h.SourceRequest(name="b")
        assert await in_thread(llm.current_source) == "b"

    run(tmp_path, body)


def test_errors_carry_the_status_name_and_the_broker_message(tmp_path):
    async def body(broker):
        sdk = sdk_on(broker, asyncio.get_running_loop())
        broker.host_replies[("Settings", "Get")] = (grpc.StatusCode.NOT_FOUND, "no `k` in config_typed")
        broker.host_replies[("Memory", "Commit")] = (grpc.StatusCode.PERMISSION_DENIED, "plugin typed: memory.commit needs capability `memory`")
        for call in (lambda: sdk.settings().get("k"), lambda: in_thread(sdk.settings().get, "k")):
            with pytest.raises(HostError) as e:
                await call()
            assert e.value.code == "NOT_FOUND" and e.value.code == grpc.StatusCode.NOT_FOUND
            assert e.value.code.name == "NOT_FOUND" and e.value.details == "no `k` in config_typed"
            assert e.value.method == "hearth.v1.Settings/Get"
            assert str(e.value) == "plugin typed: settings.get (hearth.v1.Settings/Get): NOT_FOUND: no `k` in config_typed"
        with pytest.raises(HostError) as e:
            await sdk.memory().commit([("a", "b", "c")])
        assert (e.value.code, e.value.details) == ("PERMISSION_DENIED", "plugin typed: memory.commit needs capability `memory`")
        broker.host_replies[("Knowledge", "List")] = (grpc.StatusCode.UNIMPLEMENTED, "no such service")
        with pytest.raises(HostError) as e:
            await sdk.knowledge().list()
        assert e.value.code == "UNIMPLEMENTED" and "does not serve this host service" in str(e.value)
        broker.host_replies[("Settings", "Get")] = h.ValueResponse(value_json="{broken")
        with pytest.raises(HostError) as e:
            await sdk.settings().get("k")
        assert e.value.code == "INTERNAL" and "invalid JSON" in str(e.value)

    run(tmp_path, body)


def test_mcp_requests_results_helpers_and_errors(tmp_path):
    async def body(broker):
        sdk = sdk_on(broker, asyncio.get_running_loop())
        r = broker.host_replies
        mcp = sdk.mcp()
        assert mcp is sdk.mcp()
        r[("Mcp", "Request")] = h.McpResponse(result_json='{"resources": [{"uri": "a://1"}]}')
        assert await mcp.request("files", "resources/list") == {"resources": [{"uri": "a://1"}]}
        assert last(broker, "Mcp", "Request") == h.McpRequest(server="files", method="resources/list")
        assert await in_thread(mcp.request, "files", "prompts/list", {"cursor": "c"}) == {"resources": [{"uri": "a://1"}]}
        assert json.loads(last(broker, "Mcp", "Request").params_json) == {"cursor": "c"}

        # The listing helpers follow nextCursor over every page.
        def pages(req):
            cursor = json.loads(req.params_json or "{}").get("cursor")
            page = {None: {"resources": [{"uri": "a://1"}], "nextCursor": "p2"},
                    "p2": {"resources": [{"uri": "a://2"}]}}[cursor]
            return h.McpResponse(result_json=json.dumps(page))

        r[("Mcp", "Request")] = pages
        assert await mcp.resources("files") == [{"uri": "a://1"}, {"uri": "a://2"}]
        assert await in_thread(mcp.resources, "files") == [{"uri": "a://1"}, {"uri": "a://2"}]
        r[("Mcp", "Request")] = h.McpResponse(result_json='{"resourceTemplates": [{"uriTemplate": "a://{id}"}]}')
        assert await mcp.resource_templates("files") == [{"uriTemplate": "a://{id}"}]
        assert last(broker, "Mcp", "Request").method == "resources/templates/list"
        r[("Mcp", "Request")] = h.McpResponse(result_json='{"prompts": [{"name": "greet"}]}')
        assert await mcp.prompts("files") == [{"name": "greet"}]
        r[("Mcp", "Request")] = h.McpResponse(
            result_json='{"contents": [{"uri": "a://1", "mimeType": "text/plain", "text": "你好"}]}')
        assert await mcp.read_resource("files", "a://1") == [{"uri": "a://1", "mimeType": "text/plain", "text": "你好"}]
        req = last(broker, "Mcp", "Request")
        assert (req.method, json.loads(req.params_json)) == ("resources/read", {"uri": "a://1"})
        got = {"description": "Greet", "messages": [{"role": "user", "content": {"type": "text", "text": "Hi, Ann"}}]}
        r[("Mcp", "Request")] = h.McpResponse(result_json=json.dumps(got))
        assert await in_thread(mcp.get_prompt, "files", "greet", {"name": "Ann"}) == got
        req = last(broker, "Mcp", "Request")
        assert (req.method, json.loads(req.params_json)) == ("prompts/get", {"name": "greet", "arguments": {"name": "Ann"}})
        await mcp.get_prompt("files", "greet")
        assert json.loads(last(broker, "Mcp", "Request").params_json) == {"name": "greet", "arguments": {}}

        r[("Mcp", "Request")] = (grpc.StatusCode.FAILED_PRECONDITION, "MCP server files: resources/read: Unknown resource")
        with pytest.raises(HostError) as e:
            await mcp.read_resource("files", "a://nope")
        assert e.value.code == "FAILED_PRECONDITION" and e.value.method == "hearth.v1.Mcp/Request"
        assert str(e.value).startswith("plugin typed: mcp.request (hearth.v1.Mcp/Request): FAILED_PRECONDITION: ")
        with pytest.raises(TypeError, match="mcp.request: value is not JSON"):
            mcp.request("files", "resources/list", {"x": object()})

    run(tmp_path, body)
