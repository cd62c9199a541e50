//! A server's reply as plain data, and reading it the way Valkey replies in both
//! protocols: RESP2 arrays of alternating keys and values, or RESP3 maps.
//!
//! [`Reply`] is this crate's own type so that parsing needs no client: the
//! client crate (`valkey-client`) turns what its connection read into one.

/// One reply of the server, RESP2 or RESP3, as the parsers read it.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Nil,
    Int(i64),
    BulkString(Vec<u8>),
    Array(Vec<Reply>),
    SimpleString(String),
    Okay,
    Map(Vec<(Reply, Reply)>),
    /// A RESP3 attribute: the reply it annotates (the attributes are dropped).
    Attribute {
        data: Box<Reply>,
    },
    Set(Vec<Reply>),
    Double(f64),
    Boolean(bool),
    VerbatimString {
        text: String,
    },
    /// A RESP3 big number, as its decimal text.
    BigNumber(String),
    Push(Vec<Reply>),
    /// An error reply, as its text.
    ServerError(String),
}

/// The text of a string-like value (bulk, simple, verbatim) or of an integer.
pub(crate) fn text(value: &Reply) -> Option<String> {
    match value {
        Reply::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Reply::SimpleString(s) => Some(s.clone()),
        Reply::VerbatimString { text, .. } => Some(text.clone()),
        Reply::Okay => Some("OK".to_string()),
        Reply::Int(i) => Some(i.to_string()),
        Reply::Double(d) => Some(d.to_string()),
        Reply::Boolean(b) => Some(b.to_string()),
        Reply::Attribute { data, .. } => text(data),
        _ => None,
    }
}

/// An integer value, or a string holding one.
pub(crate) fn int(value: &Reply) -> Option<i64> {
    match value {
        Reply::Int(i) => Some(*i),
        Reply::Attribute { data, .. } => int(data),
        other => text(other).and_then(|t| t.trim().parse().ok()),
    }
}

/// The items of an array or set value.
pub(crate) fn items(value: &Reply) -> Option<&[Reply]> {
    match value {
        Reply::Array(items) | Reply::Set(items) => Some(items),
        Reply::Attribute { data, .. } => items(data),
        _ => None,
    }
}

/// The key/value pairs of a RESP3 map or of a RESP2 array of alternating keys and
/// values; keys are text. `None` when the value is neither.
pub(crate) fn pairs(value: &Reply) -> Option<Vec<(String, &Reply)>> {
    match value {
        Reply::Map(entries) => entries
            .iter()
            .map(|(k, v)| text(k).map(|k| (k, v)))
            .collect(),
        Reply::Array(items) if items.len() % 2 == 0 => items
            .chunks(2)
            .map(|kv| text(&kv[0]).map(|k| (k, &kv[1])))
            .collect(),
        Reply::Attribute { data, .. } => pairs(data),
        _ => None,
    }
}

/// A short description of a value's type, for error messages.
pub(crate) fn kind(value: &Reply) -> &'static str {
    match value {
        Reply::Nil => "nil",
        Reply::Int(_) => "integer",
        Reply::BulkString(_) => "bulk string",
        Reply::Array(_) => "array",
        Reply::SimpleString(_) => "simple string",
        Reply::Okay => "OK",
        Reply::Map(_) => "map",
        Reply::Attribute { .. } => "attribute",
        Reply::Set(_) => "set",
        Reply::Double(_) => "double",
        Reply::Boolean(_) => "boolean",
        Reply::VerbatimString { .. } => "verbatim string",
        Reply::BigNumber(_) => "big number",
        Reply::Push(_) => "push",
        Reply::ServerError(_) => "error",
    }
}
