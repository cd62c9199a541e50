//! Chaos run (issue 3): ten faults drawn from a seed, one after the other,
//! on a 3 shards x 2 replicas cluster (zone Required 1, node Required 1) on
//! the shared testbed (3 zones x 3 nodes), while a client writes throughout
//! and confirms every write with `WAIT 2` (both replicas of its shard).
//!
//! Why not `WAIT 1`: when a zone partition leaves a majority of primaries on
//! the small side, Valkey there elects that side's replica of another shard,
//! which may lack a write the other replica acknowledged (the likely cause of
//! the one write in 26,495 seed 9173 lost, read from its fault log, not
//! reproduced). That election is Valkey's alone; what the cluster guarantees,
//! and this run checks, is that a write every replica acknowledged survives
//! every fault, the operator's failovers included (docs/guide/configuration.md,
//! "Data safety"). `safety_small_clusters` checks `WAIT 1` with one replica, where
//! it is the same guarantee.
//!
//! The faults: a node fails and heals after a while (sometimes past the
//! operator's 20 s node-lost grace, so its members are re-created on another
//! node of the zone), a zone is partitioned and healed, the operator is
//! SIGKILLed and started again, a member's valkey-server is SIGKILLed (the
//! primary or a replica of a shard). Each kind comes at least once; the rest
//! are drawn at random. The plan is printed first and every step as it
//! happens, so a run is reproduced with `CHAOS_SEED=<seed>`. Without it the
//! seed is fresh (drawn from the clock), so every `make test` tries a plan
//! no run has tried before; `make chaos-seeds` runs many fixed ones.
//!
//! While a fault lasts, the Required constraints must hold among the placed
//! members; after each, the cluster must be Ready again (every member Ready,
//! Valkey agreeing, `redis-cli --cluster check` passing) with the Required
//! constraints holding. At the end primaries are balanced again (one per
//! zone) and every write acknowledged with `WAIT 2` reads back.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use anyhow::{Context, Result, bail, ensure};
use e2e::cluster::{Env, Operator, condition_status, wait_until};
use e2e::manifest::cluster_manifest;
use e2e::suite::finish_load;
use e2e::topology::{
    Faults, cond_brief, current, node_required_holds, primary_zones, status_topology_matches,
    zone_required_holds, zones_of_nodes,
};
use rand::rngs::ChaCha8Rng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand::{RngExt, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::{Duration, Instant};

const FAULTS: usize = 10;
const NAME: &str = "chaos";
/// Quiet period given to `spec.primaryBalancing`.
const QUIET_SECONDS: u64 = 10;
/// How long the cluster may take to be Ready again after a fault ends.
const RECOVERY_TIMEOUT: Duration = Duration::from_secs(360);

fn manifest() -> String {
    cluster_manifest(NAME, 3, 2)
        .spread("zone", 1, "Required")
        .spread("node", 1, "Required")
        .extra_spec(&format!(
            "  primaryBalancing:\n    mode: Auto\n    quietPeriodSeconds: {QUIET_SECONDS}\n"
        ))
        .yaml()
}

/// Which copy of a shard a process kill hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Copy {
    Primary,
    Replica,
}

/// One fault of the plan, in stable names only (nodes, zones, shards), so
/// that a seed always gives the same plan.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Fault {
    /// `testbed node fail`, then `node heal` after `hold` seconds.
    NodeFail { node: String, hold: u64 },
    /// `testbed zone partition`, then `zone heal` after `hold` seconds.
    ZonePartition { zone: String, hold: u64 },
    /// SIGKILL the operator; start it again after `down` seconds.
    OperatorRestart { down: u64 },
    /// SIGKILL the valkey-server of the shard's primary, or of its replica
    /// with the lowest member index.
    ValkeyKill { shard: u32, copy: Copy },
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::NodeFail { node, hold } => {
                write!(f, "node fail {node}, heal after {hold} s")
            }
            Fault::ZonePartition { zone, hold } => {
                write!(f, "zone partition {zone}, heal after {hold} s")
            }
            Fault::OperatorRestart { down } => {
                write!(f, "operator SIGKILLed, started again after {down} s")
            }
            Fault::ValkeyKill { shard, copy } => {
                let which = match copy {
                    Copy::Primary => "primary",
                    Copy::Replica => "first replica",
                };
                write!(f, "valkey-server of shard {shard}'s {which} SIGKILLed")
            }
        }
    }
}

/// The plan for `seed`: each kind once, the rest drawn at random, shuffled.
fn plan(seed: u64, nodes: &[String], zones: &[String], shards: u32) -> Vec<Fault> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let draw = |kind: u32, rng: &mut ChaCha8Rng| match kind {
        0 => Fault::NodeFail {
            node: nodes.choose(rng).cloned().unwrap_or_default(),
            hold: rng.random_range(5..=45),
        },
        1 => Fault::ZonePartition {
            zone: zones.choose(rng).cloned().unwrap_or_default(),
            hold: rng.random_range(5..=30),
        },
        2 => Fault::OperatorRestart {
            down: rng.random_range(0..=10),
        },
        _ => Fault::ValkeyKill {
            shard: rng.random_range(0..shards),
            copy: if rng.random_bool(0.6) {
                Copy::Primary
            } else {
                Copy::Replica
            },
        },
    };
    let mut out: Vec<Fault> = (0..4).map(|k| draw(k, &mut rng)).collect();
    while out.len() < FAULTS {
        let kind = rng.random_range(0..4);
        out.push(draw(kind, &mut rng));
    }
    out.shuffle(&mut rng);
    out
}

/// A seed no earlier run is likely to have used: the clock's nanoseconds,
/// kept to six digits so it is easy to copy from a log.
fn fresh_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    (nanos % 1_000_000) as u64
}

fn seed() -> Result<u64> {
    match std::env::var("CHAOS_SEED") {
        Ok(s) => s
            .trim()
            .parse()
            .with_context(|| format!("CHAOS_SEED={s:?} is not a whole number")),
        Err(_) => Ok(fresh_seed()),
    }
}

/// Everything the run shares.
struct Run<'a> {
    env: &'a Env,
    ns: &'a str,
    zones: BTreeMap<String, String>,
    started: Instant,
    operator: Operator,
    operators: u32,
    /// The cluster's password, read once the cluster exists.
    password: String,
}

impl Run<'_> {
    fn say(&self, what: impl fmt::Display) {
        println!(
            "chaos: t={:6.1}s {what}",
            self.started.elapsed().as_secs_f64()
        );
    }

    /// Ready for the latest generation, the 3x2 shape whole (Valkey agrees,
    /// `--cluster check` passes) and the Required constraints holding.
    fn recovered(&self) -> Result<()> {
        let obj = self.env.cluster(self.ns, NAME)?;
        ensure!(current(&obj), "status.observedGeneration is behind");
        ensure!(
            condition_status(&obj, "Ready").as_deref() == Some("True"),
            "{}",
            cond_brief(&obj, "Ready")
        );
        let shape = self.env.check_shape(self.ns, NAME, 3, 2)?;
        node_required_holds(&shape.members)?;
        zone_required_holds(&shape.members, &self.zones)?;
        // status.topology may still describe an older observation until the
        // operator's next status write; the caller's poll waits for it.
        status_topology_matches(&obj, &shape.members, &self.zones)
    }

    fn wait_recovered(&self, timeout: Duration, what: &str) -> Result<Duration> {
        let from = Instant::now();
        let mut last = String::new();
        let res = wait_until(timeout, Duration::from_secs(1), || match self.recovered() {
            Ok(()) => Ok(true),
            Err(e) => {
                last = format!("{e:#}");
                Ok(false)
            }
        });
        if res.is_err() {
            bail!("{what}: the cluster was not Ready again within {timeout:?}: {last}");
        }
        Ok(from.elapsed())
    }

    /// Holds a fault for `secs`, checking the Required constraints among the
    /// placed members every 2 s.
    fn hold(&self, secs: u64) -> Result<()> {
        let until = Instant::now() + Duration::from_secs(secs);
        loop {
            let members = self.env.members(self.ns, NAME)?;
            node_required_holds(&members)?;
            zone_required_holds(&members, &self.zones)?;
            let now = Instant::now();
            if now >= until {
                return Ok(());
            }
            std::thread::sleep((until - now).min(Duration::from_secs(2)));
        }
    }

    fn restart_operator(&mut self, down: u64) -> Result<()> {
        let pid = self.operator.pid();
        self.operator.kill();
        self.say(format_args!("operator pid {pid:?} killed"));
        std::thread::sleep(Duration::from_secs(down));
        self.operators += 1;
        self.operator = self
            .env
            .start_operator(&format!("{NAME}-{}", self.operators))?;
        self.say(format_args!(
            "operator started again (pid {:?}, log {})",
            self.operator.pid(),
            self.operator.log.display()
        ));
        Ok(())
    }

    fn kill_valkey(&self, shard: u32, copy: Copy) -> Result<()> {
        let members = self.env.members(self.ns, NAME)?;
        let of_shard = members
            .iter()
            .filter(|m| m.shard == shard && !m.deleting && !m.ip.is_empty());
        // The role Valkey gives each member now, not the pod label: the label
        // follows a failover Valkey made on its own only at the next resync.
        // A member that does not answer is neither.
        let live_primary = |ip: &str| -> Option<bool> {
            let role = self.env.valkey_cli(ip, &self.password, &["role"]).ok()?;
            Some(role.starts_with("master"))
        };
        let want = copy == Copy::Primary;
        let victim = of_shard
            .clone()
            .find(|m| live_primary(&m.ip) == Some(want))
            .with_context(|| format!("shard {shard} has no live {copy:?}: {members:#?}"))?;
        let pid = self.env.kill_valkey(&victim.ip)?;
        self.say(format_args!(
            "SIGKILL valkey-server pid {pid} of {} ({copy:?} in Valkey, labelled {}, {} on {})",
            victim.name,
            victim.role,
            self.zones.get(&victim.node).cloned().unwrap_or_default(),
            victim.node
        ));
        Ok(())
    }

    /// Carries out one fault and undoes it.
    fn inject(&mut self, fault: &Fault, faults: &mut Faults) -> Result<()> {
        match fault {
            Fault::NodeFail { node, hold } => {
                let on: Vec<String> = self
                    .env
                    .members(self.ns, NAME)?
                    .into_iter()
                    .filter(|m| &m.node == node)
                    .map(|m| format!("{} ({})", m.name, m.role))
                    .collect();
                faults.node_fail(node)?;
                self.say(format_args!("node {node} failed; its members: {on:?}"));
                self.hold(*hold)?;
                faults.node_heal(node)?;
                self.say(format_args!("node {node} healed"));
            }
            Fault::ZonePartition { zone, hold } => {
                faults.zone_partition(zone)?;
                self.say(format_args!("zone {zone} partitioned"));
                self.hold(*hold)?;
                faults.zone_heal(zone)?;
                self.say(format_args!("zone {zone} healed"));
            }
            Fault::OperatorRestart { down } => self.restart_operator(*down)?,
            Fault::ValkeyKill { shard, copy } => self.kill_valkey(*shard, *copy)?,
        }
        Ok(())
    }
}

fn chaos(run: &mut Run<'_>, faults: &mut Faults) -> Result<()> {
    let seed = seed()?;
    let nodes: Vec<String> = run.zones.keys().cloned().collect();
    let zone_names: Vec<String> = run
        .zones
        .values()
        .cloned()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let plan = plan(seed, &nodes, &zone_names, 3);
    println!("chaos: seed {seed} (run again with CHAOS_SEED={seed}); the plan:");
    for (i, f) in plan.iter().enumerate() {
        println!("chaos:   {:2}. {f}", i + 1);
    }

    let (env, ns) = (run.env, run.ns);
    env.apply(ns, &manifest())?;
    let took = run.wait_recovered(Duration::from_secs(300), "after apply")?;
    run.say(format_args!(
        "3x2 cluster Ready {:.1}s after apply",
        took.as_secs_f64()
    ));
    let password = env.password(ns, NAME)?;
    run.password = password.clone();
    let dir = env.work_dir("topology_chaos")?;
    let mut load = env.start_member_load(
        ns,
        NAME,
        &password,
        &dir,
        "chaos",
        &["--interval-ms", "5", "--wait-replicas", "2"],
    )?;

    let mut figures = Vec::new();
    for (i, fault) in plan.iter().enumerate() {
        let step = format!("[{}/{}] {fault}", i + 1, plan.len());
        run.say(format_args!("{step}"));
        run.inject(fault, faults)
            .with_context(|| format!("chaos {step}"))?;
        let took = run
            .wait_recovered(RECOVERY_TIMEOUT, &step)
            .with_context(|| format!("chaos seed {seed}"))?;
        ensure!(
            load.alive(),
            "chaos {step}: the judge's load stopped: {:?}",
            load.finish(Duration::from_secs(5))
        );
        let members = env.members(ns, NAME)?;
        run.say(format_args!(
            "[{}/{}] Ready again {:.1}s after the fault ended; primaries in {:?}; {} writes acknowledged so far",
            i + 1,
            plan.len(),
            took.as_secs_f64(),
            primary_zones(&members, &run.zones),
            load.acked_so_far()
        ));
        figures.push((fault.clone(), took));
        let pause = (seed.wrapping_add(i as u64) % 4) + 1;
        std::thread::sleep(Duration::from_secs(pause));
    }

    // Balance comes back once the faults stop.
    let mut last = String::new();
    let res = wait_until(Duration::from_secs(240), Duration::from_secs(1), || {
        let obj = env.cluster(ns, NAME)?;
        let members = env.members(ns, NAME)?;
        let pz = primary_zones(&members, &run.zones);
        let one_per_zone = pz.iter().collect::<BTreeSet<_>>().len() == 3;
        let aligned = condition_status(&obj, "PrimaryPlacementAligned").as_deref() == Some("True");
        last = format!(
            "{}; primaries in {pz:?}",
            cond_brief(&obj, "PrimaryPlacementAligned")
        );
        Ok(aligned && one_per_zone && run.recovered().is_ok())
    });
    if res.is_err() {
        bail!("chaos seed {seed}: primaries not balanced again within 240 s: {last}");
    }
    run.say(format_args!("primaries balanced again: {last}"));

    let summary = finish_load(&mut load, "chaos")?;
    let verified = env
        .verify_cluster_keys(ns, NAME, &password, &load.keys)
        .with_context(|| format!("chaos seed {seed}: WAIT-acknowledged writes lost"))?;
    run.say(format_args!("load {summary}; verify {verified}"));
    for (f, took) in &figures {
        println!(
            "chaos: FIGURE fault end to Ready: {:5.1}s  {f}",
            took.as_secs_f64()
        );
    }
    Ok(())
}

#[test]
fn ten_seeded_faults_under_write_load_keep_required_spread_and_every_acknowledged_write() {
    let Some(env) = Env::or_skip("topology_chaos") else {
        return;
    };
    env.install_crd().unwrap();
    let ns = env.namespace("e2e-chaos").unwrap();
    let mut run = Run {
        env: &env,
        ns: &ns.name,
        zones: zones_of_nodes(&env).unwrap(),
        started: Instant::now(),
        operator: env.start_operator(&format!("{NAME}-1")).unwrap(),
        operators: 1,
        password: String::new(),
    };
    let res = {
        let mut faults = Faults::new(&env, "topology_chaos");
        chaos(&mut run, &mut faults)
        // faults drops here: everything healed before the diagnostics.
    };
    if let Err(e) = res {
        panic!("{e:#}\n{}", env.diagnostics(&ns.name, NAME, &run.operator));
    }
    println!(
        "chaos: the run took {:.1}s",
        run.started.elapsed().as_secs_f64()
    );
}

#[test]
fn a_seed_always_gives_the_same_plan_with_every_kind_of_fault() {
    let nodes: Vec<String> = (1..=9).map(|i| format!("node-{i}")).collect();
    let zones: Vec<String> = ["zone-1a", "zone-1b", "zone-1c"].map(String::from).to_vec();
    let a = plan(7, &nodes, &zones, 3);
    assert_eq!(a, plan(7, &nodes, &zones, 3));
    assert_ne!(a, plan(8, &nodes, &zones, 3));
    assert_eq!(a.len(), FAULTS);
    assert!(a.iter().any(|f| matches!(f, Fault::NodeFail { .. })));
    assert!(a.iter().any(|f| matches!(f, Fault::ZonePartition { .. })));
    assert!(a.iter().any(|f| matches!(f, Fault::OperatorRestart { .. })));
    assert!(a.iter().any(|f| matches!(f, Fault::ValkeyKill { .. })));
}
