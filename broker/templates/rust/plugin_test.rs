//! Tests of __NAME__, in process with hearth_plugin::testing: no broker needed.

use hearth_plugin::testing::Harness;
use serde_json::json;

#[tokio::test]
async fn greets_by_name() {
    let plugin = Harness::start(__CRATE__::GreeterPlugin).await.unwrap();
    let result = plugin.call("__TOOL__", json!({"name": "Ann"})).await.unwrap();
    assert!(result.success, "{}", result.error);
    assert_eq!(result.content, "Hello, Ann.");
    let result = plugin.call("__TOOL__", json!({"name": "Ann", "excited": true})).await.unwrap();
    assert_eq!(result.content, "Hello, Ann!");
}

#[tokio::test]
async fn arguments_are_checked_against_the_schema_first() {
    let plugin = Harness::start(__CRATE__::GreeterPlugin).await.unwrap();
    let err = plugin.call("__TOOL__", json!({})).await.unwrap_err();
    assert!(err.to_string().contains("name"), "{err}");
}
