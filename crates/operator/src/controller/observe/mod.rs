//! Observe: what the reconcile reads, as thin I/O. [`kube`] lists the
//! cluster's owned objects and takes Nodes and Pods from the caches;
//! [`valkey`] asks every member what it says (one plain connection each);
//! [`pods`] reads the facts off a member's pod.

pub mod kube;
pub mod valkey;
