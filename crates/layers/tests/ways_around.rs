//! The ways around a regex check, each caught (issue: grouped imports, deeper
//! `super::` paths, routes through a shared module, paths in code).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use layers::{RULES, Reach, act_calls_decide, check, decide_functions, graph};
use std::path::PathBuf;

/// A small operator-shaped crate: `extra` files added to a clean skeleton.
fn broken(extra: &[(&str, &str)], reach: Reach) -> Vec<String> {
    let mut files: Vec<(PathBuf, String)> = vec![
        ("lib.rs", "pub mod controller;\npub mod backup;\npub mod shared;\n"),
        (
            "controller/mod.rs",
            "pub mod act;\npub mod observe;\npub mod report;\npub mod reconcile;\npub struct Context;\n",
        ),
        ("controller/act/mod.rs", "pub fn carry_out() {}\n"),
        ("controller/report/mod.rs", "pub fn status() {}\n"),
        ("controller/reconcile.rs", "use super::act;\nuse super::report;\n"),
        ("controller/observe/mod.rs", "pub mod kube;\n"),
        ("controller/observe/kube.rs", "use crate::shared::Thing;\n"),
        ("backup/mod.rs", "use crate::shared::Thing;\n"),
        ("shared.rs", "pub struct Thing;\n"),
    ]
    .into_iter()
    .map(|(p, t)| (PathBuf::from(p), t.to_string()))
    .collect();
    for (p, t) in extra {
        files.retain(|(q, _)| q != &PathBuf::from(p));
        files.push((PathBuf::from(p), t.to_string()));
    }
    check(&graph(&files).unwrap(), RULES, reach)
}

#[test]
fn the_clean_skeleton_passes_both_ways() {
    assert_eq!(broken(&[], Reach::Direct), Vec::<String>::new());
    assert_eq!(broken(&[], Reach::Transitive), Vec::<String>::new());
}

#[test]
fn a_grouped_import_is_caught() {
    let b = broken(
        &[(
            "controller/observe/kube.rs",
            "use super::super::{act::carry_out, Context};\n",
        )],
        Reach::Direct,
    );
    assert!(
        b.iter().any(|l| l.contains("reaches controller::act")),
        "{b:?}"
    );
}

#[test]
fn a_deeper_super_path_is_caught() {
    let b = broken(
        &[
            (
                "controller/observe/mod.rs",
                "pub mod kube;\npub mod deep;\n",
            ),
            ("controller/observe/deep/mod.rs", "pub mod inner;\n"),
            (
                "controller/observe/deep/inner.rs",
                "use super::super::super::report::status;\n",
            ),
        ],
        Reach::Direct,
    );
    assert!(
        b.iter()
            .any(|l| l.contains("observe::deep::inner reaches controller::report")),
        "{b:?}"
    );
}

#[test]
fn a_path_in_code_is_caught_and_a_rename_too() {
    let b = broken(
        &[(
            "controller/act/mod.rs",
            "pub fn carry_out() { crate::controller::report::status(); }\n",
        )],
        Reach::Direct,
    );
    assert!(
        b.iter()
            .any(|l| l.contains("act reaches controller::report")),
        "{b:?}"
    );
    let b = broken(
        &[("backup/mod.rs", "use crate::controller::act as a;\n")],
        Reach::Direct,
    );
    assert!(
        b.iter()
            .any(|l| l.contains("backup reaches controller::act")),
        "{b:?}"
    );
}

#[test]
fn an_inline_test_module_follows_the_rule() {
    let b = broken(
        &[(
            "controller/report/mod.rs",
            "pub fn status() {}\n#[cfg(test)]\nmod tests { use super::super::act; }\n",
        )],
        Reach::Direct,
    );
    assert!(
        b.iter()
            .any(|l| l.contains("report reaches controller::act")),
        "{b:?}"
    );
}

#[test]
fn a_route_through_a_shared_module_or_a_hub_is_caught_transitively() {
    let through_shared = [(
        "shared.rs",
        "pub struct Thing;\npub use crate::controller::act::carry_out;\n",
    )];
    assert!(broken(&through_shared, Reach::Direct).is_empty());
    let b = broken(&through_shared, Reach::Transitive);
    assert!(
        b.iter()
            .any(|l| l.contains("observe::kube reaches controller::act")
                && l.contains("shared.rs:2")),
        "{b:?}"
    );
    // `Context` from the controller's mod.rs: the hub declares every step.
    let hub = [(
        "controller/observe/kube.rs",
        "use crate::controller::Context;\n",
    )];
    let b = broken(&hub, Reach::Transitive);
    assert!(
        b.iter()
            .any(|l| l.contains("observe::kube reaches controller::reconcile")),
        "{b:?}"
    );
    // A glob import of the hub, likewise.
    let glob = [("controller/observe/kube.rs", "use super::super::*;\n")];
    assert!(!broken(&glob, Reach::Transitive).is_empty());
}

#[test]
fn a_file_that_does_not_parse_is_named() {
    let files = vec![(PathBuf::from("controller/act/mod.rs"), "fn (".to_string())];
    match graph(&files) {
        Err(e) => assert!(e.contains("controller/act/mod.rs"), "{e}"),
        Ok(_) => panic!("a file that does not parse must be an error"),
    }
}

#[test]
fn act_naming_a_function_of_decide_is_caught_and_its_types_are_not() {
    let found = |text: &str| decide_functions(text).unwrap();
    assert_eq!(found("use decide::cleanup;\n").len(), 1);
    assert_eq!(
        found("use decide::{Decision, cleanup::leaving_members};\n").len(),
        1
    );
    assert_eq!(found("use decide::rotation::*;\n").len(), 1);
    assert_eq!(found("use decide::tls::step as next;\n").len(), 1);
    assert_eq!(found("use decide::{self};\n").len(), 1);
    assert_eq!(
        found("fn f() { let x = decide::cleanup::leaving_members(1); }\n").len(),
        1
    );
    // Types, and their associated functions, are act's to use.
    assert!(found("use decide::{Decision, heal::Heal};\nfn f() { PodFacts::of(p); }\n").is_empty());
    assert!(found("fn f() { let d = decide::Decision::default(); }\n").is_empty());
    // Only act is held to it.
    let files = vec![
        (
            PathBuf::from("controller/act/mod.rs"),
            "use decide::cleanup;\n".to_string(),
        ),
        (
            PathBuf::from("controller/reconcile.rs"),
            "use decide::cleanup;\n".to_string(),
        ),
    ];
    let out = act_calls_decide(&files).unwrap();
    assert_eq!(out.len(), 1, "{out:?}");
    assert!(out[0].starts_with("controller/act/mod.rs:1"), "{out:?}");
}
