//! The typed APIs against an in-process fake of the host services: the request each
//! method sends (with the plugin's token) and what it makes of the response.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hearth_proto::v1 as pb;
use serde_json::json;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Request, Response, Status};

use super::*;

type Reply = Box<dyn Fn(&dyn Any) -> Result<Box<dyn Any + Send>, Status> + Send + Sync>;

/// (method, token, request) of one call.
type Call = (String, String, Box<dyn Any + Send>);

/// Records every call (method, token, request) and answers from `replies`.
#[derive(Default)]
struct Fake {
    calls: Mutex<Vec<Call>>,
    replies: Mutex<HashMap<String, Reply>>,
}

impl Fake {
    fn answer<Req: Any + Send, Res: Any>(
        &self,
        method: &str,
        r: Request<Req>,
    ) -> Result<Response<Res>, Status> {
        let token = r
            .metadata()
            .get(hearth_proto::TOKEN_METADATA)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let req = r.into_inner();
        let out = match self.replies.lock().unwrap().get(method) {
            Some(reply) => reply(&req),
            None => Err(Status::unimplemented(format!("{method} not faked"))),
        };
        self.calls
            .lock()
            .unwrap()
            .push((method.into(), token, Box::new(req)));
        Ok(Response::new(
            *out?.downcast::<Res>().expect("reply of another type"),
        ))
    }

    /// Answers `method` (`settings.get`) with `f(request)`.
    fn reply<Req: 'static, Res: Send + 'static>(
        &self,
        method: &str,
        f: impl Fn(&Req) -> Result<Res, Status> + Send + Sync + 'static,
    ) {
        let reply: Reply = Box::new(move |req| {
            f(req.downcast_ref::<Req>().expect("request of another type"))
                .map(|r| Box::new(r) as Box<dyn Any + Send>)
        });
        self.replies.lock().unwrap().insert(method.into(), reply);
    }

    /// The request of the last call of `method`, which carried the token.
    fn last<Req: Clone + 'static>(&self, method: &str) -> Req {
        let calls = self.calls.lock().unwrap();
        let (_, token, req) = calls
            .iter()
            .rev()
            .find(|(m, _, _)| m == method)
            .unwrap_or_else(|| panic!("no {method} call"));
        assert_eq!(token, "tok-typed");
        req.downcast_ref::<Req>().expect("request type").clone()
    }
}

macro_rules! fake_service {
    ($wrapper:ident, $module:ident :: $trait:ident, $prefix:literal,
     [$($m:ident: $req:ty => $res:ty),* $(,)?]) => {
        #[derive(Clone)]
        struct $wrapper(Arc<Fake>);

        #[tonic::async_trait]
        impl pb::$module::$trait for $wrapper {
            $(async fn $m(&self, r: Request<$req>) -> Result<Response<$res>, Status> {
                self.0.answer(concat!($prefix, ".", stringify!($m)), r)
            })*
        }
    };
}

fake_service!(FakeSettings, settings_server::Settings, "settings", [
    get: pb::KeyRequest => pb::ValueResponse,
    set: pb::SetRequest => pb::Empty,
    list: pb::PrefixRequest => pb::KeysResponse,
    get_core: pb::KeyRequest => pb::ValueResponse,
    set_core: pb::SetRequest => pb::Empty,
    list_core: pb::PrefixRequest => pb::KeysResponse,
    get_plugin: pb::KeyRequest => pb::ValueResponse,
    set_plugin: pb::SetRequest => pb::Empty,
    list_plugin: pb::PrefixRequest => pb::KeysResponse,
    register_def: pb::ConfigDef => pb::Empty,
    defs: pb::PrefixRequest => pb::DefsResponse,
    dump: pb::Empty => pb::DumpResponse,
    plugins: pb::Empty => pb::KeysResponse,
]);
fake_service!(FakeMemory, memory_server::Memory, "memory", [
    recall: pb::RecallRequest => pb::RecallResponse,
    commit: pb::CommitRequest => pb::CommitResponse,
    introspect: pb::Empty => pb::IntrospectResponse,
    merge_entities: pb::MergeRequest => pb::CountResponse,
    purge: pb::PurgeRequest => pb::CountResponse,
]);
fake_service!(FakeTextMemory, text_memory_server::TextMemory, "text_memory", [
    append: pb::TextEvent => pb::Empty,
]);
fake_service!(FakeDocMemory, doc_memory_server::DocMemory, "doc_memory", [
    query: pb::DocQuery => pb::DocsResponse,
    insert: pb::Doc => pb::Empty,
    remove: pb::IdRequest => pb::Empty,
    stats: pb::Empty => pb::StatsResponse,
]);
fake_service!(FakeKnowledge, knowledge_server::Knowledge, "knowledge", [
    search: pb::KnowledgeQuery => pb::KnowledgeResponse,
    add: pb::KnowledgeEntry => pb::Empty,
    list: pb::Empty => pb::KeysResponse,
]);
fake_service!(FakeLlm, llm_server::Llm, "llm", [
    list_sources: pb::Empty => pb::KeysResponse,
    set_source: pb::SourceRequest => pb::Empty,
    current_source: pb::Empty => pb::SourceRequest,
]);
fake_service!(FakeMcp, mcp_server::Mcp, "mcp", [
    request: pb::McpRequest => pb::McpResponse,
]);

/// A fake broker on TCP loopback and a `Host` of plugin `typed` talking to it.
async fn fake() -> (Arc<Fake>, Host, tokio::task::JoinHandle<()>) {
    let fake = Arc::new(Fake::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = tonic::transport::Server::builder()
        .add_service(pb::settings_server::SettingsServer::new(FakeSettings(
            fake.clone(),
        )))
        .add_service(pb::memory_server::MemoryServer::new(FakeMemory(
            fake.clone(),
        )))
        .add_service(pb::text_memory_server::TextMemoryServer::new(
            FakeTextMemory(fake.clone()),
        ))
        .add_service(pb::doc_memory_server::DocMemoryServer::new(FakeDocMemory(
            fake.clone(),
        )))
        .add_service(pb::knowledge_server::KnowledgeServer::new(FakeKnowledge(
            fake.clone(),
        )))
        .add_service(pb::llm_server::LlmServer::new(FakeLlm(fake.clone())))
        .add_service(pb::mcp_server::McpServer::new(FakeMcp(fake.clone())));
    let server = tokio::spawn(async move {
        router
            .serve_with_incoming(TcpListenerStream::new(listener))
            .await
            .unwrap();
    });
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let host = Host::new(channel, "tok-typed".parse().unwrap(), "typed".into());
    (fake, host, server)
}

fn value(json: &str) -> Result<pb::ValueResponse, Status> {
    Ok(pb::ValueResponse {
        value_json: json.into(),
    })
}

fn keys(keys: &[&str]) -> Result<pb::KeysResponse, Status> {
    Ok(pb::KeysResponse {
        keys: keys.iter().map(|k| k.to_string()).collect(),
    })
}

#[tokio::test]
async fn settings_map_values_keys_defs_and_dump() {
    let (f, host, server) = fake().await;
    let s = host.settings();
    f.reply("settings.get", |r: &pb::KeyRequest| {
        value(match r.key.as_str() {
            "n" => "42",
            "f" => "2.5",
            "o" => r#"{"a":[1,null]}"#,
            _ => "null",
        })
    });
    assert_eq!(s.get("n").await.unwrap(), json!(42));
    assert!(s.get("n").await.unwrap().is_i64());
    assert!(s.get("f").await.unwrap().is_f64());
    assert_eq!(s.get("o").await.unwrap(), json!({"a": [1, null]}));
    assert_eq!(s.get("z").await.unwrap(), Value::Null);
    assert_eq!(
        f.last::<pb::KeyRequest>("settings.get"),
        pb::KeyRequest {
            key: "z".into(),
            plugin: String::new()
        }
    );

    f.reply("settings.set", |_: &pb::SetRequest| Ok(pb::Empty {}));
    s.set("k", json!({"城市": "北京"})).await.unwrap();
    let r = f.last::<pb::SetRequest>("settings.set");
    assert_eq!(
        (r.key.as_str(), r.value_json.as_str()),
        ("k", r#"{"城市":"北京"}"#)
    );
    s.set("n", 7u8).await.unwrap();
    assert_eq!(f.last::<pb::SetRequest>("settings.set").value_json, "7");

    f.reply("settings.list", |_: &pb::PrefixRequest| keys(&["a", "b"]));
    assert_eq!(s.list("p").await.unwrap(), ["a", "b"]);
    assert_eq!(f.last::<pb::PrefixRequest>("settings.list").prefix, "p");
    f.reply("settings.get_core", |_: &pb::KeyRequest| {
        value(r#""/data""#)
    });
    assert_eq!(s.get_core("core.dir").await.unwrap(), json!("/data"));
    f.reply("settings.set_core", |_: &pb::SetRequest| Ok(pb::Empty {}));
    s.set_core("core.x", true).await.unwrap();
    assert_eq!(
        f.last::<pb::SetRequest>("settings.set_core").value_json,
        "true"
    );
    f.reply("settings.list_core", |_: &pb::PrefixRequest| {
        keys(&["core.x"])
    });
    assert_eq!(s.list_core("core.").await.unwrap(), ["core.x"]);

    f.reply("settings.get_plugin", |_: &pb::KeyRequest| value("1"));
    assert_eq!(s.get_plugin("qq", "napcat").await.unwrap(), json!(1));
    assert_eq!(
        f.last::<pb::KeyRequest>("settings.get_plugin"),
        pb::KeyRequest {
            key: "napcat".into(),
            plugin: "qq".into()
        }
    );
    f.reply("settings.set_plugin", |_: &pb::SetRequest| Ok(pb::Empty {}));
    s.set_plugin("qq", "k", [1, 2]).await.unwrap();
    let r = f.last::<pb::SetRequest>("settings.set_plugin");
    assert_eq!(
        (r.plugin.as_str(), r.key.as_str(), r.value_json.as_str()),
        ("qq", "k", "[1,2]")
    );
    f.reply("settings.list_plugin", |_: &pb::PrefixRequest| keys(&["k"]));
    assert_eq!(s.list_plugin("qq", "k").await.unwrap(), ["k"]);
    let r = f.last::<pb::PrefixRequest>("settings.list_plugin");
    assert_eq!((r.plugin.as_str(), r.prefix.as_str()), ("qq", "k"));

    f.reply("settings.register_def", |_: &pb::ConfigDef| {
        Ok(pb::Empty {})
    });
    let def = ConfigDef {
        key: "days".into(),
        default: Some(json!(3)),
        display_name: "Days".into(),
        min: Some(0.0),
        options: vec!["1".into()],
        secret: true,
        ..ConfigDef::default()
    };
    s.register_def(def.clone()).await.unwrap();
    let w = f.last::<pb::ConfigDef>("settings.register_def");
    assert_eq!(
        (w.key.as_str(), w.default_json.as_str(), w.r#type.as_str()),
        ("days", "3", "string")
    );
    assert_eq!(
        (w.min, w.max, w.secret, w.options),
        (Some(0.0), None, true, vec!["1".to_string()])
    );
    let e = s.register_def(ConfigDef::default()).await.unwrap_err();
    assert_eq!(e.code_name(), "INVALID_ARGUMENT");

    f.reply("settings.defs", |_: &pb::PrefixRequest| {
        Ok(pb::DefsResponse {
            defs: vec![pb::ConfigDef {
                key: "days".into(),
                default_json: "3".into(),
                r#type: "number".into(),
                display_name: "Days".into(),
                min: Some(0.0),
                ..Default::default()
            }],
        })
    });
    let defs = s.defs("").await.unwrap();
    assert_eq!(
        serde_json::to_value(&defs).unwrap(),
        json!([{"key": "days", "default": 3, "type": "number", "display_name": "Days", "min": 0.0}])
    );
    f.reply("settings.dump", |_: &pb::Empty| {
        Ok(pb::DumpResponse {
            dump_json: r#"{"core":{},"plugins":{}}"#.into(),
        })
    });
    assert_eq!(s.dump().await.unwrap(), json!({"core": {}, "plugins": {}}));
    f.reply("settings.plugins", |_: &pb::Empty| keys(&["typed"]));
    assert_eq!(s.plugins().await.unwrap(), ["typed"]);
    server.abort();
}

#[tokio::test]
async fn memory_docs_knowledge_and_llm_map_requests_and_responses() {
    let (f, host, server) = fake().await;
    let m = host.memory();
    f.reply("memory.recall", |_: &pb::RecallRequest| {
        Ok(pb::RecallResponse {
            entities: vec![pb::Entity {
                name: "Alice".into(),
                r#type: "Person".into(),
                mention_count: 3,
            }],
            relations: vec![pb::Relation {
                source_name: "Alice".into(),
                target_name: "tea".into(),
                relation_type: "likes".into(),
            }],
        })
    });
    let (entities, relations) = m.recall(["alice", "茶"], 2).await.unwrap();
    assert_eq!(
        serde_json::to_value((&entities, &relations)).unwrap(),
        json!([[{"name": "Alice", "type": "Person", "mention_count": 3}],
               [{"source_name": "Alice", "target_name": "tea", "relation_type": "likes"}]])
    );
    let r = f.last::<pb::RecallRequest>("memory.recall");
    assert_eq!(
        (r.keywords, r.depth),
        (vec!["alice".to_string(), "茶".into()], 2)
    );

    f.reply("memory.commit", |r: &pb::CommitRequest| {
        Ok(pb::CommitResponse {
            committed: r.triples.len() as u32,
        })
    });
    let typed = Triple {
        session_id: "s".into(),
        ..Triple::new("Bob", "knows", "Alice")
    };
    assert_eq!(m.commit([typed]).await.unwrap(), 1);
    assert_eq!(m.commit([("Alice", "likes", "tea")]).await.unwrap(), 1);
    let t = &f.last::<pb::CommitRequest>("memory.commit").triples[0];
    assert_eq!(
        (t.subject.as_str(), t.relation.as_str(), t.object.as_str()),
        ("Alice", "likes", "tea")
    );
    f.reply("memory.introspect", |_: &pb::Empty| {
        Ok(pb::IntrospectResponse {
            stats_json: r#"{"entities":2}"#.into(),
        })
    });
    assert_eq!(m.introspect().await.unwrap(), json!({"entities": 2}));
    f.reply("memory.merge_entities", |_: &pb::MergeRequest| {
        Ok(pb::CountResponse { count: 4 })
    });
    assert_eq!(m.merge_entities("Bobby", "Bob").await.unwrap(), 4);
    let r = f.last::<pb::MergeRequest>("memory.merge_entities");
    assert_eq!((r.source.as_str(), r.target.as_str()), ("Bobby", "Bob"));
    f.reply("memory.purge", |_: &pb::PurgeRequest| {
        Ok(pb::CountResponse { count: 1 })
    });
    assert_eq!(
        m.purge([("relation_type", "likes")], "hard").await.unwrap(),
        1
    );
    let r = f.last::<pb::PurgeRequest>("memory.purge");
    assert_eq!(
        (r.criteria["relation_type"].as_str(), r.mode.as_str()),
        ("likes", "hard")
    );

    f.reply("text_memory.append", |_: &pb::TextEvent| Ok(pb::Empty {}));
    let event = TextEvent {
        role: "user".into(),
        content: "你好".into(),
        timestamp: 17,
        channel: String::new(),
    };
    host.text_memory().append(event).await.unwrap();
    assert_eq!(f.last::<pb::TextEvent>("text_memory.append").timestamp, 17);

    let d = host.doc_memory();
    f.reply("doc_memory.query", |_: &pb::DocQuery| {
        Ok(pb::DocsResponse {
            docs: vec![pb::Doc {
                id: "d1".into(),
                title: "t".into(),
                content: "c".into(),
                score: 1.5,
            }],
        })
    });
    let docs = d.query("天气", 3).await.unwrap();
    assert_eq!((docs[0].id.as_str(), docs[0].score), ("d1", 1.5));
    let q = f.last::<pb::DocQuery>("doc_memory.query");
    assert_eq!((q.text.as_str(), q.top_k), ("天气", 3));
    f.reply("doc_memory.insert", |_: &pb::Doc| Ok(pb::Empty {}));
    d.insert(Doc {
        id: "d2".into(),
        content: "C".into(),
        ..Doc::default()
    })
    .await
    .unwrap();
    assert_eq!(f.last::<pb::Doc>("doc_memory.insert").id, "d2");
    f.reply("doc_memory.remove", |_: &pb::IdRequest| Ok(pb::Empty {}));
    d.remove("d2").await.unwrap();
    assert_eq!(f.last::<pb::IdRequest>("doc_memory.remove").id, "d2");
    f.reply("doc_memory.stats", |_: &pb::Empty| {
        Ok(pb::StatsResponse {
            stats_json: r#"{"docs":1}"#.into(),
        })
    });
    assert_eq!(d.stats().await.unwrap(), json!({"docs": 1}));

    let k = host.knowledge();
    f.reply("knowledge.search", |_: &pb::KnowledgeQuery| {
        Ok(pb::KnowledgeResponse {
            entries: vec![pb::KnowledgeEntry {
                name: "n".into(),
                content: "c".into(),
                score: 0.25,
            }],
        })
    });
    let found = k.search("q", 2).await.unwrap();
    assert_eq!((found[0].name.as_str(), found[0].score), ("n", 0.25));
    assert_eq!(f.last::<pb::KnowledgeQuery>("knowledge.search").top_k, 2);
    f.reply("knowledge.add", |_: &pb::KnowledgeEntry| Ok(pb::Empty {}));
    k.add("n", "内容").await.unwrap();
    assert_eq!(
        f.last::<pb::KnowledgeEntry>("knowledge.add").content,
        "内容"
    );
    f.reply("knowledge.list", |_: &pb::Empty| keys(&["n"]));
    assert_eq!(k.list().await.unwrap(), ["n"]);

    let llm = host.llm();
    f.reply("llm.list_sources", |_: &pb::Empty| keys(&["a", "b"]));
    assert_eq!(llm.list_sources().await.unwrap(), ["a", "b"]);
    f.reply("llm.set_source", |_: &pb::SourceRequest| Ok(pb::Empty {}));
    llm.set_source("b").await.unwrap();
    assert_eq!(f.last::<pb::SourceRequest>("llm.set_source").name, "b");
    f.reply("llm.current_source", |_: &pb::Empty| {
        Ok(pb::SourceRequest { name: "b".into() })
    });
    assert_eq!(llm.current_source().await.unwrap(), "b");
    server.abort();
}

#[tokio::test]
async fn errors_carry_the_code_and_the_broker_message() {
    let (f, host, server) = fake().await;
    f.reply(
        "settings.get",
        |_: &pb::KeyRequest| -> Result<pb::ValueResponse, Status> {
            Err(Status::not_found("no `k` in config_typed"))
        },
    );
    let e = host.settings().get("k").await.unwrap_err();
    assert_eq!(
        (e.code(), e.code_name(), e.message(), e.method()),
        (
            tonic::Code::NotFound,
            "NOT_FOUND",
            "no `k` in config_typed",
            "settings.get"
        )
    );
    assert_eq!(
        e.to_string(),
        "plugin typed: settings.get: NOT_FOUND: no `k` in config_typed"
    );
    let e = host.knowledge().list().await.unwrap_err();
    assert_eq!(e.code_name(), "UNIMPLEMENTED");
    assert!(
        e.message().contains("does not serve this host service"),
        "{e}"
    );
    f.reply("settings.get", |_: &pb::KeyRequest| value("{broken"));
    let e = host.settings().get("k").await.unwrap_err();
    assert_eq!(e.code_name(), "INTERNAL");
    assert!(e.message().contains("invalid JSON"), "{e}");
    let boxed: crate::BoxError = e.into();
    assert!(boxed
        .to_string()
        .starts_with("plugin typed: settings.get: INTERNAL"));
    server.abort();
}

fn mcp_result(v: serde_json::Value) -> Result<pb::McpResponse, Status> {
    Ok(pb::McpResponse {
        result_json: v.to_string(),
    })
}

#[tokio::test]
async fn mcp_sends_methods_and_params_maps_results_and_follows_pages() {
    let (f, host, server) = fake().await;
    let m = host.mcp();
    f.reply("mcp.request", |_: &pb::McpRequest| {
        mcp_result(json!({"resources": [{"uri": "a://1"}]}))
    });
    assert_eq!(
        m.request("files", "resources/list", ()).await.unwrap(),
        json!({"resources": [{"uri": "a://1"}]})
    );
    let req = f.last::<pb::McpRequest>("mcp.request");
    assert_eq!(
        (
            req.server.as_str(),
            req.method.as_str(),
            req.params_json.as_str()
        ),
        ("files", "resources/list", "")
    );
    m.request("files", "prompts/list", json!({"cursor": "c"}))
        .await
        .unwrap();
    assert_eq!(
        f.last::<pb::McpRequest>("mcp.request").params_json,
        r#"{"cursor":"c"}"#
    );

    // The listing helpers follow nextCursor over every page.
    f.reply("mcp.request", |r: &pb::McpRequest| {
        let cursor = serde_json::from_str::<serde_json::Value>(&r.params_json)
            .ok()
            .and_then(|p| p["cursor"].as_str().map(String::from));
        mcp_result(match cursor.as_deref() {
            None => json!({"resources": [{"uri": "a://1"}], "nextCursor": "p2"}),
            _ => json!({"resources": [{"uri": "a://2"}]}),
        })
    });
    assert_eq!(
        m.resources("files").await.unwrap(),
        vec![json!({"uri": "a://1"}), json!({"uri": "a://2"})]
    );
    f.reply("mcp.request", |_: &pb::McpRequest| {
        mcp_result(json!({"resourceTemplates": [{"uriTemplate": "a://{id}"}]}))
    });
    assert_eq!(
        m.resource_templates("files").await.unwrap(),
        vec![json!({"uriTemplate": "a://{id}"})]
    );
    assert_eq!(
        f.last::<pb::McpRequest>("mcp.request").method,
        "resources/templates/list"
    );
    f.reply("mcp.request", |_: &pb::McpRequest| {
        mcp_result(json!({"prompts": [{"name": "greet"}]}))
    });
    assert_eq!(
        m.prompts("files").await.unwrap(),
        vec![json!({"name": "greet"})]
    );
    f.reply("mcp.request", |_: &pb::McpRequest| {
        mcp_result(
            json!({"contents": [{"uri": "a://1", "mimeType": "text/plain", "text": "你好"}]}),
        )
    });
    assert_eq!(
        m.read_resource("files", "a://1").await.unwrap(),
        vec![json!({"uri": "a://1", "mimeType": "text/plain", "text": "你好"})]
    );
    let req = f.last::<pb::McpRequest>("mcp.request");
    assert_eq!(
        (req.method.as_str(), req.params_json.as_str()),
        ("resources/read", r#"{"uri":"a://1"}"#)
    );
    let got = json!({"description": "Greet",
        "messages": [{"role": "user", "content": {"type": "text", "text": "Hi, Ann"}}]});
    let reply = got.clone();
    f.reply("mcp.request", move |_: &pb::McpRequest| {
        mcp_result(reply.clone())
    });
    assert_eq!(
        m.get_prompt("files", "greet", json!({"name": "Ann"}))
            .await
            .unwrap(),
        got
    );
    let params: serde_json::Value =
        serde_json::from_str(&f.last::<pb::McpRequest>("mcp.request").params_json).unwrap();
    assert_eq!(
        params,
        json!({"name": "greet", "arguments": {"name": "Ann"}})
    );
    m.get_prompt("files", "greet", ()).await.unwrap();
    let params: serde_json::Value =
        serde_json::from_str(&f.last::<pb::McpRequest>("mcp.request").params_json).unwrap();
    assert_eq!(params, json!({"name": "greet", "arguments": {}}));

    f.reply(
        "mcp.request",
        |_: &pb::McpRequest| -> Result<pb::McpResponse, Status> {
            Err(Status::failed_precondition(
                "MCP server files: resources/read: Unknown resource",
            ))
        },
    );
    let e = m.read_resource("files", "a://nope").await.unwrap_err();
    assert_eq!(
        (e.code_name(), e.method()),
        ("FAILED_PRECONDITION", "mcp.request")
    );
    assert_eq!(
        e.to_string(),
        "plugin typed: mcp.request: FAILED_PRECONDITION: MCP server files: resources/read: Unknown resource"
    );
    server.abort();
}
