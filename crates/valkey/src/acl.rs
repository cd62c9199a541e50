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

/// First line of the users file.
pub const USERS_FILE_HEADER: &str =
    "# The users of spec.users the members took, written by valkey-operator: do not edit.";

/// The users file every member loads at start (`--include`): one
/// `user <name> reset on|off #<hash>... <rules>` line per user of the spec,
/// sorted by name, and no `default` (its password is `requirepass`'s).
///
/// A line is written only once a member took that user with those rules
/// (`learned`): Valkey refuses to start on a line it cannot parse, so a rule
/// no member accepted never reaches the file. Until then, and for users
/// `left_alone` (their Secret is missing), the line of `previous` stays.
/// A user whose rules hold quotes, backslashes or whitespace outside a
/// selector is never written (a config line splits and unquotes where
/// `ACL SETUSER` arguments do not): it is set on the members only.
pub fn users_file(
    previous: &str,
    desired: &[DesiredUser],
    left_alone: &BTreeSet<String>,
    learned: &Learned,
) -> String {
    let previous_lines: BTreeMap<&str, &str> = previous
        .lines()
        .filter_map(|l| {
            let mut words = l.split(' ');
            (words.next() == Some("user")).then_some(())?;
            Some((words.next()?, l))
        })
        .collect();
    let mut lines: BTreeMap<String, String> = BTreeMap::new();
    for name in left_alone {
        if let Some(line) = previous_lines.get(name.as_str()) {
            lines.insert(name.clone(), (*line).to_string());
        }
    }
    for user in desired {
        if user.name == DEFAULT_USER || !fits_a_config_line(user) {
            continue;
        }
        let taken = learned
            .iter()
            .any(|((_, name), applied)| name == &user.name && applied.rules == user.rules);
        if taken {
            lines.insert(
                user.name.clone(),
                format!("user {} {}", user.name, user.setuser_args().join(" ")),
            );
        } else if let Some(line) = previous_lines.get(user.name.as_str()) {
            lines.insert(user.name.clone(), (*line).to_string());
        }
    }
    let mut out = String::from(USERS_FILE_HEADER);
    out.push('\n');
    for line in lines.into_values() {
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// Whether a config line splits `user`'s arguments as `ACL SETUSER` got them.
fn fits_a_config_line(user: &DesiredUser) -> bool {
    let plain = |w: &str| !w.is_empty() && !w.contains(['"', '\'', '\\']);
    plain(&user.name)
        && !user.name.contains(char::is_whitespace)
        && user.rules.iter().all(|r| {
            plain(r)
                && (!r.contains(char::is_whitespace) || (r.starts_with('(') && r.ends_with(')')))
                && !r.contains(['\n', '\r'])
        })
}

/// SHA-256 hex of `password`: how ACL rules name a password (`#<hash>`).
pub fn password_hash(password: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(password.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
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

    #[test]
    fn the_users_file_holds_what_a_member_took_and_keeps_what_it_cannot_set_yet() {
        let m0 = MemberRef::new(0, 0);
        let mut learned = Learned::new();
        let mut new_app = app(&["bb"]);
        new_app.rules.push("+get".into());
        record(
            &mut learned,
            &AclAction::SetUser {
                on: m0,
                user: app(&["aa"]),
            },
        );
        let previous = format!(
            "{USERS_FILE_HEADER}\nuser app reset on #old ~app:*\nuser gone reset on #g\nuser ops reset on #o +info\n"
        );
        let left_alone = BTreeSet::from(["ops".to_string()]);
        // app taken with its rules: its line is the current one; ops keeps
        // its line (Secret missing); gone is no longer in the spec.
        let file = users_file(&previous, &[app(&["aa"])], &left_alone, &learned);
        let lines: Vec<&str> = file.lines().collect();
        assert_eq!(lines[0], USERS_FILE_HEADER);
        assert_eq!(lines.len(), 3, "{file}");
        assert!(lines[1].starts_with("user app reset on #aa "), "{file}");
        assert_eq!(lines[2], "user ops reset on #o +info");
        // New rules no member took yet: the previous line stays.
        let file = users_file(&previous, &[new_app], &BTreeSet::new(), &learned);
        assert_eq!(file.lines().nth(1), Some("user app reset on #old ~app:*"));
        // Nothing before and nothing taken: the header alone.
        assert_eq!(
            users_file("", &[app(&["aa"])], &BTreeSet::new(), &Learned::new()),
            format!("{USERS_FILE_HEADER}\n")
        );
    }

    #[test]
    fn rules_a_config_line_would_split_otherwise_are_never_written() {
        let mut quoted = app(&["aa"]);
        quoted.rules.push("~\"a b\"".into());
        let mut selector = app(&["aa"]);
        selector.rules.push("(~a* +get)".into());
        assert!(!fits_a_config_line(&quoted));
        assert!(fits_a_config_line(&selector));
        assert!(fits_a_config_line(&app(&["aa"])));
    }
}
