//! The JSON schemas of tool arguments: a subset of JSON Schema, checked when the broker is
//! built (an unknown keyword is a configuration error, never silently ignored) and applied to
//! every call before anything runs.
//!
//! Understood: `type` (a name or a list: `object`, `array`, `string`, `number`, `integer`,
//! `boolean`, `null`), `properties`, `required`, `additionalProperties` (a boolean or a
//! schema), `items`, `enum`, `const`, `minimum`, `maximum`, `exclusiveMinimum`,
//! `exclusiveMaximum`, `minLength`, `maxLength` (in characters), `pattern` (a regular
//! expression that must match somewhere in the string), `minItems`, `maxItems`,
//! `minProperties`, `maxProperties`, `anyOf`, and the annotations `title`, `description`,
//! `default`, `examples`, `format`, `$schema`, `$id`, `$comment` (not enforced).

use serde_json::Value;

const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "default",
    "examples",
    "format",
    "$schema",
    "$id",
    "$comment",
];
const KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "anyOf",
];
const TYPES: &[&str] = &[
    "object", "array", "string", "number", "integer", "boolean", "null",
];

/// Checks that `schema` uses only the keywords above, each well-formed, and describes an
/// object (tool arguments are always a JSON object).
pub fn check_tool_schema(schema: &Value) -> Result<(), String> {
    check(schema, "")?;
    match schema.get("type") {
        None => Ok(()),
        Some(Value::String(t)) if t == "object" => Ok(()),
        Some(other) => Err(format!(
            "the arguments of a tool are a JSON object: the schema's type must be \"object\", not {other}"
        )),
    }
}

fn check(schema: &Value, at: &str) -> Result<(), String> {
    let here = if at.is_empty() { "/" } else { at };
    let obj = match schema {
        Value::Bool(_) => return Ok(()),
        Value::Object(o) => o,
        _ => return Err(format!("{here}: a schema is an object or a boolean")),
    };
    for (k, v) in obj {
        if ANNOTATIONS.contains(&k.as_str()) {
            continue;
        }
        if !KEYWORDS.contains(&k.as_str()) {
            return Err(format!(
                "{here}: the keyword {k:?} is not understood by sandpit (see pipeline::tools::schema for the subset)"
            ));
        }
        let ok = match k.as_str() {
            "type" => match v {
                Value::String(t) => TYPES.contains(&t.as_str()),
                Value::Array(ts) => ts
                    .iter()
                    .all(|t| t.as_str().is_some_and(|t| TYPES.contains(&t))),
                _ => false,
            },
            "properties" => match v {
                Value::Object(props) => {
                    for (name, s) in props {
                        check(s, &format!("{at}/properties/{name}"))?;
                    }
                    true
                }
                _ => false,
            },
            "required" => v.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
            "additionalProperties" | "items" => {
                check(v, &format!("{at}/{k}"))?;
                true
            }
            "anyOf" => match v {
                Value::Array(list) if !list.is_empty() => {
                    for (i, s) in list.iter().enumerate() {
                        check(s, &format!("{at}/anyOf/{i}"))?;
                    }
                    true
                }
                _ => false,
            },
            "enum" => v.is_array(),
            "const" => true,
            "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" => v.is_number(),
            "minLength" | "maxLength" | "minItems" | "maxItems" | "minProperties"
            | "maxProperties" => v.as_u64().is_some(),
            "pattern" => match v.as_str() {
                Some(p) => {
                    regex::Regex::new(p)
                        .map_err(|e| format!("{here}: pattern {p:?} is not a valid regex: {e}"))?;
                    true
                }
                None => false,
            },
            _ => true,
        };
        if !ok {
            return Err(format!("{here}: {k} has a value of the wrong shape: {v}"));
        }
    }
    Ok(())
}

fn type_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_matches(want: &str, v: &Value) -> bool {
    let have = type_of(v);
    want == have
        || (want == "number" && have == "integer")
        || (want == "integer" && v.as_f64().is_some_and(|f| f.fract() == 0.0))
}

/// Checks `value` against `schema` (one that [`check_tool_schema`] accepted): `Err` names the
/// first place that does not fit (a JSON pointer) and why.
pub fn validate(schema: &Value, value: &Value) -> Result<(), String> {
    validate_at(schema, value, "")
}

fn validate_at(schema: &Value, value: &Value, at: &str) -> Result<(), String> {
    let here = if at.is_empty() { "/" } else { at };
    let s = match schema {
        Value::Bool(true) => return Ok(()),
        Value::Bool(false) => return Err(format!("{here}: no value is allowed here")),
        Value::Object(s) => s,
        _ => return Ok(()),
    };
    let fail = |why: String| Err(format!("{here}: {why}"));
    if let Some(t) = s.get("type") {
        let ok = match t {
            Value::String(t) => type_matches(t, value),
            Value::Array(ts) => ts
                .iter()
                .filter_map(Value::as_str)
                .any(|t| type_matches(t, value)),
            _ => true,
        };
        if !ok {
            return fail(format!("expected {t}, got {}", type_of(value)));
        }
    }
    if let Some(Value::Array(allowed)) = s.get("enum") {
        if !allowed.contains(value) {
            return fail(format!(
                "{value} is not one of {}",
                Value::Array(allowed.clone())
            ));
        }
    }
    if let Some(c) = s.get("const") {
        if c != value {
            return fail(format!("must be {c}"));
        }
    }
    if let Some(list) = s.get("anyOf").and_then(Value::as_array) {
        if !list.iter().any(|alt| validate_at(alt, value, at).is_ok()) {
            return fail("matches none of anyOf".into());
        }
    }
    match value {
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(f64::NAN);
            let num = |k: &str| s.get(k).and_then(Value::as_f64);
            if num("minimum").is_some_and(|m| x < m)
                || num("maximum").is_some_and(|m| x > m)
                || num("exclusiveMinimum").is_some_and(|m| x <= m)
                || num("exclusiveMaximum").is_some_and(|m| x >= m)
            {
                return fail(format!("{x} is out of range"));
            }
        }
        Value::String(text) => {
            let chars = text.chars().count() as u64;
            if s.get("minLength")
                .and_then(Value::as_u64)
                .is_some_and(|m| chars < m)
                || s.get("maxLength")
                    .and_then(Value::as_u64)
                    .is_some_and(|m| chars > m)
            {
                return fail(format!(
                    "a string of {chars} characters is too short or too long"
                ));
            }
            if let Some(p) = s.get("pattern").and_then(Value::as_str) {
                match regex::Regex::new(p) {
                    Ok(re) if re.is_match(text) => {}
                    _ => return fail(format!("does not match the pattern {p:?}")),
                }
            }
        }
        Value::Array(items) => {
            let n = items.len() as u64;
            if s.get("minItems")
                .and_then(Value::as_u64)
                .is_some_and(|m| n < m)
                || s.get("maxItems")
                    .and_then(Value::as_u64)
                    .is_some_and(|m| n > m)
            {
                return fail(format!("{n} items are too few or too many"));
            }
            if let Some(item) = s.get("items") {
                for (i, v) in items.iter().enumerate() {
                    validate_at(item, v, &format!("{at}/{i}"))?;
                }
            }
        }
        Value::Object(o) => {
            let n = o.len() as u64;
            if s.get("minProperties")
                .and_then(Value::as_u64)
                .is_some_and(|m| n < m)
                || s.get("maxProperties")
                    .and_then(Value::as_u64)
                    .is_some_and(|m| n > m)
            {
                return fail(format!("{n} properties are too few or too many"));
            }
            if let Some(req) = s.get("required").and_then(Value::as_array) {
                for name in req.iter().filter_map(Value::as_str) {
                    if !o.contains_key(name) {
                        return fail(format!("the property {name:?} is required"));
                    }
                }
            }
            let props = s.get("properties").and_then(Value::as_object);
            for (k, v) in o {
                let key_at = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                match props.and_then(|p| p.get(k)) {
                    Some(ps) => validate_at(ps, v, &key_at)?,
                    None => {
                        if let Some(extra) = s.get("additionalProperties") {
                            if extra == &Value::Bool(false) {
                                return fail(format!("the property {k:?} is not allowed"));
                            }
                            validate_at(extra, v, &key_at)?;
                        }
                    }
                }
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_the_understood_subset_is_accepted() {
        check_tool_schema(&json!({
            "type": "object",
            "description": "d",
            "properties": {
                "q": {"type": "string", "minLength": 1, "pattern": "^[a-z]+$"},
                "n": {"type": ["integer", "null"], "minimum": 0},
                "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3},
            },
            "required": ["q"],
            "additionalProperties": false,
        }))
        .unwrap();
        assert!(check_tool_schema(&json!({"type": "object", "$ref": "#/x"})).is_err());
        assert!(check_tool_schema(&json!({"type": "string"})).is_err());
        assert!(check_tool_schema(&json!({"properties": {"a": {"type": "strnig"}}})).is_err());
        assert!(check_tool_schema(&json!({"properties": {"a": {"pattern": "("}}})).is_err());
        assert!(check_tool_schema(&json!({"required": "q"})).is_err());
    }

    #[test]
    fn values_are_checked_with_a_pointer_to_the_first_misfit() {
        let s = json!({
            "type": "object",
            "properties": {
                "q": {"type": "string", "minLength": 1, "maxLength": 5, "pattern": "^[a-z]+$"},
                "n": {"type": "integer", "minimum": 0, "exclusiveMaximum": 10},
                "x": {"type": "number"},
                "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
                "o": {"anyOf": [{"type": "string"}, {"type": "object", "required": ["k"]}]},
            },
            "required": ["q"],
            "additionalProperties": false,
        });
        validate(
            &s,
            &json!({"q": "abc", "n": 3, "x": 1, "tags": ["a"], "o": {"k": 1}}),
        )
        .unwrap();
        validate(&s, &json!({"q": "abc", "n": 3.0, "x": 1.5})).unwrap();
        for (bad, place) in [
            (json!({}), "\"q\" is required"),
            (json!({"q": ""}), "/q"),
            (json!({"q": "ABC"}), "pattern"),
            (json!({"q": "abcdef"}), "/q"),
            (json!({"q": "a", "n": 10}), "/n"),
            (json!({"q": "a", "n": 1.5}), "/n: expected"),
            (json!({"q": "a", "tags": ["c"]}), "/tags/0"),
            (json!({"q": "a", "tags": ["a", "a", "a"]}), "/tags"),
            (json!({"q": "a", "zzz": 1}), "\"zzz\" is not allowed"),
            (json!({"q": "a", "o": {}}), "/o: matches none"),
            (json!([1]), "expected \"object\""),
        ] {
            let e = validate(&s, &bad).unwrap_err();
            assert!(e.contains(place), "{bad}: {e}");
        }
    }
}
