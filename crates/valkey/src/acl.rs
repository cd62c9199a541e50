//! ACL users: what a member's `ACL LIST` says, what the operator wants, and
//! the `ACL SETUSER` / `ACL DELUSER` that close the gap. Pure.
//!
//! Valkey rewrites the rules it is given (`+@read +@write` is listed as
//! `resetchannels -@all +@read +@write`), so the operator cannot tell from a
//! listing alone whether a member holds the rules of the spec. It compares
//! what it can exactly (on/off, the password hashes) and, for the rules,
//! what the member listed right after the operator last set them there
//! ([`Learned`]): a member whose listing still reads the same holds the same
//! rules. A member it has no such memory of (a new pod, an operator restart)
//! is simply set once more; `ACL SETUSER` is idempotent.

use crate::model::MemberRef;
use std::collections::{BTreeMap, BTreeSet};

/// The user Valkey always has; its password is the cluster's (`requirepass`).
pub const DEFAULT_USER: &str = "default";

/// One user of a member's `ACL LIST`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclEntry {
    pub enabled: bool,
    pub nopass: bool,
    /// SHA-256 of each password, lower-case hex.
    pub hashes: BTreeSet<String>,
    /// Every other rule, as listed.
    pub rest: String,
}

/// Parses `ACL LIST` (one `user <name> <rules...>` per line) into users by name.
pub fn parse_acl_list(lines: &[String]) -> Result<BTreeMap<String, AclEntry>, String> {
    let mut users = BTreeMap::new();
    for line in lines {
        let mut words = line.split(' ');
        if words.next() != Some("user") {
            return Err(format!("ACL LIST line not starting with 'user': {line:?}"));
        }
        let name = words
            .next()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| format!("ACL LIST line without a user name: {line:?}"))?;
        let mut entry = AclEntry {
            enabled: false,
            nopass: false,
            hashes: BTreeSet::new(),
            rest: String::new(),
        };
        let mut rest = Vec::new();
        for word in words {
            match word {
                "on" => entry.enabled = true,
                "off" => entry.enabled = false,
                "nopass" => entry.nopass = true,
                w if w.starts_with('#') => {
                    entry.hashes.insert(w[1..].to_ascii_lowercase());
                }
                w => rest.push(w),
            }
        }
        entry.rest = rest.join(" ");
        users.insert(name.to_string(), entry);
    }
    Ok(users)
}

/// A user the operator wants on every member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredUser {
    pub name: String,
    pub enabled: bool,
    /// SHA-256 of each password, lower-case hex.
    pub hashes: BTreeSet<String>,
    /// The ACL rules of the spec, one `ACL SETUSER` argument each.
    pub rules: Vec<String>,
}

impl DesiredUser {
    /// The arguments of `ACL SETUSER <name> ...`: from scratch (`reset`),
    /// so rules removed from the spec go away too. Passwords as hashes: the
    /// clear text never travels.
    pub fn setuser_args(&self) -> Vec<String> {
        let mut args = vec![
            "reset".to_string(),
            if self.enabled { "on" } else { "off" }.to_string(),
        ];
        args.extend(self.hashes.iter().map(|h| format!("#{h}")));
        args.extend(self.rules.iter().cloned());
        args
    }
}

/// What the operator set on a member, and how the member listed it after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub rules: Vec<String>,
    /// The member's listing of those rules; `None` until it was read back.
    pub listed: Option<String>,
}

/// What the operator remembers of the users it set, by member and user.
pub type Learned = BTreeMap<(MemberRef, String), Applied>;

/// One ACL command for one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AclAction {
    SetUser { on: MemberRef, user: DesiredUser },
    DelUser { on: MemberRef, name: String },
}

impl std::fmt::Display for AclAction {
    /// For logs and events: no password hashes.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AclAction::SetUser { on, user } => write!(
                f,
                "ACL SETUSER {} ({}, {} password(s), {}) on {on}",
                user.name,
                if user.enabled { "on" } else { "off" },
                user.hashes.len(),
                user.rules.join(" ")
            ),
            AclAction::DelUser { on, name } => write!(f, "ACL DELUSER {name} on {on}"),
        }
    }
}

fn same_login(entry: &AclEntry, user: &DesiredUser) -> bool {
    entry.enabled == user.enabled && !entry.nopass && entry.hashes == user.hashes
}

/// Notes how each member listed the rules the operator set there last
/// (when its on/off and passwords are already the wanted ones).
pub fn learn(
    learned: &mut Learned,
    observed: &BTreeMap<MemberRef, BTreeMap<String, AclEntry>>,
    desired: &[DesiredUser],
) {
    for (member, users) in observed {
        for user in desired {
            let Some(applied) = learned.get_mut(&(*member, user.name.clone())) else {
                continue;
            };
            if applied.listed.is_some() || applied.rules != user.rules {
                continue;
            }
            if let Some(entry) = users.get(&user.name).filter(|e| same_login(e, user)) {
                applied.listed = Some(entry.rest.clone());
            }
        }
    }
}

/// The ACL commands that bring every observed member to `desired`: a user
/// missing or different is set, a user the spec does not list (but
/// `default`) is deleted.
pub fn plan(
    observed: &BTreeMap<MemberRef, BTreeMap<String, AclEntry>>,
    desired: &[DesiredUser],
    learned: &Learned,
) -> Vec<AclAction> {
    let mut actions = Vec::new();
    for (member, users) in observed {
        for user in desired {
            let holds = users.get(&user.name).is_some_and(|entry| {
                same_login(entry, user)
                    && learned.get(&(*member, user.name.clone())).is_some_and(|a| {
                        a.rules == user.rules && a.listed.as_ref() == Some(&entry.rest)
                    })
            });
            if !holds {
                actions.push(AclAction::SetUser {
                    on: *member,
                    user: user.clone(),
                });
            }
        }
        for name in users.keys() {
            if name != DEFAULT_USER && !desired.iter().any(|u| &u.name == name) {
                actions.push(AclAction::DelUser {
                    on: *member,
                    name: name.clone(),
                });
            }
        }
    }
    actions
}

/// Records a successful `ACL SETUSER`; forgets a deleted user.
pub fn record(learned: &mut Learned, action: &AclAction) {
    match action {
        AclAction::SetUser { on, user } => {
            learned.insert(
                (*on, user.name.clone()),
                Applied {
                    rules: user.rules.clone(),
                    listed: None,
                },
            );
        }
        AclAction::DelUser { on, name } => {
            learned.remove(&(*on, name.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(str::to_string).collect()
    }

    fn app(hashes: &[&str]) -> DesiredUser {
        DesiredUser {
            name: "app".into(),
            enabled: true,
            hashes: hashes.iter().map(|h| h.to_string()).collect(),
            rules: vec!["~app:*".into(), "+@read".into(), "+@write".into()],
        }
    }

    #[test]
    fn acl_list_lines_parse_into_login_and_rules() {
        let users = parse_acl_list(&lines(
            "user app on #AA #bb ~app:* resetchannels -@all +@read +@write\n\
             user default on nopass ~* &* +@all",
        ))
        .unwrap();
        let a = &users["app"];
        assert!(a.enabled && !a.nopass);
        assert_eq!(a.hashes, ["aa", "bb"].map(String::from).into());
        assert_eq!(a.rest, "~app:* resetchannels -@all +@read +@write");
        assert!(users["default"].nopass);
        assert!(parse_acl_list(&lines("nonsense")).is_err());
    }

    #[test]
    fn a_user_is_set_once_then_held_until_its_listing_or_passwords_change() {
        let m = MemberRef::new(0, 0);
        let want = vec![app(&["aa"])];
        let mut learned = Learned::new();
        let listed = |text: &str| -> BTreeMap<MemberRef, BTreeMap<String, AclEntry>> {
            [(m, parse_acl_list(&lines(text)).unwrap())].into()
        };
        // Missing: set.
        let before = listed("user default on nopass ~* &* +@all");
        let actions = plan(&before, &want, &learned);
        assert_eq!(actions.len(), 1);
        record(&mut learned, &actions[0]);
        // Listed as Valkey rewrote it: learned, then held.
        let after = listed("user app on #aa ~app:* resetchannels -@all +@read +@write");
        learn(&mut learned, &after, &want);
        assert!(plan(&after, &want, &learned).is_empty());
        // Someone changed the rules by hand: set again.
        let tampered = listed("user app on #aa ~* resetchannels +@all");
        assert_eq!(plan(&tampered, &want, &learned).len(), 1);
        // A second password (rotation): set again.
        assert_eq!(plan(&after, &[app(&["aa", "bb"])], &learned).len(), 1);
        // Without memory (an operator restart): set once more.
        assert_eq!(plan(&after, &want, &Learned::new()).len(), 1);
    }

    #[test]
    fn users_not_in_the_spec_are_deleted_but_default_stays() {
        let m = MemberRef::new(1, 0);
        let observed = [(
            m,
            parse_acl_list(&lines(
                "user default on nopass ~* &* +@all\nuser old on #aa ~* +@all",
            ))
            .unwrap(),
        )]
        .into();
        let actions = plan(&observed, &[], &Learned::new());
        assert_eq!(
            actions,
            [AclAction::DelUser {
                on: m,
                name: "old".into()
            }]
        );
    }

    #[test]
    fn setuser_starts_from_scratch_and_logs_no_hash() {
        let user = app(&["aa"]);
        assert_eq!(
            user.setuser_args(),
            ["reset", "on", "#aa", "~app:*", "+@read", "+@write"]
        );
        let shown = AclAction::SetUser {
            on: MemberRef::new(0, 0),
            user,
        }
        .to_string();
        assert!(!shown.contains("aa "), "{shown}");
    }
}
