//! `testbed`: a real Kubernetes control plane whose simulated nodes run real
//! valkey-server pods.

mod state;

fn main() {
    let _ = state::STATE_FILE;
}
