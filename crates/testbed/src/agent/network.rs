//! Pod networking: one network namespace per pod, a veth pair into the root
//! namespace, a /32 per pod routed from the host, and the address allocator.
//!
//! The layout is the "routed /32" pattern of Calico: the pod sees a default
//! route via the link-local 169.254.1.1, pinned to the host veth's MAC by a
//! static neighbour entry, so no bridge and no proxy ARP are needed; the host
//! routes each pod address to its veth. Pod-to-pod traffic is forwarded by the
//! root namespace (`up` enables `ip_forward`), which is also where node and zone
//! faults drop it (see `faults`).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

/// The pod-side gateway; never assigned to an interface.
const GATEWAY: &str = "169.254.1.1";

/// Errors of the network layer.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("no free pod address left in {cidr} of node {node}")]
    Exhausted { node: String, cidr: String },
    #[error("running `{command}`: {message}")]
    Command { command: String, message: String },
    #[error("reading or writing the allocator file {path}: {message}")]
    Persist { path: PathBuf, message: String },
}

/// An IPv4 range parsed from a node's `pod_cidr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub network: Ipv4Addr,
    pub len: u8,
}

impl Cidr {
    /// Parses `a.b.c.d/len`, masking host bits away.
    pub fn parse(text: &str) -> Option<Cidr> {
        let (addr, len) = text.split_once('/')?;
        let addr: Ipv4Addr = addr.trim().parse().ok()?;
        let len: u8 = len.trim().parse().ok()?;
        if len > 30 {
            return None;
        }
        let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
        Some(Cidr {
            network: Ipv4Addr::from(u32::from(addr) & mask),
            len,
        })
    }

    /// Number of addresses pods may get: everything but the network address,
    /// the `.1` (the node's own InternalIP) and the broadcast address.
    pub fn pod_slots(&self) -> u32 {
        (1u32 << (32 - self.len)).saturating_sub(3)
    }

    /// The `i`-th pod address (0-based), starting at network + 2.
    pub fn pod_addr(&self, i: u32) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.network) + 2 + i)
    }

    /// network + 1: the node's InternalIP.
    pub fn node_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.network) + 1)
    }

    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        let mask = if self.len == 0 {
            0
        } else {
            u32::MAX << (32 - self.len)
        };
        u32::from(ip) & mask == u32::from(self.network)
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.network, self.len)
    }
}

/// Per-node allocation state: a counter that only moves forward (so a new pod
/// never gets an address a previous pod had, until the range wraps) and the
/// addresses currently leased, by pod UID.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct NodePool {
    pub next: u32,
    pub leases: BTreeMap<String, Ipv4Addr>,
}

/// The address allocator of every node, persisted in `DIR/agent/ipam.json` so
/// an agent restart neither reuses an address nor moves a running pod.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Ipam {
    pub nodes: BTreeMap<String, NodePool>,
}

impl Ipam {
    /// Loads the allocator file; a missing file is an empty allocator.
    pub fn load(path: &Path) -> Result<Ipam, NetError> {
        match std::fs::read_to_string(path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| NetError::Persist {
                path: path.to_path_buf(),
                message: e.to_string(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Ipam::default()),
            Err(e) => Err(NetError::Persist {
                path: path.to_path_buf(),
                message: e.to_string(),
            }),
        }
    }

    /// Writes the allocator file atomically.
    pub fn save(&self, path: &Path) -> Result<(), NetError> {
        let persist = |e: String| NetError::Persist {
            path: path.to_path_buf(),
            message: e,
        };
        let text = serde_json::to_string_pretty(self).map_err(|e| persist(e.to_string()))?;
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, text).map_err(|e| persist(e.to_string()))?;
        std::fs::rename(&tmp, path).map_err(|e| persist(e.to_string()))
    }

    /// The address of pod `uid` on `node`: its existing lease, else `preferred`
    /// (the podIP the API already shows, e.g. after an agent restart) when it is
    /// in range and free, else the next never-used address.
    pub fn allocate(
        &mut self,
        node: &str,
        cidr: &Cidr,
        uid: &str,
        preferred: Option<Ipv4Addr>,
    ) -> Result<Ipv4Addr, NetError> {
        let pool = self.nodes.entry(node.to_string()).or_default();
        if let Some(ip) = pool.leases.get(uid) {
            return Ok(*ip);
        }
        if let Some(ip) = preferred {
            let in_range = cidr.contains(ip) && u32::from(ip) >= u32::from(cidr.pod_addr(0));
            let last = cidr.pod_addr(cidr.pod_slots().saturating_sub(1));
            if in_range
                && u32::from(ip) <= u32::from(last)
                && !pool.leases.values().any(|l| *l == ip)
            {
                pool.leases.insert(uid.to_string(), ip);
                return Ok(ip);
            }
        }
        let slots = cidr.pod_slots();
        for _ in 0..slots {
            let candidate = cidr.pod_addr(pool.next % slots.max(1));
            pool.next = pool.next.wrapping_add(1);
            if !pool.leases.values().any(|l| *l == candidate) {
                pool.leases.insert(uid.to_string(), candidate);
                return Ok(candidate);
            }
        }
        Err(NetError::Exhausted {
            node: node.to_string(),
            cidr: cidr.to_string(),
        })
    }

    /// Forgets the lease of pod `uid` (the counter keeps going).
    pub fn release(&mut self, node: &str, uid: &str) {
        if let Some(pool) = self.nodes.get_mut(node) {
            pool.leases.remove(uid);
        }
    }

    /// Drops leases of pods that are not in `alive` (UIDs still bound to the
    /// node), e.g. pods deleted while the agent was down.
    pub fn retain(&mut self, node: &str, alive: &dyn Fn(&str) -> bool) {
        if let Some(pool) = self.nodes.get_mut(node) {
            pool.leases.retain(|uid, _| alive(uid));
        }
    }
}

/// Name of the pod's network namespace: the testbed prefix and the first 12
/// hex digits of the pod UID (short enough for any tool, unique in practice).
pub fn netns_name(prefix: &str, uid: &str) -> String {
    let short: String = uid
        .chars()
        .filter(|c| c.is_ascii_hexdigit())
        .take(12)
        .collect();
    format!("{prefix}{short}")
}

/// Name of the host end of the pod's veth, derived from its address so it is
/// unique while the address is leased and fits IFNAMSIZ (15 bytes):
/// `vk3-` + `5-23` for 10.203.5.23.
pub fn host_veth_name(prefix: &str, ip: Ipv4Addr) -> String {
    let o = ip.octets();
    format!("{prefix}{}-{}", o[2], o[3])
}

/// The `ip` commands that build a pod sandbox, in order, as argument vectors
/// (the host veth MAC is only known after the link exists, so the neighbour
/// entry is added separately, see [`Sandbox::create`]).
pub fn sandbox_commands(
    ns: &str,
    host_veth: &str,
    ip: Ipv4Addr,
    host_ip: &str,
) -> Vec<Vec<String>> {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let ip32 = format!("{ip}/32");
    vec![
        s(&["netns", "add", ns]),
        s(&[
            "link", "add", host_veth, "type", "veth", "peer", "name", "eth0", "netns", ns,
        ]),
        s(&["-n", ns, "link", "set", "lo", "up"]),
        s(&["-n", ns, "addr", "add", &ip32, "dev", "eth0"]),
        s(&["-n", ns, "link", "set", "eth0", "up"]),
        s(&[
            "-n", ns, "route", "add", GATEWAY, "dev", "eth0", "scope", "link",
        ]),
        s(&["link", "set", host_veth, "up"]),
        s(&["route", "replace", &ip32, "dev", host_veth, "src", host_ip]),
    ]
}

/// The neighbour and default route commands, run once the host MAC is known.
pub fn gateway_commands(ns: &str, host_mac: &str) -> Vec<Vec<String>> {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    vec![
        s(&[
            "-n",
            ns,
            "neigh",
            "replace",
            GATEWAY,
            "lladdr",
            host_mac,
            "dev",
            "eth0",
            "nud",
            "permanent",
        ]),
        s(&[
            "-n", ns, "route", "replace", "default", "via", GATEWAY, "dev", "eth0",
        ]),
    ]
}

/// Runs a command to completion; a non-zero exit is an error carrying stderr.
pub async fn run(program: &Path, args: &[String]) -> Result<String, NetError> {
    let out = tokio::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| NetError::Command {
            command: format!("{} {}", program.display(), args.join(" ")),
            message: e.to_string(),
        })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(NetError::Command {
            command: format!("{} {}", program.display(), args.join(" ")),
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// A pod's network sandbox as created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    pub netns: String,
    pub host_veth: String,
    pub ip: Ipv4Addr,
}

impl Sandbox {
    /// Path of the namespace file that `nsenter --net=` takes.
    pub fn netns_path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.netns)
    }

    /// Builds the sandbox from scratch (whatever a previous attempt left is
    /// removed first).
    pub async fn create(
        ip_cmd: &Path,
        netns: String,
        host_veth: String,
        ip: Ipv4Addr,
        host_ip: &str,
    ) -> Result<Sandbox, NetError> {
        let sandbox = Sandbox {
            netns,
            host_veth,
            ip,
        };
        sandbox.destroy(ip_cmd).await;
        for args in sandbox_commands(&sandbox.netns, &sandbox.host_veth, ip, host_ip) {
            run(ip_cmd, &args).await?;
        }
        let mac_path = PathBuf::from("/sys/class/net")
            .join(&sandbox.host_veth)
            .join("address");
        let mac = tokio::fs::read_to_string(&mac_path)
            .await
            .map_err(|e| NetError::Command {
                command: format!("read {}", mac_path.display()),
                message: e.to_string(),
            })?;
        for args in gateway_commands(&sandbox.netns, mac.trim()) {
            run(ip_cmd, &args).await?;
        }
        // Replies from the pod arrive on its veth with a source the host routes
        // there too, but strict reverse-path filtering still drops some paths.
        let rp = PathBuf::from("/proc/sys/net/ipv4/conf")
            .join(&sandbox.host_veth)
            .join("rp_filter");
        if let Err(e) = tokio::fs::write(&rp, "0").await {
            tracing::warn!(path = %rp.display(), error = %e, "could not turn rp_filter off");
        }
        Ok(sandbox)
    }

    /// Removes the veth (and with it the route) and the namespace, killing
    /// anything still running inside. Best effort: missing parts are fine.
    pub async fn destroy(&self, ip_cmd: &Path) {
        kill_netns_pids(ip_cmd, &self.netns).await;
        let _ = run(
            ip_cmd,
            &["link".into(), "del".into(), self.host_veth.clone()],
        )
        .await;
        let _ = run(ip_cmd, &["netns".into(), "del".into(), self.netns.clone()]).await;
    }
}

/// SIGKILLs every process inside network namespace `ns`.
pub async fn kill_netns_pids(ip_cmd: &Path, ns: &str) {
    let Ok(out) = run(ip_cmd, &["netns".into(), "pids".into(), ns.to_string()]).await else {
        return;
    };
    for pid in out.split_whitespace().filter_map(|p| p.parse::<i32>().ok()) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// Removes every pod network namespace and host veth carrying `prefix` (what a
/// previous agent run left behind), killing the processes inside first. The
/// launcher's own namespace and interfaces with the prefix (the outside
/// network, the host interface) are left alone.
pub async fn sweep(ip_cmd: &Path, prefix: &str) {
    if let Ok(out) = run(ip_cmd, &["netns".into(), "list".into()]).await {
        for name in parse_netns_list(&out)
            .into_iter()
            .filter(|n| is_pod_netns(prefix, n))
        {
            kill_netns_pids(ip_cmd, &name).await;
            let _ = run(ip_cmd, &["netns".into(), "del".into(), name]).await;
        }
    }
    if let Ok(out) = run(
        ip_cmd,
        &[
            "-o".into(),
            "link".into(),
            "show".into(),
            "type".into(),
            "veth".into(),
        ],
    )
    .await
    {
        for name in parse_link_names(&out)
            .into_iter()
            .filter(|n| is_pod_veth(prefix, n))
        {
            let _ = run(ip_cmd, &["link".into(), "del".into(), name]).await;
        }
    }
}

/// Whether `name` is a pod namespace this agent names (`<prefix><hex>`, see
/// [`netns_name`]), as opposed to the launcher's `<prefix>outside`.
pub fn is_pod_netns(prefix: &str, name: &str) -> bool {
    name.strip_prefix(prefix)
        .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|c| c.is_ascii_hexdigit()))
}

/// Whether `name` is a host veth this agent names (`<prefix><c>-<d>`), as
/// opposed to the launcher's own interfaces that share the prefix.
pub fn is_pod_veth(prefix: &str, name: &str) -> bool {
    let Some(rest) = name.strip_prefix(prefix) else {
        return false;
    };
    let mut parts = rest.split('-');
    matches!(
        (parts.next(), parts.next(), parts.next()),
        (Some(a), Some(b), None) if !a.is_empty() && !b.is_empty()
            && a.bytes().all(|c| c.is_ascii_digit()) && b.bytes().all(|c| c.is_ascii_digit())
    )
}

/// Names from `ip netns list` (`name (id: 3)` or just `name`).
pub fn parse_netns_list(out: &str) -> Vec<String> {
    out.lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// Interface names from `ip -o link show` (`12: vk3-5-2@if2: <...>`).
pub fn parse_link_names(out: &str) -> Vec<String> {
    out.lines()
        .filter_map(|l| l.split(':').nth(1))
        .map(|n| n.trim().split('@').next().unwrap_or("").to_string())
        .filter(|n| !n.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidr() -> Cidr {
        Cidr::parse("10.203.5.0/24").unwrap()
    }

    #[test]
    fn cidr_parsing_masks_host_bits_and_rejects_garbage() {
        assert_eq!(Cidr::parse("10.203.5.7/24").unwrap(), cidr());
        assert!(Cidr::parse("10.203.5.0").is_none());
        assert!(Cidr::parse("10.203.5.0/31").is_none());
        assert!(Cidr::parse("fe80::/64").is_none());
        assert_eq!(cidr().pod_slots(), 253);
        assert_eq!(cidr().pod_addr(0), Ipv4Addr::new(10, 203, 5, 2));
        assert_eq!(cidr().node_addr(), Ipv4Addr::new(10, 203, 5, 1));
    }

    #[test]
    fn every_new_pod_gets_a_fresh_address_until_the_range_wraps() {
        let mut ipam = Ipam::default();
        let a = ipam.allocate("n", &cidr(), "uid-a", None).unwrap();
        ipam.release("n", "uid-a");
        let b = ipam.allocate("n", &cidr(), "uid-b", None).unwrap();
        assert_ne!(a, b, "a re-created pod must not get the old address");
        assert_eq!(b, Ipv4Addr::new(10, 203, 5, 3));
    }

    #[test]
    fn the_same_pod_keeps_its_address() {
        let mut ipam = Ipam::default();
        let a = ipam.allocate("n", &cidr(), "uid-a", None).unwrap();
        assert_eq!(ipam.allocate("n", &cidr(), "uid-a", None).unwrap(), a);
    }

    #[test]
    fn a_preferred_address_is_taken_only_when_free_and_in_range() {
        let mut ipam = Ipam::default();
        let want = Ipv4Addr::new(10, 203, 5, 77);
        assert_eq!(ipam.allocate("n", &cidr(), "a", Some(want)).unwrap(), want);
        let other = ipam.allocate("n", &cidr(), "b", Some(want)).unwrap();
        assert_ne!(other, want);
        let outside = ipam
            .allocate("n", &cidr(), "c", Some(Ipv4Addr::new(10, 1, 1, 1)))
            .unwrap();
        assert!(cidr().contains(outside));
    }

    #[test]
    fn wrapping_skips_addresses_still_leased() {
        let small = Cidr::parse("10.0.0.0/29").unwrap(); // 5 pod slots: .2 - .6
        let mut ipam = Ipam::default();
        let first = ipam.allocate("n", &small, "keep", None).unwrap();
        for i in 0..4 {
            let uid = format!("t{i}");
            ipam.allocate("n", &small, &uid, None).unwrap();
            ipam.release("n", &uid);
        }
        let next = ipam.allocate("n", &small, "new", None).unwrap();
        assert_ne!(next, first);
        assert_eq!(next, Ipv4Addr::new(10, 0, 0, 3));
    }

    #[test]
    fn a_full_range_is_an_error_not_a_duplicate() {
        let small = Cidr::parse("10.0.0.0/30").unwrap(); // 1 slot
        let mut ipam = Ipam::default();
        ipam.allocate("n", &small, "a", None).unwrap();
        assert!(matches!(
            ipam.allocate("n", &small, "b", None),
            Err(NetError::Exhausted { .. })
        ));
    }

    #[test]
    fn allocator_survives_a_save_and_load() {
        let dir = std::env::temp_dir().join(format!("ipam-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ipam.json");
        let mut ipam = Ipam::default();
        ipam.allocate("n", &cidr(), "a", None).unwrap();
        ipam.save(&path).unwrap();
        let mut loaded = Ipam::load(&path).unwrap();
        assert_eq!(loaded, ipam);
        let b = loaded.allocate("n", &cidr(), "b", None).unwrap();
        assert_eq!(b, Ipv4Addr::new(10, 203, 5, 3));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn names_fit_linux_limits() {
        let ns = netns_name("vk200-", "1a2b3c4d-5e6f-7a8b-9c0d-112233445566");
        assert_eq!(ns, "vk200-1a2b3c4d5e6f");
        let veth = host_veth_name("vk200-", Ipv4Addr::new(10, 255, 255, 254));
        assert_eq!(veth, "vk200-255-254");
        assert!(veth.len() <= 15);
    }

    #[test]
    fn sandbox_commands_route_the_pod_address_to_its_veth() {
        let cmds = sandbox_commands(
            "vk3-ab",
            "vk3-5-2",
            Ipv4Addr::new(10, 203, 5, 2),
            "10.203.255.1",
        );
        let last = cmds.last().unwrap().join(" ");
        assert_eq!(
            last,
            "route replace 10.203.5.2/32 dev vk3-5-2 src 10.203.255.1"
        );
        assert_eq!(cmds[0].join(" "), "netns add vk3-ab");
    }

    #[test]
    fn the_sweep_only_touches_pod_veths() {
        assert!(is_pod_veth("vk3-", "vk3-5-23"));
        assert!(!is_pod_veth("vk3-", "vk3-host"));
        assert!(!is_pod_veth("vk3-", "vk3-hostp"));
        assert!(!is_pod_veth("vk3-", "vk33-5-2"));
        assert!(!is_pod_veth("vk3-", "vk3-5-2-1"));
        assert!(!is_pod_veth("vk3-", "vk3-out"));
        assert!(is_pod_netns("vk3-", "vk3-1a2b3c4d5e6f"));
        assert!(!is_pod_netns("vk3-", "vk3-outside"));
        assert!(!is_pod_netns("vk3-", "vk33-1a2b"));
    }

    #[test]
    fn ip_output_parsing() {
        assert_eq!(
            parse_netns_list("vk3-aa (id: 2)\nvk3-bb\n"),
            vec!["vk3-aa".to_string(), "vk3-bb".to_string()]
        );
        let links = "12: vk3-5-2@if2: <BROADCAST,MULTICAST,UP> mtu 1500\n13: eth9: <UP> mtu 1\n";
        assert_eq!(
            parse_link_names(links),
            vec!["vk3-5-2".to_string(), "eth9".to_string()]
        );
    }
}
