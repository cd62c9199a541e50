//! The committed CRDs must be exactly what the Rust types generate.

#[test]
fn committed_crd_matches_the_rust_types() {
    let committed = include_str!("../../../../deploy/crd/valkeycluster.yaml");
    let generated = api::crd_yaml().unwrap();
    assert!(
        committed == generated,
        "deploy/crd/valkeycluster.yaml is stale: regenerate it with \
         `cargo run -p operator -- crd --kind cluster > deploy/crd/valkeycluster.yaml` (or `make crd`)"
    );
}

#[test]
fn committed_backup_crd_matches_the_rust_types() {
    let committed = include_str!("../../../../deploy/crd/valkeybackup.yaml");
    let generated = api::backup_crd_yaml().unwrap();
    assert!(
        committed == generated,
        "deploy/crd/valkeybackup.yaml is stale: regenerate it with \
         `cargo run -p operator -- crd --kind backup > deploy/crd/valkeybackup.yaml` (or `make crd`)"
    );
}

#[test]
fn committed_schedule_crd_matches_the_rust_types() {
    let committed = include_str!("../../../../deploy/crd/valkeybackupschedule.yaml");
    let generated = api::schedule_crd_yaml().unwrap();
    assert!(
        committed == generated,
        "deploy/crd/valkeybackupschedule.yaml is stale: regenerate it with \
         `cargo run -p operator -- crd --kind schedule > deploy/crd/valkeybackupschedule.yaml` (or `make crd`)"
    );
}

#[test]
fn committed_replication_crd_matches_the_rust_types() {
    let committed = include_str!("../../../../deploy/crd/valkeyreplication.yaml");
    let generated = api::replication_crd_yaml().unwrap();
    assert!(
        committed == generated,
        "deploy/crd/valkeyreplication.yaml is stale: regenerate it with \
         `cargo run -p operator -- crd --kind replication > deploy/crd/valkeyreplication.yaml` (or `make crd`)"
    );
}
