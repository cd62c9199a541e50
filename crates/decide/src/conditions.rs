//! Status conditions as decisions: what each condition says, then merged
//! with the ones the object has (a condition whose status did not change
//! keeps its transition time, so an unchanged status is not written).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// A condition before it gets its transition time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cond {
    pub type_: &'static str,
    pub status: bool,
    pub reason: String,
    pub message: String,
}

impl Cond {
    pub fn new(
        type_: &'static str,
        status: bool,
        reason: impl Into<String>,
        message: impl Into<String>,
    ) -> Cond {
        Cond {
            type_,
            status,
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// Turns [`Cond`]s into Kubernetes conditions, keeping the transition time of
/// a condition whose status did not change (so an unchanged status compares
/// equal and is not written).
pub fn merge_conditions(
    old: &[Condition],
    new: &[Cond],
    generation: Option<i64>,
    now: &Time,
) -> Vec<Condition> {
    new.iter()
        .map(|c| {
            let status = if c.status { "True" } else { "False" };
            let previous = old.iter().find(|o| o.type_ == c.type_);
            let last_transition_time = match previous {
                Some(p) if p.status == status => p.last_transition_time.clone(),
                _ => now.clone(),
            };
            Condition {
                type_: c.type_.to_string(),
                status: status.to_string(),
                reason: c.reason.clone(),
                message: truncate(&c.message, 1024),
                last_transition_time,
                observed_generation: generation,
            }
        })
        .collect()
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max.saturating_sub(3);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}
