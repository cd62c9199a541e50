//! ValkeyCluster CRD types.
