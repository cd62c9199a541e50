//! `valkey-operator crd` prints the committed CRDs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

fn crd(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_valkey-operator"))
        .arg("crd")
        .args(args)
        .output()
        .expect("run valkey-operator crd");
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

const CLUSTER: &str = include_str!("../../../../deploy/crd/valkeycluster.yaml");
const BACKUP: &str = include_str!("../../../../deploy/crd/valkeybackup.yaml");
const SCHEDULE: &str = include_str!("../../../../deploy/crd/valkeybackupschedule.yaml");
const REPLICATION: &str = include_str!("../../../../deploy/crd/valkeyreplication.yaml");

#[test]
fn crd_kind_schedule_prints_the_committed_schedule_crd() {
    assert!(
        crd(&["--kind", "schedule"]) == SCHEDULE,
        "deploy/crd/valkeybackupschedule.yaml differs from `valkey-operator crd --kind schedule`: run `make crd`"
    );
}

#[test]
fn crd_kind_cluster_prints_the_committed_cluster_crd() {
    assert!(
        crd(&["--kind", "cluster"]) == CLUSTER,
        "deploy/crd/valkeycluster.yaml differs from `valkey-operator crd --kind cluster`: run `make crd`"
    );
}

#[test]
fn crd_kind_backup_prints_the_committed_backup_crd() {
    assert!(
        crd(&["--kind", "backup"]) == BACKUP,
        "deploy/crd/valkeybackup.yaml differs from `valkey-operator crd --kind backup`: run `make crd`"
    );
}

#[test]
fn crd_kind_replication_prints_the_committed_replication_crd() {
    assert!(
        crd(&["--kind", "replication"]) == REPLICATION,
        "deploy/crd/valkeyreplication.yaml differs from `valkey-operator crd --kind replication`: run `make crd`"
    );
}

#[test]
fn crd_prints_every_kind_as_one_stream() {
    assert_eq!(
        crd(&[]),
        format!("{CLUSTER}---\n{BACKUP}---\n{SCHEDULE}---\n{REPLICATION}")
    );
}
