//! `HELLO.GREET [NAME]`: replies `<greeting>, <NAME>` (NAME defaults to
//! `world`), where the greeting is the module's first load argument
//! (`loadmodule <path> <greeting>`; `hello` without one). The e2e suite
//! `extensions` loads it through `spec.modules` and calls it on every member.
//!
//! The greeting is kept in a `OnceLock`: a module is loaded once per server,
//! and the SDK's init function is the only place that sees its arguments.

use valkey_module::alloc::ValkeyAlloc;
use valkey_module::{Context, Status, ValkeyError, ValkeyResult, ValkeyString, valkey_module};

static GREETING: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The reply of `HELLO.GREET` for `greeting` and the command's arguments
/// (the first is the command's own name).
pub fn greet(greeting: &str, args: &[String]) -> Result<String, &'static str> {
    match args {
        [_] => Ok(format!("{greeting}, world")),
        [_, name] => Ok(format!("{greeting}, {name}")),
        _ => Err("wrong number of arguments for 'hello.greet' command"),
    }
}

fn hello_greet(_: &Context, args: Vec<ValkeyString>) -> ValkeyResult {
    let args: Vec<String> = args.into_iter().map(|a| a.to_string()).collect();
    let greeting = GREETING.get().map_or("hello", String::as_str);
    match greet(greeting, &args) {
        Ok(reply) => Ok(reply.into()),
        Err(_) => Err(ValkeyError::WrongArity),
    }
}

fn init(_: &Context, args: &[ValkeyString]) -> Status {
    let greeting = args
        .first()
        .map_or_else(|| "hello".to_string(), ToString::to_string);
    // Set once per process; a second load in one server keeps the first.
    let _ = GREETING.set(greeting);
    Status::Ok
}

valkey_module! {
    name: "hello",
    version: 1,
    allocator: (ValkeyAlloc, ValkeyAlloc),
    data_types: [],
    init: init,
    commands: [
        ["hello.greet", hello_greet, "readonly fast", 0, 0, 0],
    ],
}

#[cfg(test)]
mod tests {
    use super::greet;

    #[test]
    fn greets_the_world_without_a_name_and_the_name_given() {
        assert_eq!(greet("hi", &["hello.greet".into()]), Ok("hi, world".into()));
        assert_eq!(
            greet("hi", &["hello.greet".into(), "valkey".into()]),
            Ok("hi, valkey".into())
        );
        assert!(greet("hi", &["hello.greet".into(), "a".into(), "b".into()]).is_err());
    }
}
