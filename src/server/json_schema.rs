//! A self-contained JSON Schema (2020-12) for a wire type, generated from its OpenAPI schema
//! (utoipa), so that MCP's `outputSchema` and the HTTP API's document never drift apart from
//! the types they describe.

use serde_json::{Map, Value};

/// `T`'s schema with every type it refers to under `$defs` (OpenAPI's
/// `#/components/schemas/X` references become `#/$defs/X`).
pub fn json_schema_of<T: utoipa::ToSchema>() -> Value {
    let mut parts = Vec::new();
    T::schemas(&mut parts);
    let mut root = serde_json::to_value(T::schema()).unwrap_or(Value::Null);
    let defs: Map<String, Value> = parts
        .into_iter()
        .map(|(name, schema)| (name, serde_json::to_value(schema).unwrap_or(Value::Null)))
        .collect();
    if let Value::Object(map) = &mut root {
        if !defs.is_empty() {
            map.insert("$defs".to_string(), Value::Object(defs));
        }
    }
    rewrite_refs(&mut root);
    root
}

fn rewrite_refs(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for (k, child) in map.iter_mut() {
                match child {
                    Value::String(s) if k == "$ref" => {
                        if let Some(name) = s.strip_prefix("#/components/schemas/") {
                            *s = format!("#/$defs/{name}");
                        }
                    }
                    _ => rewrite_refs(child),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(rewrite_refs),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ExecResult;

    /// Every reference in `v` names an entry of `defs`.
    fn refs_resolve(v: &Value, defs: &Map<String, Value>) {
        match v {
            Value::Object(map) => {
                if let Some(Value::String(r)) = map.get("$ref") {
                    let name = r.strip_prefix("#/$defs/").unwrap_or_else(|| panic!("{r}"));
                    assert!(defs.contains_key(name), "{r} has no definition");
                }
                map.values().for_each(|c| refs_resolve(c, defs));
            }
            Value::Array(items) => items.iter().for_each(|c| refs_resolve(c, defs)),
            _ => {}
        }
    }

    #[test]
    fn exec_result_schema_is_self_contained() {
        let s = json_schema_of::<ExecResult>();
        assert_eq!(s["type"], "object");
        assert!(s["properties"]["status"].is_object());
        let defs = s["$defs"].as_object().expect("$defs");
        for name in [
            "Status",
            "ExceptionInfo",
            "ErrorInfo",
            "Output",
            "ToolCallSummary",
        ] {
            assert!(defs.contains_key(name), "{name} missing: {:?}", defs.keys());
        }
        refs_resolve(&s, defs);
        assert!(!s.to_string().contains("#/components/"));
    }
}
