//! The identity every operator the suites start runs as: the Helm chart's
//! ServiceAccount, bound by the chart's own RBAC rendered with its default
//! values (`helm template`), so that every request the operator makes goes
//! through the rules users install. A suite that ran the operator with the
//! testbed's admin kubeconfig could not see a verb the chart forgot; under
//! this identity a forbidden request is a 403 in the operator's log, and
//! [`forbidden_lines`] turns it into a failed suite.
//!
//! The objects are the chart's `templates/rbac.yaml` with `nameOverride`
//! [`OPERATOR_SA`] (the cluster-scoped names must not collide with the
//! release that operator_incluster and helm_chart install) in namespace
//! [`OPERATOR_SA_NAMESPACE`]; the leader-election Role is there too, so a
//! suite that elects a leader takes its Lease in that namespace.

use crate::cluster::Env;
use crate::helm::helm;
use anyhow::{Context, Result, ensure};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// The namespace of the suites' operator identity (the chart's release namespace).
pub const OPERATOR_SA_NAMESPACE: &str = "valkey-e2e-operator";
/// The ServiceAccount (the chart rendered with this `nameOverride`).
pub const OPERATOR_SA: &str = "valkey-operator-e2e";

/// One kubeconfig per test process: the RBAC is applied and the token made
/// once, then every operator of the process uses it.
static KUBECONFIG: OnceLock<Mutex<Option<PathBuf>>> = OnceLock::new();

impl Env {
    /// A kubeconfig that authenticates as the chart's ServiceAccount
    /// ([`OPERATOR_SA_NAMESPACE`]/[`OPERATOR_SA`]), after applying the chart's
    /// RBAC. Made once per process (a 12 h token).
    pub fn operator_kubeconfig(&self) -> Result<PathBuf> {
        let cell = KUBECONFIG.get_or_init(|| Mutex::new(None));
        let mut made = cell
            .lock()
            .map_err(|_| anyhow::anyhow!("operator kubeconfig lock poisoned"))?;
        if let Some(path) = made.as_ref() {
            return Ok(path.clone());
        }
        let path = self.make_operator_identity()?;
        *made = Some(path.clone());
        Ok(path)
    }

    fn make_operator_identity(&self) -> Result<PathBuf> {
        let chart = self.root.join("deploy/helm/valkey-operator");
        let chart = chart.to_string_lossy();
        let rendered = helm(
            self,
            &[
                "template",
                "valkey-operator",
                &chart,
                "-n",
                OPERATOR_SA_NAMESPACE,
                "--set",
                &format!("nameOverride={OPERATOR_SA}"),
                "--show-only",
                "templates/rbac.yaml",
            ],
        )
        .context("rendering the chart's RBAC")?;
        let _ = self.kubectl(&["create", "namespace", OPERATOR_SA_NAMESPACE]);
        self.kubectl_stdin(
            &["apply", "--server-side", "--force-conflicts", "-f", "-"],
            &rendered,
        )
        .context("applying the chart's RBAC")?;
        let token = self
            .kubectl(&[
                "create",
                "token",
                OPERATOR_SA,
                "-n",
                OPERATOR_SA_NAMESPACE,
                "--duration=12h",
            ])
            .context("a token for the chart's ServiceAccount")?;
        let path = self
            .testbed_dir
            .join(format!("kubeconfig-operator-sa-{}", std::process::id()));
        token_kubeconfig(self, token.trim(), &path)?;
        Ok(path)
    }
}

/// Writes a kubeconfig at `path` for the testbed's API server (its address
/// and CA from the admin kubeconfig) that authenticates with `token`.
pub fn token_kubeconfig(env: &Env, token: &str, path: &Path) -> Result<()> {
    let text = std::fs::read_to_string(&env.kubeconfig)?;
    let admin: serde_json::Value = serde_saphyr::from_str(&text)?;
    let cluster = admin["clusters"][0]["cluster"].clone();
    ensure!(
        cluster["server"].is_string(),
        "no server in {}",
        env.kubeconfig.display()
    );
    let config = serde_saphyr::to_string(&serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "testbed", "cluster": serde_json::to_value(&cluster)?}],
        "users": [{"name": "operator", "user": {"token": token}}],
        "contexts": [{"name": "operator", "context": {"cluster": "testbed", "user": "operator"}}],
        "current-context": "operator",
    }))?;
    std::fs::write(path, config)?;
    Ok(())
}

/// The lines of an operator log where RBAC refused a request: a denial
/// names the ServiceAccount (`... is forbidden: User
/// "system:serviceaccount:NS:NAME" cannot ...`). Other 403s (a namespace
/// being deleted refuses new objects) are not the rules' and not listed.
pub fn forbidden_lines(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains("system:serviceaccount:") && l.contains(" cannot "))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::forbidden_lines;

    #[test]
    fn an_rbac_denial_is_found_and_a_terminating_namespace_is_not() {
        let log = "\
INFO reconciled\n\
ERROR secrets \"c-tls-ca-key\" is forbidden: User \"system:serviceaccount:valkey-system:valkey-operator\" cannot update resource \"secrets\" in API group \"\" in the namespace \"x\"\n\
WARN configmaps \"c\" is forbidden: unable to create new content in namespace x because it is being terminated\n";
        let found = forbidden_lines(log);
        assert_eq!(found.len(), 1);
        assert!(found[0].contains("cannot update"));
    }
}
