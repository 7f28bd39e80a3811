//! A loopback HTTP server that answers with exact bytes, for wire tests: each request
//! gets the next scripted [`Reply`] (the last one repeats), written as its chunks in
//! separate writes with a pause between them (split reads, split UTF-8, odd framing),
//! and closes the connection (the body ends at EOF unless the reply sets its own
//! `Content-Length`). Every request is recorded for the test to inspect.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One scripted answer.
#[derive(Debug, Clone)]
pub struct Reply {
    /// HTTP status code.
    pub status: u16,
    /// Extra headers (`Content-Type` included when wanted).
    pub headers: Vec<(String, String)>,
    /// The body, written one chunk per write.
    pub chunks: Vec<Vec<u8>>,
    /// Pause between two chunk writes.
    pub pause: Duration,
}

impl Reply {
    /// A 200 with `content_type` whose body is `chunks`, 5 ms apart.
    pub fn ok(content_type: &str, chunks: Vec<Vec<u8>>) -> Reply {
        Reply {
            status: 200,
            headers: vec![("Content-Type".into(), content_type.into())],
            chunks,
            pause: Duration::from_millis(5),
        }
    }

    /// `body` split into pieces of at most `size` bytes (UTF-8 may split mid-character).
    pub fn split(body: &[u8], size: usize) -> Vec<Vec<u8>> {
        body.chunks(size.max(1)).map(<[u8]>::to_vec).collect()
    }
}

/// One request as the server received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// e.g. `POST`.
    pub method: String,
    /// Path with query.
    pub path: String,
    /// Header names lower-cased, in order.
    pub headers: Vec<(String, String)>,
    /// The body bytes.
    pub body: Vec<u8>,
}

impl Recorded {
    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }

    /// The first header named `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A running server; stops when dropped.
pub struct WireServer {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
    task: tokio::task::JoinHandle<()>,
}

impl WireServer {
    /// Serves `replies` in order on a fresh loopback port.
    pub async fn start(replies: Vec<Reply>) -> WireServer {
        assert!(!replies.is_empty());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let recorded = requests.clone();
        let task = tokio::spawn(async move {
            let mut next = 0usize;
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let reply = replies[next.min(replies.len() - 1)].clone();
                next += 1;
                let recorded = recorded.clone();
                tokio::spawn(async move {
                    let _ = serve(stream, reply, recorded).await;
                });
            }
        });
        WireServer {
            url,
            requests,
            task,
        }
    }

    /// Every request so far, oldest first.
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for WireServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(
    mut stream: tokio::net::TcpStream,
    reply: Reply,
    recorded: Arc<Mutex<Vec<Recorded>>>,
) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).await? == 0 {
            return Ok(());
        }
        buf.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buf).into_owned();
    let mut lines = head.lines();
    let mut first = lines.next().unwrap_or("").split(' ');
    let (method, path) = (
        first.next().unwrap_or("").to_string(),
        first.next().unwrap_or("").to_string(),
    );
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0usize);
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).await?;
    recorded.lock().unwrap().push(Recorded {
        method,
        path,
        headers,
        body,
    });
    let mut out = format!("HTTP/1.1 {} X\r\nConnection: close\r\n", reply.status);
    for (k, v) in &reply.headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    stream.write_all(out.as_bytes()).await?;
    stream.flush().await?;
    for chunk in &reply.chunks {
        tokio::time::sleep(reply.pause).await;
        stream.write_all(chunk).await?;
        stream.flush().await?;
    }
    stream.shutdown().await
}
