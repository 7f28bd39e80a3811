//! A fake OpenTelemetry collector for the tests: OTLP/gRPC (`TraceService.Export`, the
//! official proto definitions from `opentelemetry-proto`) and OTLP/HTTP
//! (`POST /v1/traces`, protobuf) on 127.0.0.1 port 0, keeping every span it receives
//! with its resource's `service.name`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;

/// A span as received, with the service that sent it.
#[derive(Debug, Clone)]
pub struct Received {
    pub service: String,
    pub span: Span,
}

impl Received {
    pub fn name(&self) -> &str {
        &self.span.name
    }
    pub fn trace_id(&self) -> String {
        hex(&self.span.trace_id)
    }
    pub fn span_id(&self) -> String {
        hex(&self.span.span_id)
    }
    pub fn parent_id(&self) -> String {
        hex(&self.span.parent_span_id)
    }
    /// An attribute as text (strings as they are, numbers and bools formatted, arrays as
    /// `[a,b]`); `None` when absent.
    pub fn attr(&self, key: &str) -> Option<String> {
        self.span
            .attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.as_ref()?.value.as_ref().map(any_text))
    }
}

fn any_text(v: &AnyValue) -> String {
    match v {
        AnyValue::StringValue(s) => s.clone(),
        AnyValue::IntValue(i) => i.to_string(),
        AnyValue::BoolValue(b) => b.to_string(),
        AnyValue::DoubleValue(d) => d.to_string(),
        AnyValue::ArrayValue(a) => format!(
            "[{}]",
            a.values
                .iter()
                .filter_map(|v| v.value.as_ref().map(any_text))
                .collect::<Vec<_>>()
                .join(",")
        ),
        other => format!("{other:?}"),
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[derive(Debug, Clone, Default)]
struct Store(Arc<Mutex<Vec<Received>>>);

impl Store {
    fn add(&self, req: ExportTraceServiceRequest) {
        let mut all = self.0.lock().unwrap();
        for rs in req.resource_spans {
            let service = rs
                .resource
                .as_ref()
                .and_then(|r| r.attributes.iter().find(|kv| kv.key == "service.name"))
                .and_then(|kv| kv.value.as_ref()?.value.as_ref().map(any_text))
                .unwrap_or_default();
            for ss in rs.scope_spans {
                for span in ss.spans {
                    all.push(Received {
                        service: service.clone(),
                        span,
                    });
                }
            }
        }
    }
}

#[tonic::async_trait]
impl TraceService for Store {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.add(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// The collector; its servers stop when it is dropped.
pub struct Collector {
    store: Store,
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Collector {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Collector {
    pub async fn start() -> Collector {
        let store = Store::default();
        let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let grpc_addr = grpc.local_addr().unwrap();
        let svc = TraceServiceServer::new(store.clone());
        let t1 = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(grpc))
                .await;
        });
        let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let http_addr = http.local_addr().unwrap();
        let s = store.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: axum::body::Bytes| {
                let s = s.clone();
                async move {
                    match ExportTraceServiceRequest::decode(body) {
                        Ok(req) => {
                            s.add(req);
                            (
                                axum::http::StatusCode::OK,
                                [("content-type", "application/x-protobuf")],
                                ExportTraceServiceResponse::default().encode_to_vec(),
                            )
                        }
                        Err(e) => (
                            axum::http::StatusCode::BAD_REQUEST,
                            [("content-type", "text/plain")],
                            e.to_string().into_bytes(),
                        ),
                    }
                }
            }),
        );
        let t2 = tokio::spawn(async move {
            let _ = axum::serve(http, app).await;
        });
        Collector {
            store,
            grpc: grpc_addr,
            http: http_addr,
            tasks: vec![t1, t2],
        }
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Received> {
        self.store.0.lock().unwrap().clone()
    }

    /// Waits until `done(spans)` holds (at most `within`); returns the spans.
    pub async fn wait(
        &self,
        within: Duration,
        what: &str,
        done: impl Fn(&[Received]) -> bool,
    ) -> Vec<Received> {
        let started = Instant::now();
        loop {
            let spans = self.spans();
            if done(&spans) {
                return spans;
            }
            assert!(
                started.elapsed() < within,
                "collector: {what} not received within {within:?}; got {:#?}",
                spans
                    .iter()
                    .map(|s| format!("{} [{}] {}", s.service, s.span_id(), s.name()))
                    .collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
