//! The host side of the testbed's network, through `ip` and `nft`.
//!
//! `up` turns on forwarding and creates an interface `<prefix>host` that holds
//! the host address (the source the agent's per-pod routes use). It is one end
//! of a veth pair whose other end, `<prefix>hostp`, stays in the root namespace
//! too: the kernels these tests run on may lack the `dummy` link type, while
//! veth is always there (pods need it). `down`
//! removes everything named with the testbed's prefix: network namespaces (after
//! killing what still runs inside them), host interfaces (the veths' host ends and
//! the dummy), and the agent's nftables table.

use std::process::Command;

/// Errors setting the host network up.
#[derive(Debug, thiserror::Error)]
pub enum HostNetError {
    #[error("running `{command}`: {source}")]
    Run {
        command: String,
        source: std::io::Error,
    },
    #[error("`{command}` failed: {stderr}")]
    Failed { command: String, stderr: String },
    #[error("enabling IPv4 forwarding: {0}")]
    Forwarding(std::io::Error),
}

fn run(program: &str, args: &[&str]) -> Result<String, HostNetError> {
    let command = format!("{program} {}", args.join(" "));
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|source| HostNetError::Run {
            command: command.clone(),
            source,
        })?;
    if !out.status.success() {
        return Err(HostNetError::Failed {
            command,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Name of the interface holding the host address.
pub fn host_interface(prefix: &str) -> String {
    format!("{prefix}host")
}

/// Network namespace names from `ip netns list` (`name (id: 3)` or `name`).
fn parse_netns_list(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// Interface names from `ip -o link show` (`7: vk1-a@if2: <...> ...`).
fn parse_link_list(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap_or(n).to_string())
        .collect()
}

/// Table names of family `inet` from `nft list tables` (`table inet vk1`).
fn parse_nft_tables(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            match (w.next(), w.next(), w.next()) {
                (Some("table"), Some("inet"), Some(name)) => Some(name.to_string()),
                _ => None,
            }
        })
        .collect()
}

/// Every network namespace on the machine.
pub fn netns_names() -> Vec<String> {
    run("ip", &["netns", "list"])
        .map(|t| parse_netns_list(&t))
        .unwrap_or_default()
}

/// Every host interface.
pub fn link_names() -> Vec<String> {
    run("ip", &["-o", "link", "show"])
        .map(|t| parse_link_list(&t))
        .unwrap_or_default()
}

/// Names of network namespaces and interfaces (what testbed ids are read from).
pub fn network_names() -> Vec<String> {
    let mut names = netns_names();
    names.extend(link_names());
    names
}

/// Forwarding on, and the host-address interface up.
pub fn setup(prefix: &str, host_ip: &str) -> Result<(), HostNetError> {
    std::fs::write("/proc/sys/net/ipv4/ip_forward", "1").map_err(HostNetError::Forwarding)?;
    let dev = host_interface(prefix);
    let peer = format!("{dev}p");
    if !link_names().contains(&dev) {
        run(
            "ip",
            &["link", "add", &dev, "type", "veth", "peer", "name", &peer],
        )?;
    }
    run(
        "ip",
        &["addr", "replace", &format!("{host_ip}/32"), "dev", &dev],
    )?;
    run("ip", &["link", "set", &peer, "up"])?;
    run("ip", &["link", "set", &dev, "up"])?;
    Ok(())
}

/// What `teardown` found and removed.
#[derive(Debug, Default)]
pub struct Teardown {
    pub killed: Vec<i32>,
    pub namespaces: Vec<String>,
    pub links: Vec<String>,
    pub tables: Vec<String>,
}

/// Removes every network object of the testbed with `prefix` and nftables table
/// `table`, killing what still runs inside its namespaces first.
pub fn teardown(prefix: &str, table: &str) -> Teardown {
    let mut done = Teardown::default();
    let namespaces: Vec<String> = netns_names()
        .into_iter()
        .filter(|n| n.starts_with(prefix))
        .collect();
    for ns in &namespaces {
        let pids: Vec<i32> = run("ip", &["netns", "pids", ns])
            .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default();
        for pid in &pids {
            crate::controlplane::process::kill_now(*pid);
        }
        for pid in &pids {
            crate::controlplane::process::wait_gone(*pid, std::time::Duration::from_secs(5));
        }
        done.killed.extend(pids);
    }
    for ns in namespaces {
        if run("ip", &["netns", "delete", &ns]).is_ok() {
            done.namespaces.push(ns);
        }
    }
    for link in link_names().into_iter().filter(|n| n.starts_with(prefix)) {
        // Deleting one end of a veth removes its peer, which may make the next
        // delete fail: that is fine.
        if run("ip", &["link", "delete", &link]).is_ok() {
            done.links.push(link);
        }
    }
    let tables = run("nft", &["list", "tables"])
        .map(|t| parse_nft_tables(&t))
        .unwrap_or_default();
    for t in tables
        .into_iter()
        .filter(|t| t == table || t.starts_with(prefix))
    {
        if run("nft", &["delete", "table", "inet", &t]).is_ok() {
            done.tables.push(t);
        }
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netns_names_are_read_with_or_without_ids() {
        let text = "vk1-node-1a-1-web-0 (id: 3)\nvk1-x\nother (id: 0)\n";
        assert_eq!(
            parse_netns_list(text),
            ["vk1-node-1a-1-web-0", "vk1-x", "other"]
        );
    }

    #[test]
    fn link_names_drop_the_peer_suffix() {
        let text = "1: lo: <LOOPBACK,UP> mtu 65536\n7: vk1-a3@if2: <BROADCAST> mtu 1500\n9: vk1-host: <BROADCAST,NOARP> mtu 1500\n";
        assert_eq!(parse_link_list(text), ["lo", "vk1-a3", "vk1-host"]);
    }

    #[test]
    fn only_inet_tables_are_candidates() {
        let text = "table inet vk1\ntable ip nat\ntable inet filter\n";
        assert_eq!(parse_nft_tables(text), ["vk1", "filter"]);
    }
}
