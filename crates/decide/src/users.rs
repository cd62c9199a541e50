//! ACL users, the decisions: which users to set or delete on which member,
//! from what each member's `ACL LIST` said (`valkey::acl` plans the
//! commands), and the warning about users whose Secret is missing.

use crate::memory::Memory;
use crate::notes::{Note, reason};
use crate::rotation::Listed;
use std::collections::BTreeMap;
use valkey::acl::{self, AclAction, DesiredUser};
use valkey::model::MemberRef;

/// The users to set, and those to leave alone (Secret missing).
#[derive(Debug, Default, Clone)]
pub struct Users {
    pub desired: Vec<DesiredUser>,
    /// User name -> why it is left alone.
    pub unresolved: BTreeMap<String, String>,
}

/// The ACL commands to send, and the warning to say (once per change).
#[derive(Debug, Default)]
pub struct UsersPlan {
    pub missing: Option<Note>,
    pub actions: Vec<AclAction>,
}

/// Plans the ACL users of the connected `members` from what each listed:
/// `memory` forgets members and users that are gone, learns what the
/// members said, and remembers the warning said. A user whose Secret is
/// missing is never deleted.
pub fn plan<'m>(
    members: impl IntoIterator<Item = &'m MemberRef>,
    listed: &Listed,
    users: &Users,
    memory: &mut Memory,
) -> UsersPlan {
    let missing = (!users.unresolved.is_empty()).then(|| {
        users
            .unresolved
            .iter()
            .map(|(u, why)| format!("user {u}: {why}"))
            .collect::<Vec<_>>()
            .join("; ")
    });
    let mut note = None;
    if missing != memory.announced.users_missing {
        note = missing
            .as_ref()
            .map(|m| Note::warning(reason::USER_SECRET_MISSING, "ApplyUsers", m.clone()));
        memory.announced.users_missing = missing;
    }
    // Forget members and users that are gone.
    let members: Vec<&MemberRef> = members.into_iter().collect();
    memory.acl.retain(|(member, user), _| {
        members.contains(&member) && users.desired.iter().any(|u| &u.name == user)
    });
    acl::learn(&mut memory.acl, listed, &users.desired);
    let actions = acl::plan(listed, &users.desired, &memory.acl)
        .into_iter()
        .filter(|a| match a {
            AclAction::DelUser { name, .. } => !users.unresolved.contains_key(name),
            AclAction::SetUser { .. } => true,
        })
        .collect();
    UsersPlan {
        missing: note,
        actions,
    }
}
