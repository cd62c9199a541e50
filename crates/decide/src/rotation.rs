// Over 600 lines: the password rotation's decisions, then their unit tests and the model test.
//! Password rotation, the decisions: a new password in the cluster's Secret reaches the
//! members live, with old and new both valid until every member takes the
//! new one, so neither the operator nor a client is locked out.
//!
//! The operator keeps the password the members were last given in
//! `<cluster>-auth-applied`. When the Secret's password differs from it:
//! 1. it logs in to each member as its own user (`valkey-operator`, whose
//!    password the rotation does not touch), or, on a member without that
//!    user yet, as `default` with the new password or else the applied one,
//!    and asks each which of the two `default` takes (ACL LIST);
//! 2. every member takes both: the one it lacks is *added* (`ACL SETUSER
//!    default on #<sha256>`; a member restarted onto the new password gets
//!    the old one back for the clients not moved yet). Replication is not
//!    concerned: replicas log in as the replication user (`primaryuser
//!    valkey-replication`, its own password in `<cluster>-users`); only a
//!    member started by a release before that user (`primaryuser default`)
//!    gets the new password as `primaryauth`;
//! 3. the rotation's number goes into the members' restart hash, so the
//!    rolling update restarts them one at a time (failover first) onto the
//!    new password: their environment (`requirepass`, the probes' and the
//!    start script's `valkey-cli`) comes from the Secret;
//! 4. once every member runs with the new environment, is reachable and
//!    takes the new password, `ACL SETUSER default on resetpass #<new>`
//!    leaves only the new one (`requirepass` already says it: the members
//!    started with it), and the record is updated (event `PasswordRotated`).
//!
//! Connected clients stay connected throughout: a password is checked at
//! AUTH only, and clients move to the new password at their own pace until
//! step 4. The decisions ([`decide`], [`may_finish`], [`default_fix`]) are
//! pure.
//!
//! Users change their minds, and every path converges to what the spec says
//! now:
//! - Each new password gets a rotation number of its own (the record keeps
//!   the target and its number), so a second change before
//!   `PasswordRotated` restarts the members already on the first one again,
//!   onto the newest; a change back to the recorded password restarts them
//!   back, and once every member runs it, `default` takes it alone.
//! - Auth turned off, then on again before the roll finished: the members
//!   running with the password had been given `nopass` live; they get the
//!   password back at once ([`default_fixes`], which checks every member's
//!   `default` against the spec each reconcile), the others at their
//!   restart.
//! - A deleted `<cluster>-auth-applied` is rebuilt from the Secret and the
//!   rotation number the StatefulSets carry (nothing restarts); a deleted
//!   `<cluster>-auth` is made again from the record (the operator's act step).
//!
//! Turning auth on or off ([`Switch`]) is the same kind of roll. Which
//! members still run the other way is read off their pods (the password in
//! their environment), not stored. The operator logs in as its own user;
//! the probes (and the operator, on a member without its user) log in as
//! `default` with three-argument AUTH: a member that takes any password
//! (`nopass`) accepts that as well as one that requires it. Replicas log in
//! as the replication user, whose password auth on or off does not change.
//! - On: the members restart onto the password one at a time (a member of
//!   an older release, still `primaryuser default`, first gets the password
//!   as `primaryauth`). Clients without the password are refused by each
//!   member once it restarted: that is what turning auth on means.
//! - Off: every member first takes any password (`ACL SETUSER default on
//!   nopass`); then the members restart
//!   without one. Once none runs with the password, the record says so
//!   (an empty password) and the event `AuthDisabled` is sent. Clients that
//!   send the password as `default` (three-argument AUTH) keep working
//!   throughout; a client sending the two-argument `AUTH <password>` is
//!   refused by a member without a password (Valkey's rule).

use crate::pods::{PodFacts, needs_restart};
use crate::view::KubeView;
use api::ValidatedCluster;
use api::constants::member_name;
use k8s_openapi::api::core::v1::Secret;
use resources::Desired;
use resources::secret::{
    APPLIED_GENERATION_KEY, APPLIED_HIGHEST_KEY, APPLIED_KEY, APPLIED_TARGET_GENERATION_KEY,
    APPLIED_TARGET_KEY,
};
use std::collections::BTreeMap;
use valkey::acl::{AclEntry, DEFAULT_USER};
use valkey::model::{MemberRef, MemberState, ObservedCluster};

/// Where a rotation stands.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Rotation {
    /// The password the members may still have instead of the Secret's
    /// (`None`: no rotation under way).
    pub previous: Option<String>,
    /// The number of the rotation the members should run with (goes into
    /// their restart hash).
    pub number: u64,
    /// Auth is being turned on or off.
    pub switch: Option<Switch>,
    /// `<cluster>-auth-applied` is gone while members run: which password
    /// they run is read from them ([`rebuilt_record`]) before anything
    /// relies on it.
    pub unrecorded: bool,
    /// The highest rotation number handed out, this one included (what the
    /// record keeps).
    pub highest: u64,
}

/// Auth being turned on or off while members still run the other way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Switch {
    /// Some member still runs without a password.
    On,
    /// Some member still runs with `password` (the one last applied).
    Off { password: String },
}

impl Rotation {
    /// The password to log in to the members with, and the one to try when
    /// that is refused.
    /// `password`: the Secret's.
    pub fn login<'a>(&'a self, password: Option<&'a str>) -> (Option<&'a str>, Option<&'a str>) {
        match &self.switch {
            Some(Switch::Off { password }) => {
                (Some(password.as_str()).filter(|p| !p.is_empty()), None)
            }
            _ => (password, self.previous.as_deref()),
        }
    }
}

/// The switch under way, if any: from whether auth is on, what the record
/// says was applied, and how many member pods run with and without the
/// password.
pub fn switch_of(
    enabled: bool,
    recorded: Option<&str>,
    (with_password, without_password): (usize, usize),
) -> Option<Switch> {
    match (enabled, recorded) {
        (true, _) if without_password > 0 => Some(Switch::On),
        // The record may be gone (then the operator's own login is all it has).
        (false, p) if with_password > 0 && p != Some("") => Some(Switch::Off {
            password: p.unwrap_or_default().to_string(),
        }),
        _ => None,
    }
}

/// Member pods (new copies of moves included) that run with and without the
/// password.
pub fn pods_by_password(view: &KubeView) -> (usize, usize) {
    let with = view
        .members
        .values()
        .chain(view.new_copies.values())
        .filter(|p| PodFacts::of(p).runs_with_password)
        .count();
    (with, view.members.len() + view.new_copies.len() - with)
}

/// What `<cluster>-auth-applied` said when read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recorded {
    /// The record exists (a deleted one is not "auth off").
    pub exists: bool,
    /// The password the members were last given in full (`None`: "" or absent).
    pub password: Option<String>,
    pub number: u64,
    /// A rotation under way: the password it moves to and its number.
    pub target: Option<(String, u64)>,
    /// The highest rotation number handed out (at least `number` and
    /// the target's).
    pub highest: u64,
}

impl Recorded {
    pub fn of(secret: Option<&Secret>) -> Recorded {
        let Some(secret) = secret else {
            return Recorded::default();
        };
        let text = |key| resources::secret::secret_text(secret, key);
        let parsed = |key| text(key).and_then(|g| g.trim().parse::<u64>().ok());
        let number = parsed(APPLIED_GENERATION_KEY).unwrap_or(0);
        let target = text(APPLIED_TARGET_KEY).zip(parsed(APPLIED_TARGET_GENERATION_KEY));
        let highest = parsed(APPLIED_HIGHEST_KEY)
            .unwrap_or(0)
            .max(number)
            .max(target.as_ref().map_or(0, |(_, g)| *g));
        Recorded {
            exists: true,
            password: text(APPLIED_KEY),
            number,
            target,
            highest,
        }
    }
}

/// The record to write, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordWrite {
    pub password: String,
    pub number: u64,
    pub target: Option<(String, u64)>,
    pub highest: u64,
}

/// What a change of auth is worth an event for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Announce {
    AuthEnabled,
    AuthDisabled,
}

/// The decision the operator's act step carries out: the rotation, the record to write
/// and the event to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RotationDecision {
    pub rotation: Rotation,
    pub write: Option<RecordWrite>,
    pub announce: Option<Announce>,
}

/// The rotation numbers the cluster's objects carry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InUse {
    /// What the StatefulSets ask for (the highest, should they differ).
    pub desired: u64,
    /// The highest any StatefulSet or member pod carries.
    pub highest: u64,
}

/// Decides where a rotation or a switch of auth stands from the spec
/// (`enabled`, the Secret's `password`), the record, how many member pods
/// run with and without a password, and the rotation numbers in use (read
/// when the record is gone, so that deleting it restarts nothing and no
/// number is given twice). Pure.
pub fn decide(
    enabled: bool,
    password: Option<&str>,
    recorded: &Recorded,
    pods: (usize, usize),
    in_use: InUse,
) -> RotationDecision {
    let number = if recorded.exists {
        recorded.number
    } else {
        in_use.desired
    };
    // A pod's number says which password it started with: a number is
    // never handed out twice, a reverted rotation's included.
    let highest = recorded.highest.max(in_use.highest).max(number);
    let switch = switch_of(enabled, recorded.password.as_deref(), pods);
    let rotation = |previous: Option<String>, number: u64, switch: Option<Switch>| Rotation {
        previous,
        number,
        switch,
        unrecorded: false,
        highest: highest.max(number),
    };
    let record = |password: &str, target: Option<(String, u64)>| RecordWrite {
        password: password.to_string(),
        number,
        highest: highest.max(target.as_ref().map_or(0, |(_, g)| *g)),
        target,
    };
    // Written when it says something new (no write on a steady cluster).
    let changed = |w: &RecordWrite| {
        !recorded.exists
            || recorded.password.as_deref().unwrap_or_default() != w.password
            || recorded.target != w.target
            || recorded.highest != w.highest
    };
    let keep = |rotation: Rotation| RotationDecision {
        rotation,
        write: None,
        announce: None,
    };
    if !enabled {
        // Off, and no member runs with the password any more: record it.
        if switch.is_none() && recorded.password.is_some() {
            return RotationDecision {
                rotation: rotation(None, number, None),
                write: Some(record("", None)),
                announce: Some(Announce::AuthDisabled),
            };
        }
        return keep(rotation(None, number, switch));
    }
    // The password Secret is missing: keep the members as they are.
    let Some(password) = password else {
        return keep(rotation(None, number, None));
    };
    match recorded.password.as_deref() {
        Some(r) if r == password => {
            // Back to the recorded password (a rotation reverted): the
            // target goes; members restarted onto it restart back, and the
            // extra password is dropped once all have (`default_fixes`).
            let w = record(r, None);
            RotationDecision {
                rotation: rotation(None, number, switch),
                write: changed(&w).then_some(w),
                announce: None,
            }
        }
        Some(r) => {
            let target_number = match &recorded.target {
                Some((t, g)) if t == password => *g,
                _ => highest + 1,
            };
            let w = record(r, Some((password.to_string(), target_number)));
            RotationDecision {
                rotation: rotation(Some(r.to_string()), target_number, switch.clone()),
                write: changed(&w).then_some(w),
                announce: None,
            }
        }
        // A deleted record while members run with a password: which one
        // is read from them (`rebuilt_record`); nothing is written, and
        // nothing relies on it, until then.
        None if !recorded.exists && pods.0 > 0 => RotationDecision {
            rotation: Rotation {
                unrecorded: true,
                ..rotation(None, number, switch)
            },
            write: None,
            announce: None,
        },
        // No record (a new cluster, one from before records) or auth was
        // off: the members get this password from now on.
        None => RotationDecision {
            announce: switch.is_some().then_some(Announce::AuthEnabled),
            rotation: rotation(None, number, switch),
            write: Some(record(password, None)),
        },
    }
}

/// The rotation numbers the StatefulSets and member pods carry.
pub fn in_use(view: &KubeView) -> InUse {
    let number = |annotations: Option<&std::collections::BTreeMap<String, String>>| {
        annotations?
            .get(resources::statefulset::ANNOTATION_AUTH_GENERATION)?
            .parse::<u64>()
            .ok()
    };
    let desired = view
        .statefulsets
        .values()
        .filter_map(|s| number(s.metadata.annotations.as_ref()))
        .max()
        .unwrap_or(0);
    let pods = view
        .members
        .values()
        .chain(view.new_copies.values())
        .filter_map(|p| number(p.metadata.annotations.as_ref()))
        .max()
        .unwrap_or(0);
    InUse {
        desired,
        highest: desired.max(pods),
    }
}

/// The record rebuilt from what the members run: the password other than
/// the Secret's that some member started with (`requirepass`), as the one a
/// rotation moves away from, else the Secret's. `None` until every member
/// answered (a silent one may run another password). Pure.
pub fn rebuilt_record(
    password: &str,
    started_with: &[Option<String>],
    (number, highest): (u64, u64),
) -> Option<RecordWrite> {
    let known: Vec<&str> = started_with
        .iter()
        .map(|p| p.as_deref())
        .collect::<Option<Vec<_>>>()?;
    let other = known
        .iter()
        .find(|p| !p.is_empty() && **p != password)
        .map(|p| p.to_string());
    Some(match other {
        // Members run another password: a rotation from it follows. Its
        // number is a fresh one, since which number each member's pod
        // carries is not known to go with which password.
        Some(other) => RecordWrite {
            password: other,
            number: highest + 1,
            target: None,
            highest: highest + 1,
        },
        None => RecordWrite {
            password: password.to_string(),
            number,
            target: None,
            highest,
        },
    })
}

/// What `default` must become on one member so that what it takes is what
/// the spec says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DefaultFix {
    /// `ACL SETUSER default on #<hash>...`: adds these passwords (SHA-256
    /// hex), keeps those it has, and ends `nopass` (Valkey clears the flag
    /// when a password is added).
    Add(Vec<String>),
    /// `ACL SETUSER default on resetpass #<hash>`: this password only.
    Only(String),
}

/// The spec's auth as every member's `default` should take it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefaultWant {
    /// SHA-256 hex of the Secret's password.
    pub password: String,
    /// SHA-256 hex of the password a rotation moves away from.
    pub previous: Option<String>,
    /// No rotation or switch under way, every member runs the environment
    /// its StatefulSet asks for and answered: `password` alone may remain.
    pub settled: bool,
}

/// What the spec's auth asks of every `default`, or `None` when nothing
/// does: auth off (every member takes any password, [`switch_commands`]),
/// or the password unknown (its Secret missing).
pub fn default_want(
    rotation: &Rotation,
    password: Option<&str>,
    rolled: bool,
    everyone_reachable: bool,
) -> Option<DefaultWant> {
    if matches!(rotation.switch, Some(Switch::Off { .. })) {
        return None;
    }
    Some(DefaultWant {
        password: password_hash(password?),
        previous: rotation.previous.as_deref().map(password_hash),
        settled: rotation.previous.is_none()
            && rotation.switch.is_none()
            && !rotation.unrecorded
            && rolled
            && everyone_reachable,
    })
}

/// What one member's `default` needs (see [`DefaultWant`]), from its
/// `ACL LIST` entry and whether its pod runs with the password. A member
/// that still runs without one (auth being turned on, its restart to come)
/// keeps taking any password until it restarts: its probes send none. Every
/// other member is closed at once: a `nopass` left from auth turned off,
/// then on again before the roll finished, ends now (pure).
pub fn default_fix(
    entry: Option<&valkey::acl::AclEntry>,
    runs_with_password: bool,
    want: &DefaultWant,
) -> Option<DefaultFix> {
    if !runs_with_password {
        return None;
    }
    let wanted = || {
        std::iter::once(want.password.clone())
            .chain(want.previous.clone())
            .collect()
    };
    match entry {
        None => Some(DefaultFix::Add(wanted())),
        Some(e) if !e.enabled || e.nopass || !e.hashes.contains(&want.password) => {
            Some(DefaultFix::Add(wanted()))
        }
        Some(e) if want.settled && e.hashes.len() > 1 => {
            Some(DefaultFix::Only(want.password.clone()))
        }
        _ => None,
    }
}

/// Whether the pod of member `m` (or of its new copy) runs with the password.
pub fn runs_with_password(view: &KubeView, m: &valkey::model::MemberRef) -> bool {
    let pod = match m.member {
        valkey::model::MemberIndex::Member(i) => view.members.get(&(m.shard.0, i)),
        valkey::model::MemberIndex::NewCopyOf(i) => view.new_copies.get(&(m.shard.0, i)),
    };
    pod.is_some_and(|p| PodFacts::of(p).runs_with_password)
}

/// Whether the member logs in to its primary as `default` with the cluster
/// password (`primaryuser default`, as members of releases before the
/// replication user did) rather than as the replication user, as it said
/// this reconcile (`observe::valkey::member_auth`).
pub fn logs_in_as_default(auth: &MemberAuths, m: &valkey::model::MemberRef) -> bool {
    auth.get(m)
        .is_some_and(|a| a.primaryuser == valkey::acl::DEFAULT_USER)
}

/// Whether every member pod runs the restart hash its StatefulSet asks for.
pub fn all_rolled(cluster: &ValidatedCluster, view: &KubeView, desired: &Desired) -> bool {
    view.members.iter().all(|(&(shard, member), pod)| {
        let name = member_name(&cluster.name, shard, member);
        desired
            .statefulsets
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some(name.as_str()))
            .is_none_or(|sts| !needs_restart(&PodFacts::of(pod), sts))
    })
}

/// Whether the old password may go: every member was asked (`everyone_reachable`),
/// runs with the new environment (`rolled`), answered (`connected`) and took the new
/// password (`via_previous`, the members whose `default` does not take it, is 0). Until then every connected member is given both
/// passwords and the new `primaryauth`.
pub fn may_finish(
    everyone_reachable: bool,
    rolled: bool,
    connected: usize,
    via_previous: usize,
) -> bool {
    everyone_reachable && rolled && via_previous == 0 && connected > 0
}

pub use valkey::acl::password_hash;

/// How a member authenticates, as it said this reconcile (CONFIG GET).
#[derive(Clone, Default)]
pub struct MemberAuth {
    pub requirepass: String,
    pub primaryuser: String,
    pub primaryauth: String,
}

impl std::fmt::Debug for MemberAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberAuth")
            .field("primaryuser", &self.primaryuser)
            .finish_non_exhaustive()
    }
}

/// Every connected member's [`MemberAuth`]; a member that did not answer is absent.
pub type MemberAuths = BTreeMap<MemberRef, MemberAuth>;

/// Every connected member's ACL users, as its `ACL LIST` said this reconcile.
pub type Listed = BTreeMap<MemberRef, BTreeMap<String, AclEntry>>;

/// What auth being turned on or off asks of one member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SwitchCommand {
    /// On: a member that logs in to its primary as `default` gets the
    /// password as `primaryauth`.
    PrimaryAuth,
    /// Off: `default` takes any password.
    NoPass,
}

/// What switch `switch` asks of each of `members` (the connected ones).
pub fn switch_commands<'m>(
    members: impl IntoIterator<Item = &'m MemberRef>,
    auth: &MemberAuths,
    switch: &Switch,
) -> Vec<(MemberRef, SwitchCommand)> {
    members
        .into_iter()
        .filter_map(|m| match switch {
            Switch::On => logs_in_as_default(auth, m).then_some((*m, SwitchCommand::PrimaryAuth)),
            Switch::Off { .. } => Some((*m, SwitchCommand::NoPass)),
        })
        .collect()
}

/// What each of `members` (the connected ones) needs of its `default`
/// ([`default_fix`]); a member whose list failed is left for the next reconcile.
pub fn default_fixes<'m>(
    members: impl IntoIterator<Item = &'m MemberRef>,
    view: &KubeView,
    listed: &Listed,
    want: &DefaultWant,
) -> Vec<(MemberRef, DefaultFix)> {
    members
        .into_iter()
        .filter_map(|m| {
            let list = listed.get(m)?;
            let fix = default_fix(list.get(DEFAULT_USER), runs_with_password(view, m), want)?;
            Some((*m, fix))
        })
        .collect()
}

/// A rotation's step this reconcile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RotationStep {
    /// SHA-256 hex of the new password, then of the previous one.
    pub hashes: [String; 2],
    /// The members given both passwords (those running with one; a member
    /// still to restart onto the password keeps taking any: its probes send
    /// none), each with whether it also gets the new password as
    /// `primaryauth` (it logs in to its primary as `default`).
    pub given: BTreeMap<MemberRef, bool>,
    /// Connected members whose `default` does not take the new password yet.
    pub via_previous: usize,
    /// The old password may go once every member took both ([`may_finish`]).
    pub finish: bool,
}

/// The step of a rotation from `previous` to `password`, from what the
/// connected `members` said (their ACL lists and logins), whether every
/// member answered, and whether every member runs the environment its
/// StatefulSet asks for (`rolled`).
pub fn rotation_step<'m>(
    members: impl IntoIterator<Item = &'m MemberRef>,
    (observed, view): (&ObservedCluster, &KubeView),
    (listed, auth, rolled): (&Listed, &MemberAuths, bool),
    (password, previous): (&str, &str),
) -> RotationStep {
    let hashes = [password_hash(password), password_hash(previous)];
    let members: Vec<&MemberRef> = members.into_iter().collect();
    // Asked of `default` itself (its ACL LIST this reconcile): the operator
    // logs in as its own user, so which password let it in says nothing. A
    // member whose list failed counts as not taking it yet.
    let via_previous = members
        .iter()
        .filter(|m| {
            !listed
                .get(**m)
                .and_then(|l| l.get(DEFAULT_USER))
                .is_some_and(|d| d.enabled && (d.nopass || d.hashes.contains(&hashes[0])))
        })
        .count();
    let everyone_reachable = observed
        .members
        .iter()
        .all(|m| matches!(m.state, MemberState::Reachable(_)));
    let finish = may_finish(everyone_reachable, rolled, members.len(), via_previous);
    let given = members
        .iter()
        .filter(|m| runs_with_password(view, m))
        .map(|m| (**m, logs_in_as_default(auth, m)))
        .collect();
    RotationStep {
        hashes,
        given,
        via_previous,
        finish,
    }
}

/// Where the password of a missing operator-made `<cluster>-auth` comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PasswordSource {
    /// A new cluster (or auth turned on): a new random password.
    Generate,
    /// Deleted while the members run a password: the one they were last
    /// given (`<cluster>-auth-applied`), never a silent new one.
    Recorded(String),
    /// Deleted, and the password the members run is recorded nowhere: the
    /// cluster waits with this message rather than locking clients out.
    Lost(String),
}

/// Decides [`PasswordSource`] from the record and whether any member pod
/// runs with a password (pure).
pub fn password_source(
    (secret_name, secret_key): (&str, &str),
    recorded: &Recorded,
    pods_with_password: usize,
) -> PasswordSource {
    match &recorded.password {
        Some(p) => PasswordSource::Recorded(p.clone()),
        None if !recorded.exists && pods_with_password > 0 => PasswordSource::Lost(format!(
            "Secret {secret_name} was deleted while the members run with its password, and no record of \
             that password is left: create Secret {secret_name} (key {secret_key}) with the \
             password the members run; nothing is restarted meanwhile"
        )),
        None => PasswordSource::Generate,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deleted_password_secret_comes_back_with_the_password_the_members_run() {
        let recorded = Recorded {
            exists: true,
            password: Some("pw".into()),
            ..Recorded::default()
        };
        assert_eq!(
            password_source(("c-auth", "password"), &recorded, 3),
            PasswordSource::Recorded("pw".into())
        );
        // Both deleted, members running with a password: waits, says why.
        match password_source(("c-auth", "password"), &Recorded::default(), 3) {
            PasswordSource::Lost(msg) => {
                assert!(
                    msg.contains("c-auth") && msg.contains("key password"),
                    "{msg}"
                )
            }
            other => panic!("{other:?}"),
        }
        // A new cluster, or auth turned on: a new password.
        assert_eq!(
            password_source(("c-auth", "password"), &Recorded::default(), 0),
            PasswordSource::Generate
        );
        let off = Recorded {
            exists: true,
            ..Recorded::default()
        };
        assert_eq!(
            password_source(("c-auth", "password"), &off, 2),
            PasswordSource::Generate
        );
    }

    #[test]
    fn a_switch_lasts_while_a_member_pod_runs_the_other_way() {
        // On: a member still runs without the password.
        assert_eq!(switch_of(true, None, (2, 1)), Some(Switch::On));
        assert_eq!(switch_of(true, Some(""), (0, 4)), Some(Switch::On));
        assert_eq!(switch_of(true, Some("pw"), (4, 0)), None);
        // A new cluster: no pods yet.
        assert_eq!(switch_of(true, None, (0, 0)), None);
        // Off: a member still runs with the recorded password.
        assert_eq!(
            switch_of(false, Some("pw"), (1, 3)),
            Some(Switch::Off {
                password: "pw".into()
            })
        );
        // Off and done, or never on.
        assert_eq!(switch_of(false, Some("pw"), (0, 4)), None);
        assert_eq!(switch_of(false, Some(""), (0, 4)), None);
        assert_eq!(switch_of(false, None, (0, 4)), None);
    }

    #[test]
    fn while_auth_goes_off_the_operator_logs_in_with_the_old_password() {
        let off = Rotation {
            previous: None,
            number: 0,
            switch: Some(Switch::Off {
                password: "old".into(),
            }),
            unrecorded: false,
            highest: 0,
        };
        assert_eq!(off.login(None), (Some("old"), None));
        let rotating = Rotation {
            previous: Some("old".into()),
            number: 1,
            switch: None,
            unrecorded: false,
            highest: 0,
        };
        assert_eq!(rotating.login(Some("new")), (Some("new"), Some("old")));
    }

    fn recorded(password: &str, number: u64, target: Option<(&str, u64)>) -> Recorded {
        Recorded {
            exists: true,
            password: (!password.is_empty()).then(|| password.to_string()),
            number,
            highest: number.max(target.map_or(0, |(_, g)| g)),
            target: target.map(|(p, g)| (p.to_string(), g)),
        }
    }

    fn at(number: u64) -> InUse {
        InUse {
            desired: number,
            highest: number,
        }
    }

    #[test]
    fn each_new_password_gets_a_rotation_number_of_its_own() {
        // A -> B: number 4, B recorded as the target.
        let d = decide(true, Some("B"), &recorded("A", 3, None), (3, 0), at(3));
        assert_eq!(d.rotation.previous.as_deref(), Some("A"));
        assert_eq!(d.rotation.number, 4);
        assert_eq!(
            d.write.as_ref().and_then(|w| w.target.clone()),
            Some(("B".into(), 4))
        );
        // The next reconcile: nothing to write, the same number.
        let d = decide(
            true,
            Some("B"),
            &recorded("A", 3, Some(("B", 4))),
            (3, 0),
            at(4),
        );
        assert_eq!((d.rotation.number, d.write), (4, None));
        // B -> C before B finished: a number past B's, so members already
        // restarted onto B restart again onto C.
        let d = decide(
            true,
            Some("C"),
            &recorded("A", 3, Some(("B", 4))),
            (3, 0),
            at(4),
        );
        assert_eq!(d.rotation.number, 5);
        assert_eq!(d.rotation.previous.as_deref(), Some("A"));
        // Back to A: no rotation, the recorded number (members on B restart
        // back), the target cleared.
        let d = decide(
            true,
            Some("A"),
            &recorded("A", 3, Some(("B", 4))),
            (3, 0),
            at(4),
        );
        assert_eq!((d.rotation.previous, d.rotation.number), (None, 3));
        assert_eq!(d.write.map(|w| w.target), Some(None));
    }

    #[test]
    fn a_deleted_record_is_rebuilt_from_the_members_without_restarting_anyone() {
        // The StatefulSets say their pods run rotation 7; the members are
        // asked which password they run before anything is written.
        let d = decide(true, Some("pw"), &Recorded::default(), (3, 0), at(7));
        assert_eq!(d.rotation.number, 7);
        assert_eq!(d.rotation.previous, None);
        assert!(d.rotation.unrecorded);
        assert_eq!((d.write, d.announce), (None, None));
        // All run the Secret's: recorded as it is, nothing restarts.
        let same = [Some("pw".to_string()), Some("pw".to_string())];
        assert_eq!(
            rebuilt_record("pw", &same, (7, 7)),
            Some(RecordWrite {
                password: "pw".into(),
                number: 7,
                target: None,
                highest: 7,
            })
        );
        // One started with another: that one is recorded, so the next
        // reconcile rotates from it (the members restart onto the Secret's).
        let mixed = [Some("pw".to_string()), Some("old".to_string())];
        assert_eq!(
            rebuilt_record("pw", &mixed, (7, 7)).map(|w| w.password),
            Some("old".into())
        );
        // A member that did not answer: not yet.
        assert_eq!(
            rebuilt_record("pw", &[Some("pw".into()), None], (7, 7)),
            None
        );
        // A new cluster (no pods): recorded at once.
        let d = decide(true, Some("pw"), &Recorded::default(), (0, 0), at(0));
        assert!(!d.rotation.unrecorded);
        assert_eq!(d.write.map(|w| w.password), Some("pw".into()));
    }

    #[test]
    fn auth_off_then_on_again_is_a_switch_on_with_the_recorded_password() {
        // Off: two of three pods still run with the password.
        let d = decide(false, None, &recorded("pw", 2, None), (2, 1), at(2));
        assert_eq!(
            d.rotation.switch,
            Some(Switch::Off {
                password: "pw".into()
            })
        );
        assert_eq!(d.write, None);
        // On again before the roll finished: a switch on, no rotation.
        let d = decide(true, Some("pw"), &recorded("pw", 2, None), (2, 1), at(2));
        assert_eq!(d.rotation.switch, Some(Switch::On));
        assert_eq!(d.rotation.previous, None);
        // Off completed: recorded as "".
        let d = decide(false, None, &recorded("pw", 2, None), (0, 3), at(2));
        assert_eq!(d.write.map(|w| w.password), Some(String::new()));
        assert_eq!(d.announce, Some(Announce::AuthDisabled));
    }

    fn entry(nopass: bool, hashes: &[&str]) -> valkey::acl::AclEntry {
        valkey::acl::AclEntry {
            enabled: true,
            nopass,
            hashes: hashes.iter().map(|h| h.to_string()).collect(),
            rest: String::new(),
        }
    }

    fn want(previous: Option<&str>, settled: bool) -> DefaultWant {
        DefaultWant {
            password: "P".into(),
            previous: previous.map(str::to_string),
            settled,
        }
    }

    #[test]
    fn a_member_left_open_by_auth_off_is_closed_when_auth_is_on_again() {
        // Runs with the password, but `default` takes any: closed at once.
        assert_eq!(
            default_fix(Some(&entry(true, &[])), true, &want(None, false)),
            Some(DefaultFix::Add(vec!["P".into()]))
        );
        // Still runs without one (its restart onto the password is to
        // come): its probes send none, so it stays open until then.
        assert_eq!(
            default_fix(Some(&entry(true, &[])), false, &want(None, false)),
            None
        );
        // A disabled default or none at all gets the password too.
        let mut off = entry(false, &["P"]);
        off.enabled = false;
        assert_eq!(
            default_fix(Some(&off), true, &want(Some("Q"), false)),
            Some(DefaultFix::Add(vec!["P".into(), "Q".into()]))
        );
        assert_eq!(
            default_fix(None, true, &want(None, false)),
            Some(DefaultFix::Add(vec!["P".into()]))
        );
    }

    #[test]
    fn a_reverted_rotation_drops_the_other_password_once_settled() {
        // Both valid while members still roll back.
        assert_eq!(
            default_fix(Some(&entry(false, &["P", "B"])), true, &want(None, false)),
            None
        );
        // Settled: the Secret's password alone.
        assert_eq!(
            default_fix(Some(&entry(false, &["P", "B"])), true, &want(None, true)),
            Some(DefaultFix::Only("P".into()))
        );
        // Nothing to do when it takes exactly the password.
        assert_eq!(
            default_fix(Some(&entry(false, &["P"])), true, &want(None, true)),
            None
        );
    }

    #[test]
    fn nothing_is_asked_of_default_while_auth_goes_off_or_without_a_password() {
        let off = Rotation {
            previous: None,
            number: 0,
            switch: Some(Switch::Off {
                password: "old".into(),
            }),
            unrecorded: false,
            highest: 0,
        };
        assert_eq!(default_want(&off, Some("pw"), true, true), None);
        assert_eq!(default_want(&Rotation::default(), None, true, true), None);
        let settled = default_want(&Rotation::default(), Some("pw"), true, true).unwrap();
        assert!(settled.settled);
        assert_eq!(settled.password, password_hash("pw"));
        let rotating = Rotation {
            previous: Some("old".into()),
            number: 1,
            switch: None,
            unrecorded: false,
            highest: 0,
        };
        let w = default_want(&rotating, Some("pw"), true, true).unwrap();
        assert!(!w.settled);
        assert_eq!(w.previous, Some(password_hash("old")));
    }

    #[test]
    fn the_old_password_goes_only_once_every_member_takes_the_new_one() {
        // One member has only the old one: not yet.
        assert!(!may_finish(true, true, 2, 1));
        // Everyone takes the new one: finish.
        assert!(may_finish(true, true, 2, 0));
        // A member nobody could reach may have only the old one: wait.
        assert!(!may_finish(false, true, 1, 0));
        // A member not restarted yet still uses the old one: wait.
        assert!(!may_finish(true, false, 2, 0));
        // Nobody answered: nothing is known.
        assert!(!may_finish(true, true, 0, 0));
    }
}

/// The decisions above as one state machine, property-tested against
/// random sequences of spec changes, deletions of the record and of the
/// password Secret, member restarts and reconciles: a model of the members
/// (the password in their environment, what their `default` takes) driven
/// by the same pure functions the reconcile calls.
#[cfg(test)]
mod model {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;
    use valkey::acl::AclEntry;

    #[derive(Debug, Clone)]
    struct Member {
        /// The password in its environment (`None`: started without one).
        env: Option<String>,
        /// The rotation number its pod was made with.
        number: u64,
        default: AclEntry,
    }

    impl Member {
        fn started(env: Option<String>, number: u64) -> Member {
            let default = AclEntry {
                enabled: true,
                nopass: env.is_none(),
                hashes: env.iter().map(|p| password_hash(p)).collect(),
                rest: String::new(),
            };
            Member {
                env,
                number,
                default,
            }
        }

        /// Its probes get in: `default` takes the password they send.
        fn probe_ok(&self) -> bool {
            let d = &self.default;
            d.enabled
                && (d.nopass
                    || self
                        .env
                        .as_ref()
                        .is_some_and(|p| d.hashes.contains(&password_hash(p))))
        }
    }

    #[derive(Debug, Clone)]
    struct World {
        enabled: bool,
        /// The Secret's password (`None`: deleted, not made again yet).
        secret: Option<String>,
        record: Option<Recorded>,
        statefulsets_number: u64,
        /// What the StatefulSets ask for: the number and whether with a password.
        desired: (u64, bool),
        members: Vec<Member>,
        next_password: u32,
    }

    #[derive(Debug, Clone)]
    enum Step {
        NewPassword,
        /// Back to the password `n` changes ago.
        OldPassword(usize),
        ToggleAuth,
        DeleteRecord,
        DeleteSecret,
        Restart(usize),
        Reconcile,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            2 => Just(Step::NewPassword),
            1 => (1usize..4).prop_map(Step::OldPassword),
            2 => Just(Step::ToggleAuth),
            1 => Just(Step::DeleteRecord),
            1 => Just(Step::DeleteSecret),
            4 => (0usize..4).prop_map(Step::Restart),
            6 => Just(Step::Reconcile),
        ]
    }

    impl World {
        fn new(members: usize) -> World {
            let mut w = World {
                enabled: true,
                secret: Some("p0".into()),
                record: None,
                statefulsets_number: 0,
                desired: (0, true),
                members: Vec::new(),
                next_password: 1,
            };
            w.reconcile();
            w.members = (0..members)
                .map(|_| Member::started(Some("p0".into()), 0))
                .collect();
            w.reconcile();
            w
        }

        fn pods(&self) -> (usize, usize) {
            let with = self.members.iter().filter(|m| m.env.is_some()).count();
            (with, self.members.len() - with)
        }

        fn needs_restart(&self, m: &Member) -> bool {
            let expected = if self.enabled {
                self.secret.clone()
            } else {
                None
            };
            // The restart hash, and the password it started with
            // (`password_stale`) when the Secret is known.
            m.number != self.desired.0
                || m.env.is_some() != self.desired.1
                || (expected.is_some() || !self.enabled) && m.env != expected
        }

        /// One reconcile, as `reconcile::run` orders the steps.
        #[expect(
            clippy::too_many_lines,
            reason = "written before the lint was on; split it when it next changes"
        )]
        fn reconcile(&mut self) {
            // ensure_password: a deleted Secret is made again.
            if self.enabled && self.secret.is_none() {
                let recorded = self.record.clone().unwrap_or_default();
                match password_source(("c-auth", "password"), &recorded, self.pods().0) {
                    PasswordSource::Recorded(p) => self.secret = Some(p),
                    PasswordSource::Generate => {
                        self.secret = Some(format!("p{}", self.next_password));
                        self.next_password += 1;
                    }
                    // Waits for the user: the model's user puts the
                    // password back (the only one that is safe).
                    PasswordSource::Lost(_) => return,
                }
            }
            let password = if self.enabled {
                self.secret.clone()
            } else {
                None
            };
            let d = decide(
                self.enabled,
                password.as_deref(),
                &self.record.clone().unwrap_or_default(),
                self.pods(),
                InUse {
                    desired: self.statefulsets_number,
                    highest: self
                        .members
                        .iter()
                        .map(|m| m.number)
                        .max()
                        .unwrap_or(0)
                        .max(self.statefulsets_number),
                },
            );
            if let Some(w) = &d.write {
                self.record = Some(Recorded {
                    exists: true,
                    password: (!w.password.is_empty()).then(|| w.password.clone()),
                    number: w.number,
                    target: w.target.clone(),
                    highest: w.highest,
                });
            }
            let rotation = d.rotation;
            if rotation.unrecorded
                && let Some(p) = &password
            {
                let started: Vec<Option<String>> = self
                    .members
                    .iter()
                    .map(|m| Some(m.env.clone().unwrap_or_default()))
                    .collect();
                if let Some(w) = rebuilt_record(p, &started, (rotation.number, rotation.highest)) {
                    self.record = Some(Recorded {
                        exists: true,
                        password: Some(w.password),
                        number: w.number,
                        target: None,
                        highest: w.highest,
                    });
                }
            }
            // The StatefulSets are applied.
            self.desired = (rotation.number, self.enabled);
            self.statefulsets_number = rotation.number;
            let rolled = self.members.iter().all(|m| !self.needs_restart(m));
            // advance_switch
            if let Some(Switch::Off { .. }) = &rotation.switch {
                for m in &mut self.members {
                    m.default.nopass = true;
                    m.default.enabled = true;
                }
            }
            // advance
            if let (Some(previous), Some(password)) = (&rotation.previous, &password) {
                let hashes = [password_hash(password), password_hash(previous)];
                let via_previous = self
                    .members
                    .iter()
                    .filter(|m| !(m.default.nopass || m.default.hashes.contains(&hashes[0])))
                    .count();
                for m in self.members.iter_mut().filter(|m| m.env.is_some()) {
                    for h in &hashes {
                        m.default.hashes.insert(h.clone());
                        m.default.nopass = false;
                        m.default.enabled = true;
                    }
                }
                if may_finish(true, rolled, self.members.len(), via_previous) {
                    for m in &mut self.members {
                        m.default.hashes = BTreeSet::from([hashes[0].clone()]);
                    }
                    self.record = Some(Recorded {
                        exists: true,
                        password: Some(password.clone()),
                        number: rotation.number,
                        target: None,
                        highest: rotation.highest,
                    });
                }
            }
            // close_default (while a rotation runs, advance gives both)
            if let Some(want) = default_want(&rotation, password.as_deref(), rolled, true)
                && rotation.previous.is_none()
            {
                for m in &mut self.members {
                    match default_fix(Some(&m.default), m.env.is_some(), &want) {
                        Some(DefaultFix::Add(hashes)) => {
                            m.default.hashes.extend(hashes);
                            m.default.nopass = false;
                            m.default.enabled = true;
                        }
                        Some(DefaultFix::Only(hash)) => {
                            m.default.hashes = BTreeSet::from([hash]);
                            m.default.nopass = false;
                        }
                        None => {}
                    }
                }
            }
        }

        /// The rolling update restarts member `i` if its pod is outdated.
        fn restart(&mut self, i: usize) {
            let i = i % self.members.len();
            if !self.needs_restart(&self.members[i]) {
                return;
            }
            let env = if self.desired.1 {
                match &self.secret {
                    Some(p) => Some(p.clone()),
                    // A pod cannot start without its Secret.
                    None => return,
                }
            } else {
                None
            };
            self.members[i] = Member::started(env, self.desired.0);
        }

        fn apply(&mut self, step: &Step, history: &mut Vec<String>) {
            match step {
                Step::NewPassword => {
                    let p = format!("p{}", self.next_password);
                    self.next_password += 1;
                    if let Some(old) = self.secret.replace(p) {
                        history.push(old);
                    }
                }
                Step::OldPassword(back) => {
                    if let Some(old) = history.iter().rev().nth(back - 1).cloned()
                        && let Some(now) = self.secret.replace(old)
                    {
                        history.push(now);
                    }
                }
                Step::ToggleAuth => self.enabled = !self.enabled,
                // Deleting both the record and the Secret before the
                // operator made one again leaves the cluster waiting for
                // the user (`Lost`, unit-tested in act::kube): not modelled.
                Step::DeleteRecord => {
                    if self.secret.is_some() {
                        self.record = None
                    }
                }
                // Only while the record can bring it back: deleting both
                // leaves the cluster waiting for the user (`Lost`).
                Step::DeleteSecret => {
                    if self.record.as_ref().is_some_and(|r| r.password.is_some()) {
                        self.secret = None
                    }
                }
                Step::Restart(i) => self.restart(*i),
                Step::Reconcile => self.reconcile(),
            }
        }

        /// Reconciles and restarts until nothing changes (bounded).
        fn settle(&mut self) {
            for _ in 0..40 {
                self.reconcile();
                for i in 0..self.members.len() {
                    self.restart(i);
                    self.reconcile();
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        #[test]
        fn members_end_as_the_spec_says_and_their_probes_always_get_in(
            steps in proptest::collection::vec(step(), 1..40),
            members in 1usize..5,
        ) {
            let mut w = World::new(members);
            let mut history = Vec::new();
            for s in &steps {
                w.apply(s, &mut history);
                // After every reconcile, no member's own probes are locked
                // out (a member NotReady for good).
                if matches!(s, Step::Reconcile) {
                    for (i, m) in w.members.iter().enumerate() {
                        prop_assert!(m.probe_ok(), "member {i} locks its probes out after {s:?}: {m:?}\n{w:?}");
                    }
                }
            }
            w.settle();
            for (i, m) in w.members.iter().enumerate() {
                prop_assert!(m.probe_ok(), "member {i}: {m:?}");
                if w.enabled {
                    let p = w.secret.clone().unwrap_or_default();
                    prop_assert_eq!(m.env.as_deref(), Some(p.as_str()), "member {} env", i);
                    prop_assert!(!m.default.nopass, "member {i} left open: {m:?}\n{w:?}");
                    prop_assert_eq!(
                        &m.default.hashes,
                        &BTreeSet::from([password_hash(&p)]),
                        "member {} takes other passwords: {:?}", i, w
                    );
                } else {
                    prop_assert_eq!(m.env.as_deref(), None);
                    prop_assert!(m.default.nopass, "member {i}: auth off but {m:?}");
                }
            }
        }
    }
}
