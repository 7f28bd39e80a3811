//! Tests of the adapter host's own bounds: wall time per call (C functions included), no
//! call waiting behind another one's VM, and where `http_get` / `http_post` may go.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::tests::{http_server, net_adapter, net_call, NET};
use super::*;

/// `transform_request` runs `string.find(string.rep("a", n), ".-.-.-b")` when the request
/// has `n` (a C function the instruction budget cannot interrupt: n = 500 took 10 s), else
/// answers at once. `transform_stream_chunk` counts the chunks of its VM.
const SLOW: &str = r#"
local a = { name = "slow", endpoint = "" }
local chunks = 0
function a.transform_request(raw)
  local r = json.decode(raw)
  if r.n then string.find(string.rep("a", r.n), ".-.-.-b") end
  return json.encode({ ok = true })
end
function a.transform_response(raw) return raw end
function a.transform_stream_chunk(data)
  chunks = chunks + 1
  return json.encode({ content = tostring(chunks) })
end
return a
"#;

fn slow(timeout: Duration) -> Adapter {
    let limits = Limits {
        timeout,
        ..Limits::default()
    };
    Adapter::from_source("slow.lua", SLOW, &limits).unwrap()
}

#[test]
fn a_pathological_pattern_fails_within_the_bound_and_the_adapter_goes_on() {
    let a = slow(Duration::from_millis(300));
    let started = Instant::now();
    let e = a.transform_request(&json!({"n": 500})).unwrap_err();
    let took = started.elapsed();
    assert_eq!(
        e,
        AdapterError::Timeout {
            adapter: "slow".into(),
            function: "transform_request".into(),
            limit_ms: 300,
        }
    );
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(3),
        "{took:?}"
    );
    let message = e.to_string();
    assert!(
        message.contains("adapter slow: transform_request did not finish within 300 ms")
            && message.contains("[llm] adapter_timeout_ms"),
        "{message}"
    );
    // The next call gets another VM.
    assert_eq!(
        a.transform_request(&json!({})).unwrap(),
        json!({"ok": true})
    );
}

#[test]
fn a_call_is_not_blocked_behind_a_stuck_one() {
    let a = Arc::new(slow(Duration::from_millis(1500)));
    let stuck = {
        let a = a.clone();
        std::thread::spawn(move || {
            let started = Instant::now();
            (a.transform_request(&json!({"n": 500})), started.elapsed())
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    let started = Instant::now();
    assert_eq!(
        a.transform_request(&json!({})).unwrap(),
        json!({"ok": true})
    );
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(700),
        "waited {took:?} behind the stuck call"
    );
    let (r, took) = stuck.join().unwrap();
    assert!(matches!(r, Err(AdapterError::Timeout { .. })), "{r:?}");
    assert!(took < Duration::from_secs(4), "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_call_does_not_hold_a_runtime_thread() {
    let a = Arc::new(slow(Duration::from_millis(1500)));
    let stuck = {
        let a = a.clone();
        tokio::spawn(async move { a.transform_request(&json!({"n": 500})) })
    };
    // Meanwhile the runtime's tasks (timers here) keep running on both workers.
    let started = Instant::now();
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        started.elapsed() < Duration::from_millis(1000),
        "{:?}",
        started.elapsed()
    );
    let r = stuck.await.unwrap();
    assert!(matches!(r, Err(AdapterError::Timeout { .. })), "{r:?}");
}

#[test]
fn a_session_keeps_its_vm_and_sessions_do_not_share_one() {
    let a = slow(Duration::from_secs(2));
    let one = a.session();
    let two = a.session();
    let content = |s: &Session<'_>| s.transform_stream_chunk("x").unwrap().unwrap().content;
    assert_eq!(content(&one), "1");
    assert_eq!(content(&one), "2");
    assert_eq!(
        content(&two),
        "1",
        "the second session got the first one's VM"
    );
    assert_eq!(content(&one), "3");
    one.stream_ended();
    drop(one);
    // A session whose stream ended cleanly gives its VM back for the next one...
    let next = a.session();
    assert_eq!(content(&next), "4");
    // ...one whose stream did not (cut, failed) takes its VM, and whatever the script
    // kept, with it: the next session starts on a fresh VM.
    drop(next);
    assert_eq!(content(&a.session()), "1", "a cut stream's VM was reused");
}

#[test]
fn abandoned_calls_still_running_are_capped_then_drain() {
    // Each call runs past 40 ms and ends by itself a little later.
    let a = slow(Duration::from_millis(40));
    for _ in 0..pool::MAX_STUCK {
        let r = a.transform_request(&json!({"n": 200}));
        assert!(matches!(r, Err(AdapterError::Timeout { .. })), "{r:?}");
    }
    match a.transform_request(&json!({})) {
        Err(e @ AdapterError::Stuck { .. }) => {
            let message = e.to_string();
            assert!(
                message.contains("adapter slow: transform_request: refused"),
                "{message}"
            );
        }
        // Some already ended (a fast machine): nothing to refuse.
        Ok(_) => {}
        Err(other) => panic!("{other}"),
    }
    let started = Instant::now();
    loop {
        match a.transform_request(&json!({})) {
            Ok(_) => break,
            Err(AdapterError::Stuck { .. }) => {
                assert!(
                    started.elapsed() < Duration::from_secs(120),
                    "they never ended"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(other) => panic!("{other}"),
        }
    }
}

#[test]
fn a_top_level_that_does_not_end_fails_the_load() {
    let limits = Limits {
        timeout: Duration::from_millis(200),
        ..Limits::default()
    };
    let source = "string.find(string.rep('a', 500), '.-.-.-b')\nreturn {}";
    let e = Adapter::from_source("hang.lua", source, &limits).unwrap_err();
    let message = e.to_string();
    assert!(
        message.starts_with("adapter file hang.lua: ")
            && message.contains("did not finish within 200 ms")
            && message.contains("adapter_timeout_ms"),
        "{message}"
    );
}

#[test]
fn time_in_http_calls_does_not_count_toward_the_bound() {
    // The server answers after 400 ms; the bound is 150 ms.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = std::thread::spawn(move || {
        use std::io::{Read, Write};
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = [0u8; 1024];
        let _ = s.read(&mut buf);
        std::thread::sleep(Duration::from_millis(400));
        let _ =
            s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\nlate");
    });
    let limits = Limits {
        timeout: Duration::from_millis(150),
        http_allow: vec![HostPort::of_url(&url).unwrap()],
        ..Limits::default()
    };
    let a = Adapter::from_source("net.lua", NET, &limits).unwrap();
    assert_eq!(net_call(&a, &format!("{url}/slow"), None).unwrap(), "late");
    server.join().unwrap();
}

// ---------------------------------------------------------------- http allow-list

#[test]
fn host_port_entries_parse_and_name_what_is_wrong() {
    let hp = |s: &str| s.parse::<HostPort>();
    assert_eq!(
        hp("API.Example.com:443").unwrap().to_string(),
        "api.example.com:443"
    );
    assert_eq!(hp("10.0.0.5:8080").unwrap().to_string(), "10.0.0.5:8080");
    assert_eq!(hp("[FD00::1]:80").unwrap().to_string(), "[fd00::1]:80");
    for bad in [
        "example.com",
        "example.com:http",
        "http://example.com:80",
        ":80",
        "fd00::1:80",
    ] {
        let e = hp(bad).unwrap_err();
        assert!(e.contains(bad) && e.contains("host:port"), "{bad}: {e}");
    }
    assert_eq!(
        HostPort::of_url("https://api.openai.com/v1"),
        hp("api.openai.com:443").ok()
    );
    assert_eq!(HostPort::of_url("http://h:8080/x"), hp("h:8080").ok());
}

#[test]
fn http_reaches_only_the_source_host_and_the_allow_list() {
    let (url, server) = http_server("200 OK", 1);
    let host = HostPort::of_url(&url).unwrap();
    let script = |limits: &Limits| Adapter::from_source("net.lua", NET, limits).unwrap();
    let call = |s: &Session<'_>, target: &str| {
        s.transform_request(&json!({ "url": target }))
            .map(|v| v["got"].as_str().unwrap().to_owned())
            .map_err(|e| e.to_string())
    };

    // No source, nothing listed: refused before any connection, naming host and setting.
    let a = script(&Limits::default());
    let e = call(&a.session(), &format!("{url}/x")).unwrap_err();
    assert!(
        e.contains(&format!("http_get {url}/x: host {host} is not allowed"))
            && e.contains("[adapters] http_allow"),
        "{e}"
    );
    // Another host than the source's.
    let e = call(
        &a.session_for("https://api.example.com/v1"),
        "http://other.example/x",
    )
    .unwrap_err();
    assert!(
        e.contains("host other.example:80 is not allowed")
            && e.contains("the source this adapter serves (api.example.com:443)"),
        "{e}"
    );
    // The source's own host, but on loopback: refused unless listed.
    let e = call(&a.session_for(&url), &format!("{url}/x")).unwrap_err();
    assert!(
        e.contains(&format!(
            "host {host} is a loopback, LAN, link-local or reserved address"
        )) && e.contains(&format!("add \"{host}\"")),
        "{e}"
    );
    // A name resolving to loopback likewise.
    let local = format!("http://localhost:{}", url.rsplit(':').next().unwrap());
    let e = call(&a.session_for(&local), &format!("{local}/x")).unwrap_err();
    assert!(e.contains("resolves to") && e.contains("http_allow"), "{e}");
    // Link-local (cloud metadata), even as the source.
    let e = call(
        &a.session_for("http://169.254.169.254"),
        "http://169.254.169.254/latest/meta-data/",
    )
    .unwrap_err();
    assert!(
        e.contains("host 169.254.169.254:80 is a loopback, LAN"),
        "{e}"
    );

    // Listed: reached.
    let a = net_adapter(&url);
    assert_eq!(
        call(&a.session(), &format!("{url}/ok")).unwrap(),
        "GET /ok "
    );
    server.join().unwrap();
}

#[test]
fn http_follows_no_redirects() {
    let (url, server) = http_server(
        "302 Found\r\nLocation: http://169.254.169.254/latest/meta-data/",
        1,
    );
    let a = net_adapter(&url);
    let e = net_call(&a, &format!("{url}/token"), None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!("http_get {url}/token: HTTP 302 Found: redirect to http://169.254.169.254/latest/meta-data/ not followed")),
        "{e}"
    );
    server.join().unwrap();
}
