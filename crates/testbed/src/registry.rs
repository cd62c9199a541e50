//! Which testbed ids are in use on this machine.
//!
//! Each running testbed holds a small id (its address range, its network
//! namespace prefix). The claim is a file `<cache>/testbeds/<id>` holding the
//! testbed's directory, created with `O_EXCL` so two `up`s racing cannot take
//! the same id. Network objects named after an id also count as a claim, so an
//! id whose namespaces were left behind by a crash is not reused until `down`
//! cleans them.

use crate::state::TestbedState;
use crate::topology::{MAX_ID, netns_prefix};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Errors claiming or releasing an id.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("creating the testbed registry {path}: {source}")]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("claiming testbed id {id} in {path}: {source}")]
    Claim {
        id: u8,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("every testbed id 1..={MAX_ID} is in use (see {0})")]
    Exhausted(PathBuf),
}

/// The cache folder shared with the setup scripts: `$VALKEY_RS_CACHE`, else
/// `~/.cache/valkey-rs`.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("VALKEY_RS_CACHE") {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
    home.join(".cache").join("valkey-rs")
}

/// The claims folder of this machine, `<cache>/testbeds`.
pub fn registry_dir() -> PathBuf {
    cache_dir().join("testbeds")
}

/// Ids whose network namespaces or host interfaces exist right now.
fn ids_with_network_objects(names: &[String]) -> Vec<u8> {
    (1..=MAX_ID)
        .filter(|id| {
            let prefix = netns_prefix(*id);
            names.iter().any(|n| n.starts_with(&prefix))
        })
        .collect()
}

/// A claims folder.
#[derive(Debug, Clone)]
pub struct Registry {
    dir: PathBuf,
}

impl Registry {
    /// The claims folder at `dir` (normally [`registry_dir`]).
    pub fn at(dir: PathBuf) -> Self {
        Self { dir }
    }

    fn claim_path(&self, id: u8) -> PathBuf {
        self.dir.join(id.to_string())
    }

    /// The testbed directory that holds the claim on `id`, if any.
    fn claimant(&self, id: u8) -> Option<PathBuf> {
        std::fs::read_to_string(self.claim_path(id))
            .ok()
            .map(|s| PathBuf::from(s.trim()))
    }

    /// The id already claimed for `dir`, if any.
    pub fn id_of(&self, dir: &Path) -> Option<u8> {
        (1..=MAX_ID).find(|id| self.claimant(*id).as_deref() == Some(dir))
    }

    /// Claims the lowest free id for `dir` (or returns the one it holds already).
    /// `network_names` are the names of existing network namespaces and
    /// interfaces; an id with leftovers there is not handed out.
    pub fn claim(&self, dir: &Path, network_names: &[String]) -> Result<u8, RegistryError> {
        if let Some(id) = self.id_of(dir) {
            return Ok(id);
        }
        std::fs::create_dir_all(&self.dir).map_err(|source| RegistryError::CreateDir {
            path: self.dir.clone(),
            source,
        })?;
        let busy = ids_with_network_objects(network_names);
        for id in 1..=MAX_ID {
            if busy.contains(&id) {
                continue;
            }
            let path = self.claim_path(id);
            if let Some(other) = self.claimant(id) {
                if claim_is_live(id, &other) {
                    continue;
                }
                // Stale: its testbed directory no longer describes it. Take it over.
                let _ = std::fs::remove_file(&path);
            }
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(mut f) => {
                    writeln!(f, "{}", dir.display()).map_err(|source| RegistryError::Claim {
                        id,
                        path,
                        source,
                    })?;
                    return Ok(id);
                }
                // Another `up` took it between our look and our claim.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(source) => return Err(RegistryError::Claim { id, path, source }),
            }
        }
        Err(RegistryError::Exhausted(self.dir.clone()))
    }

    /// Whether another testbed directory than `dir` holds the claim on `id`
    /// (e.g. `dir` has a stale state file whose id was handed out again).
    pub fn held_by_other(&self, id: u8, dir: &Path) -> bool {
        self.claimant(id).is_some_and(|other| other != dir)
    }

    /// Gives back every id `dir` holds.
    pub fn release(&self, dir: &Path) {
        while let Some(id) = self.id_of(dir) {
            if std::fs::remove_file(self.claim_path(id)).is_err() {
                break;
            }
        }
    }
}

/// A claim is live while its directory still describes a testbed with that id.
/// A claim made by an `up` that has not written its state file yet counts as
/// live too when the directory exists, so a racing `up` does not steal it.
fn claim_is_live(id: u8, dir: &Path) -> bool {
    match TestbedState::load(dir) {
        Ok(s) => s.id == id,
        Err(_) => dir.is_dir() && !TestbedState::path_in(dir).exists(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leftover_network_objects_keep_their_id_busy() {
        let names = vec![
            "vk2-host".to_string(),
            "vk12-n1".to_string(),
            "eth0".to_string(),
        ];
        assert_eq!(ids_with_network_objects(&names), vec![2, 12]);
    }

    fn scratch(name: &str) -> PathBuf {
        let p =
            std::env::temp_dir().join(format!("testbed-registry-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    #[test]
    fn an_id_handed_to_another_directory_is_not_ours_any_more() {
        let root = scratch("other");
        let reg = Registry::at(root.join("reg"));
        let a = root.join("a");
        let b = root.join("b");
        assert_eq!(reg.claim(&a, &[]).unwrap(), 1);
        assert!(!reg.held_by_other(1, &a));
        assert!(
            reg.held_by_other(1, &b),
            "b's stale state file must not tear down a's network"
        );
        assert!(
            !reg.held_by_other(2, &b),
            "an unclaimed id is nobody else's"
        );
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn ids_are_handed_out_lowest_first_and_kept_per_directory() {
        let root = scratch("lowest");
        let reg = Registry::at(root.join("reg"));
        let a = root.join("a");
        let b = root.join("b");
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        assert_eq!(reg.claim(&a, &[]).unwrap(), 1);
        assert_eq!(reg.claim(&a, &[]).unwrap(), 1, "same dir, same id");
        assert_eq!(
            reg.claim(&b, &["vk2-host".into()]).unwrap(),
            3,
            "2 has leftovers"
        );
        reg.release(&a);
        assert_eq!(reg.id_of(&a), None);
        assert_eq!(reg.id_of(&b), Some(3));
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_claim_whose_directory_is_gone_is_taken_over() {
        let root = scratch("stale");
        let reg = Registry::at(root.join("reg"));
        let gone = root.join("gone");
        std::fs::create_dir_all(&gone).unwrap();
        assert_eq!(reg.claim(&gone, &[]).unwrap(), 1);
        std::fs::remove_dir_all(&gone).unwrap();
        let c = root.join("c");
        std::fs::create_dir_all(&c).unwrap();
        assert_eq!(reg.claim(&c, &[]).unwrap(), 1);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_prefix_of_another_id_is_not_a_match() {
        // vk1- must not be taken for vk12-.
        assert_eq!(
            ids_with_network_objects(&["vk12-host".to_string()]),
            vec![12]
        );
    }
}
