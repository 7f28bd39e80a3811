//! Tool parameter schemas, mirrored from the broker (`broker/src/schema.rs`, the
//! reference: change both together): LinkZone `ai.tool` → JSON Schema, schema checking
//! at registration and argument validation before dispatch, with the `jsonschema`
//! crate the broker uses.

use hearth_proto::v1::AiTool;
use serde_json::{json, Map, Value};

/// A tool's argument validator, compiled once at registration.
#[derive(Debug)]
pub(crate) struct ArgsSchema {
    schema: Value,
    validator: jsonschema::Validator,
}

impl ArgsSchema {
    /// Checks `schema` (JSON text; empty = no parameters) and compiles it.
    ///
    /// Errors, as one line: not JSON, not a valid JSON Schema (the meta-schema
    /// violation with its path), or not describing an object.
    pub(crate) fn compile(schema_json: &str) -> Result<ArgsSchema, String> {
        let schema: Value = if schema_json.trim().is_empty() {
            json!({"type": "object", "properties": {}})
        } else {
            serde_json::from_str(schema_json)
                .map_err(|e| format!("parameters is not valid JSON: {e}"))?
        };
        Self::from_value(schema)
    }

    /// Like [`ArgsSchema::compile`] for an already parsed schema.
    pub(crate) fn from_value(schema: Value) -> Result<ArgsSchema, String> {
        if !schema.is_object() {
            return Err("parameters must be a JSON Schema object".into());
        }
        if let Err(e) = jsonschema::meta::validate(&schema) {
            let at = e.instance_path().to_string();
            let at = if at.is_empty() {
                String::new()
            } else {
                format!(" at {at}")
            };
            return Err(format!("parameters is not a valid JSON Schema{at}: {e}"));
        }
        match schema.get("type") {
            None => {}
            Some(Value::String(t)) if t == "object" => {}
            Some(other) => {
                return Err(format!(
                    "parameters must describe an object (\"type\": \"object\"), not {other}"
                ))
            }
        }
        let validator = jsonschema::validator_for(&schema)
            .map_err(|e| format!("parameters is not a usable JSON Schema: {e}"))?;
        Ok(ArgsSchema { schema, validator })
    }

    /// The schema as registered.
    pub(crate) fn schema(&self) -> &Value {
        &self.schema
    }

    /// Validates call arguments. The error names the offending argument, e.g.
    /// "argument `expression`: 12 is not of type \"string\"", or for a missing one
    /// "arguments: \"expression\" is a required property".
    pub(crate) fn validate(&self, args: &Value) -> Result<(), String> {
        let Some(err) = self.validator.iter_errors(args).next() else {
            return Ok(());
        };
        let path = err.instance_path().to_string();
        let arg = path
            .trim_start_matches('/')
            .replace('/', ".")
            .replace("~1", "/")
            .replace("~0", "~");
        if arg.is_empty() {
            Err(format!("arguments: {err}"))
        } else {
            Err(format!("argument `{arg}`: {err}"))
        }
    }
}

/// Builds the JSON Schema of a LinkZone `ai.tool` parameters list.
///
/// Errors name the parameter: an empty or duplicate name, an unknown `type`, or
/// `default`/`enum` that is not valid JSON (`enum` must be an array).
pub(crate) fn linkzone_schema(tool: &AiTool) -> Result<Value, String> {
    let mut properties = Map::new();
    let mut required = Vec::new();
    for p in &tool.parameters {
        if p.name.trim().is_empty() {
            return Err("a parameter has an empty name".into());
        }
        if properties.contains_key(&p.name) {
            return Err(format!("parameter `{}` is defined twice", p.name));
        }
        let ty = match p.r#type.as_str() {
            "" => "string",
            t @ ("string" | "number" | "integer" | "boolean" | "object" | "array") => t,
            other => {
                return Err(format!(
                    "parameter `{}`: type `{other}` is not one of string, number, integer, boolean, object, array",
                    p.name
                ))
            }
        };
        let mut prop = Map::new();
        prop.insert("type".into(), ty.into());
        if !p.description.is_empty() {
            prop.insert("description".into(), p.description.clone().into());
        }
        if !p.default_json.is_empty() {
            let v: Value = serde_json::from_str(&p.default_json)
                .map_err(|e| format!("parameter `{}`: default is not valid JSON: {e}", p.name))?;
            prop.insert("default".into(), v);
        }
        if !p.enum_json.is_empty() {
            match serde_json::from_str::<Value>(&p.enum_json) {
                Ok(v @ Value::Array(_)) => {
                    prop.insert("enum".into(), v);
                }
                Ok(_) => return Err(format!("parameter `{}`: enum must be an array", p.name)),
                Err(e) => {
                    return Err(format!(
                        "parameter `{}`: enum is not valid JSON: {e}",
                        p.name
                    ))
                }
            }
        }
        if !p.example.is_empty() {
            prop.insert("examples".into(), json!([p.example]));
        }
        if p.required {
            required.push(Value::from(p.name.clone()));
        }
        properties.insert(p.name.clone(), Value::Object(prop));
    }
    let mut schema = Map::new();
    schema.insert("type".into(), "object".into());
    schema.insert("properties".into(), Value::Object(properties));
    if !required.is_empty() {
        schema.insert("required".into(), Value::Array(required));
    }
    Ok(Value::Object(schema))
}

/// The tool description the LLM reads for a LinkZone tool: `usage`, then
/// `when_to_use` ("When to use: …"), either may be empty.
pub(crate) fn linkzone_description(tool: &AiTool) -> String {
    match (tool.usage.trim(), tool.when_to_use.trim()) {
        ("", "") => String::new(),
        (u, "") => u.to_string(),
        ("", w) => format!("When to use: {w}"),
        (u, w) => format!("{u}\nWhen to use: {w}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_proto::v1::AiToolParameter;

    fn param(name: &str, ty: &str, required: bool) -> AiToolParameter {
        AiToolParameter {
            name: name.into(),
            r#type: ty.into(),
            description: format!("the {name}"),
            required,
            ..Default::default()
        }
    }

    #[test]
    fn linkzone_parameters_become_json_schema() {
        let mut days = param("days", "number", false);
        days.default_json = "1".into();
        let mut unit = param("unit", "string", false);
        unit.enum_json = r#"["c","f"]"#.into();
        unit.example = "c".into();
        let tool = AiTool {
            parameters: vec![param("city", "string", true), days, unit],
            usage: "查询天气".into(),
            when_to_use: "当用户询问天气时".into(),
            ..Default::default()
        };
        let schema = linkzone_schema(&tool).unwrap();
        assert_eq!(
            schema,
            json!({
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "the city"},
                    "days": {"type": "number", "description": "the days", "default": 1},
                    "unit": {"type": "string", "description": "the unit", "enum": ["c", "f"], "examples": ["c"]}
                },
                "required": ["city"]
            })
        );
        assert_eq!(
            linkzone_description(&tool),
            "查询天气\nWhen to use: 当用户询问天气时"
        );
        let compiled = ArgsSchema::from_value(schema).unwrap();
        assert!(compiled.validate(&json!({"city": "北京"})).is_ok());
        let err = compiled.validate(&json!({"city": 3})).unwrap_err();
        assert!(err.starts_with("argument `city`"), "{err}");
        let err = compiled
            .validate(&json!({"city": "x", "unit": "k"}))
            .unwrap_err();
        assert!(err.starts_with("argument `unit`"), "{err}");
        let err = compiled.validate(&json!({})).unwrap_err();
        assert!(err.contains("city") && err.contains("required"), "{err}");
    }

    #[test]
    fn bad_parameter_lists_are_named() {
        let tool = AiTool {
            parameters: vec![param("a", "float", true)],
            ..Default::default()
        };
        assert!(linkzone_schema(&tool)
            .unwrap_err()
            .contains("parameter `a`"));
        let tool = AiTool {
            parameters: vec![param("a", "string", true), param("a", "string", false)],
            ..Default::default()
        };
        assert!(linkzone_schema(&tool).unwrap_err().contains("twice"));
    }

    #[test]
    fn invalid_schemas_are_rejected() {
        assert!(ArgsSchema::compile("{")
            .unwrap_err()
            .contains("not valid JSON"));
        assert!(ArgsSchema::compile(r#"{"type": 12}"#)
            .unwrap_err()
            .contains("not a valid JSON Schema"));
        assert!(ArgsSchema::compile(r#"{"type": "string"}"#)
            .unwrap_err()
            .contains("object"));
        assert!(ArgsSchema::compile("").is_ok());
    }
}
