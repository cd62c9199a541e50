//! The host side of the testbed's network, through `ip` and `nft`.
//!
//! `up` turns on forwarding and creates an interface `<prefix>host` that holds
//! the host address (the source the agent's per-pod routes use). It is one end
//! of a veth pair whose other end, `<prefix>hostp`, stays in the root namespace
//! too: the kernels these tests run on may lack the `dummy` link type, while
//! veth is always there (pods need it).
//!
//! `up` also makes the outside network: a namespace `<prefix>outside` that
//! stands for a client outside the cluster (`testbed outside`). Like a pod it
//! has a /32 (`10.<100+id>.253.1`) on a veth into the host (`<prefix>out`) and
//! a link-local gateway pinned by a static neighbour entry, but no default
//! route: only the nodes' addresses and the load-balancer pool are routed, so
//! a pod address or a ClusterIP has no route from there (and the proxy's table
//! rejects whatever it forwards from that veth without a DNAT, should someone
//! add a route).
//!
//! `down` removes everything named with the testbed's prefix: network
//! namespaces (after killing what still runs inside them), host interfaces
//! (the veths' host ends and the dummy), and the nftables tables.

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

/// The outside namespace's gateway: link-local, never assigned, pinned to the
/// host end's MAC (the pods' pattern, see `agent::network`).
const OUTSIDE_GATEWAY: &str = "169.254.1.1";

/// What the outside network of a testbed is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outside {
    /// The namespace, `<prefix>outside`.
    pub netns: String,
    /// The host end of its veth, `<prefix>out` (the namespace's end is `eth0`).
    pub link: String,
    /// The namespace's address, `10.<100+id>.253.1`.
    pub ip: String,
    /// The host address, the source of the host's route back to it.
    pub host_ip: String,
    /// What it routes: every node's address (/32) and the load-balancer pool.
    pub routes: Vec<String>,
}

impl Outside {
    /// The outside network of testbed `id` whose nodes have `node_addrs`.
    pub fn new(id: u8, host_ip: &str, node_addrs: &[std::net::Ipv4Addr]) -> Outside {
        use crate::topology::{lb_pool_cidr, outside_ip, outside_link, outside_netns};
        let mut routes: Vec<String> = node_addrs.iter().map(|a| format!("{a}/32")).collect();
        routes.push(lb_pool_cidr(id));
        Outside {
            netns: outside_netns(id),
            link: outside_link(id),
            ip: outside_ip(id),
            host_ip: host_ip.to_string(),
            routes,
        }
    }

    /// The outside network of the testbed described by `state`.
    pub fn of(state: &crate::state::TestbedState) -> Outside {
        let addrs: Vec<std::net::Ipv4Addr> = state
            .nodes
            .iter()
            .filter_map(|n| crate::agent::network::Cidr::parse(&n.pod_cidr))
            .map(|c| c.node_addr())
            .collect();
        Outside::new(state.id, &state.host_ip, &addrs)
    }

    /// The `ip` commands after the namespace and the veth exist, in order;
    /// each may run again harmlessly (`replace`). The neighbour entry needs
    /// the host end's MAC, see [`Outside::gateway_commands`].
    pub fn address_commands(&self) -> Vec<Vec<String>> {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let ns = self.netns.as_str();
        let ip32 = format!("{}/32", self.ip);
        vec![
            s(&["-n", ns, "link", "set", "lo", "up"]),
            s(&["-n", ns, "addr", "replace", &ip32, "dev", "eth0"]),
            s(&["-n", ns, "link", "set", "eth0", "up"]),
            s(&[
                "-n",
                ns,
                "route",
                "replace",
                OUTSIDE_GATEWAY,
                "dev",
                "eth0",
                "scope",
                "link",
            ]),
            s(&["link", "set", &self.link, "up"]),
            s(&[
                "route",
                "replace",
                &ip32,
                "dev",
                &self.link,
                "src",
                &self.host_ip,
            ]),
        ]
    }

    /// The neighbour entry of the gateway and the routes through it: the
    /// node addresses and the pool, nothing else (no default route).
    pub fn gateway_commands(&self, host_mac: &str) -> Vec<Vec<String>> {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let ns = self.netns.as_str();
        let mut out = vec![s(&[
            "-n",
            ns,
            "neigh",
            "replace",
            OUTSIDE_GATEWAY,
            "lladdr",
            host_mac,
            "dev",
            "eth0",
            "nud",
            "permanent",
        ])];
        for r in &self.routes {
            out.push(s(&[
                "-n",
                ns,
                "route",
                "replace",
                r,
                "via",
                OUTSIDE_GATEWAY,
                "dev",
                "eth0",
            ]));
        }
        out
    }

    /// Whether the namespace and its veth are there (what `testbed outside`
    /// checks before it makes them).
    pub fn exists(&self) -> bool {
        netns_names().contains(&self.netns) && link_names().contains(&self.link)
    }

    /// Makes the outside network, or brings it back to what it should be.
    /// Two callers at once are fine: a namespace or veth the other one made
    /// first is taken as it is.
    pub fn setup(&self) -> Result<(), HostNetError> {
        if !netns_names().contains(&self.netns) {
            let made = run("ip", &["netns", "add", &self.netns]);
            if made.is_err() && !netns_names().contains(&self.netns) {
                made?;
            }
        }
        if !link_names().contains(&self.link) {
            let made = run(
                "ip",
                &[
                    "link",
                    "add",
                    &self.link,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    "eth0",
                    "netns",
                    &self.netns,
                ],
            );
            if made.is_err() && !link_names().contains(&self.link) {
                made?;
            }
        }
        for args in self.address_commands() {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run("ip", &args)?;
        }
        let mac_path = format!("/sys/class/net/{}/address", self.link);
        let mac = std::fs::read_to_string(&mac_path).map_err(|source| HostNetError::Run {
            command: format!("read {mac_path}"),
            source,
        })?;
        for args in self.gateway_commands(mac.trim()) {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run("ip", &args)?;
        }
        Ok(())
    }
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
    fn the_outside_routes_nodes_and_the_pool_and_nothing_else() {
        let o = Outside::new(
            3,
            "10.103.255.1",
            &["10.103.1.1".parse().unwrap(), "10.103.2.1".parse().unwrap()],
        );
        assert_eq!(o.netns, "vk3-outside");
        assert_eq!(o.link, "vk3-out");
        let cmds: Vec<String> = o
            .address_commands()
            .into_iter()
            .chain(o.gateway_commands("aa:bb:cc:dd:ee:ff"))
            .map(|c| c.join(" "))
            .collect();
        assert!(cmds.contains(&"-n vk3-outside addr replace 10.103.253.1/32 dev eth0".to_string()));
        assert!(
            cmds.contains(
                &"route replace 10.103.253.1/32 dev vk3-out src 10.103.255.1".to_string()
            )
        );
        let routes: Vec<&String> = cmds.iter().filter(|c| c.contains(" via ")).collect();
        assert_eq!(
            routes,
            [
                "-n vk3-outside route replace 10.103.1.1/32 via 169.254.1.1 dev eth0",
                "-n vk3-outside route replace 10.103.2.1/32 via 169.254.1.1 dev eth0",
                "-n vk3-outside route replace 10.103.254.0/24 via 169.254.1.1 dev eth0",
            ]
        );
        assert!(
            !cmds.iter().any(|c| c.contains("default")),
            "no default route: {cmds:?}"
        );
    }

    #[test]
    fn only_inet_tables_are_candidates() {
        let text = "table inet vk1\ntable ip nat\ntable inet filter\n";
        assert_eq!(parse_nft_tables(text), ["vk1", "filter"]);
    }
}
