//! `valkey-operator crd` prints the committed CRD.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

#[test]
fn crd_prints_the_committed_crd() {
    let out = Command::new(env!("CARGO_BIN_EXE_valkey-operator"))
        .arg("crd")
        .output()
        .expect("run valkey-operator crd");
    assert!(out.status.success());
    let printed = String::from_utf8(out.stdout).unwrap();
    let committed = include_str!("../../../deploy/crd/valkeycluster.yaml");
    assert!(
        printed == committed,
        "deploy/crd/valkeycluster.yaml differs from `valkey-operator crd`: run `make crd`"
    );
}
