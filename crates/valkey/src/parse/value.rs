//! Reading `redis::Value` trees the way Valkey replies in both protocols: RESP2
//! arrays of alternating keys and values, or RESP3 maps.

use redis::Value;

/// The text of a string-like value (bulk, simple, verbatim) or of an integer.
pub(crate) fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::Okay => Some("OK".to_string()),
        Value::Int(i) => Some(i.to_string()),
        Value::Double(d) => Some(d.to_string()),
        Value::Boolean(b) => Some(b.to_string()),
        Value::Attribute { data, .. } => text(data),
        _ => None,
    }
}

/// An integer value, or a string holding one.
pub(crate) fn int(value: &Value) -> Option<i64> {
    match value {
        Value::Int(i) => Some(*i),
        Value::Attribute { data, .. } => int(data),
        other => text(other).and_then(|t| t.trim().parse().ok()),
    }
}

/// The items of an array or set value.
pub(crate) fn items(value: &Value) -> Option<&[Value]> {
    match value {
        Value::Array(items) | Value::Set(items) => Some(items),
        Value::Attribute { data, .. } => items(data),
        _ => None,
    }
}

/// The key/value pairs of a RESP3 map or of a RESP2 array of alternating keys and
/// values; keys are text. `None` when the value is neither.
pub(crate) fn pairs(value: &Value) -> Option<Vec<(String, &Value)>> {
    match value {
        Value::Map(entries) => entries
            .iter()
            .map(|(k, v)| text(k).map(|k| (k, v)))
            .collect(),
        Value::Array(items) if items.len() % 2 == 0 => items
            .chunks(2)
            .map(|kv| text(&kv[0]).map(|k| (k, &kv[1])))
            .collect(),
        Value::Attribute { data, .. } => pairs(data),
        _ => None,
    }
}

/// A short description of a value's type, for error messages.
pub(crate) fn kind(value: &Value) -> &'static str {
    match value {
        Value::Nil => "nil",
        Value::Int(_) => "integer",
        Value::BulkString(_) => "bulk string",
        Value::Array(_) => "array",
        Value::SimpleString(_) => "simple string",
        Value::Okay => "OK",
        Value::Map(_) => "map",
        Value::Attribute { .. } => "attribute",
        Value::Set(_) => "set",
        Value::Double(_) => "double",
        Value::Boolean(_) => "boolean",
        Value::VerbatimString { .. } => "verbatim string",
        Value::BigNumber(_) => "big number",
        Value::Push { .. } => "push",
        Value::ServerError(_) => "error",
        _ => "unknown value",
    }
}
