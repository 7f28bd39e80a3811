//! The Mcp host service as plugins use it through the SDKs (`sdk.mcp()`): a Python and
//! a Node plugin with capability `mcp` read the resources and prompts of an MCP server
//! that runs as a plugin (`"runtime": "mcp"`, tests/plugins/mcp/py_server.py, written
//! with the official Python MCP SDK), and get the broker's errors; a plugin without the
//! capability is refused, naming it.

use serde_json::{json, Value};

use crate::harness::{mcp_fixture as fixture, python, Broker, PluginDir};

/// The MCP server `pymcp` (stdio): resource `test://doc/1` ("hello resource"), prompt
/// `greet(name)`.
fn pymcp() -> PluginDir {
    PluginDir {
        dir: "pymcp".into(),
        manifest: json!({"name": "pymcp", "runtime": "mcp",
            "command": [python(), fixture("py_server.py")]}),
    }
}

/// The reader plugin in `lang` (`py`: py_reader.py, `nd`: node_reader.js) named `name`,
/// with `capabilities` (None: the broker's defaults, which leave `mcp` out).
fn reader(lang: &str, name: &str, capabilities: Option<&[&str]>) -> PluginDir {
    let mut manifest = match lang {
        "py" => json!({"runtime": "python", "entry": fixture("py_reader.py")}),
        "nd" => json!({"runtime": "node", "entry": fixture("node_reader.js")}),
        other => panic!("unknown language {other}"),
    };
    manifest["name"] = json!(name);
    if let Some(caps) = capabilities {
        manifest["capabilities"] = json!(caps);
    }
    PluginDir {
        dir: name.into(),
        manifest,
    }
}

/// Calls `tool`; the content when it succeeded, else the error text.
async fn outcome(b: &mut Broker, tool: &str, args: Value) -> Result<String, String> {
    let r = b
        .call(tool, args)
        .await
        .unwrap_or_else(|e| panic!("{tool}: {e:?}"));
    if r.success {
        Ok(r.content)
    } else {
        Err(r.error)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_read_an_mcp_servers_resources_and_prompts_through_the_sdks() {
    let mcp = ["mcp"];
    let mut b = Broker::start(vec![
        pymcp(),
        reader("py", "pyreader", Some(&mcp)),
        reader("nd", "ndreader", Some(&mcp)),
        reader("py", "nocap", None),
    ])
    .await;

    for name in ["pyreader", "ndreader"] {
        let read = format!("{name}_read");
        assert_eq!(
            outcome(
                &mut b,
                &read,
                json!({"server": "pymcp", "uri": "test://doc/1"})
            )
            .await,
            Ok("hello resource".into()),
            "{name}"
        );
        assert_eq!(
            outcome(
                &mut b,
                &format!("{name}_greet"),
                json!({"server": "pymcp", "name": "Ann"})
            )
            .await,
            Ok("Hello, Ann!".into()),
            "{name}"
        );
        let listing = outcome(
            &mut b,
            &format!("{name}_listing"),
            json!({"server": "pymcp"}),
        )
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let listing: Value = serde_json::from_str(&listing).unwrap();
        assert!(
            listing["resources"]
                .as_array()
                .unwrap()
                .contains(&json!("test://doc/1"))
                && listing["prompts"]
                    .as_array()
                    .unwrap()
                    .contains(&json!("greet"))
                && listing["templates"].is_u64(),
            "{name}: {listing}"
        );

        // The broker's errors reach the plugin as HostErrors naming the rpc and the status.
        let err = outcome(
            &mut b,
            &read,
            json!({"server": "nope", "uri": "test://doc/1"}),
        )
        .await
        .unwrap_err();
        assert!(
            err.contains("mcp.request")
                && err.contains("NOT_FOUND")
                && err.contains("no MCP plugin named nope"),
            "{name}: {err}"
        );
        let err = outcome(
            &mut b,
            &read,
            json!({"server": "pymcp", "uri": "test://nope"}),
        )
        .await
        .unwrap_err();
        assert!(
            err.contains("FAILED_PRECONDITION") && err.contains("MCP server pymcp: resources/read"),
            "{name}: {err}"
        );
        // A plugin that is not an MCP server is no MCP plugin either.
        let err = outcome(
            &mut b,
            &read,
            json!({"server": "pyreader", "uri": "test://doc/1"}),
        )
        .await
        .unwrap_err();
        assert!(err.contains("NOT_FOUND"), "{name}: {err}");
    }

    // Without capability `mcp`: PERMISSION_DENIED, naming it.
    let err = outcome(
        &mut b,
        "nocap_read",
        json!({"server": "pymcp", "uri": "test://doc/1"}),
    )
    .await
    .unwrap_err();
    assert!(
        err.contains("PERMISSION_DENIED")
            && err.contains("plugin nocap: Mcp.Request needs capability `mcp`"),
        "{err}"
    );
}
