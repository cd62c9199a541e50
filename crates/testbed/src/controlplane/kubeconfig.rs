//! The admin kubeconfig, `DIR/kubeconfig`: cluster-admin through the admin
//! client certificate. Certificates are embedded, so the file keeps working when
//! copied elsewhere.

use k8s_openapi::ByteString;

/// The kubeconfig YAML for `server`, trusting `ca_pem`, authenticating with
/// `cert_pem`/`key_pem`.
pub fn render(server: &str, ca_pem: &str, cert_pem: &str, key_pem: &str) -> String {
    let doc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{
            "name": "testbed",
            "cluster": {
                "server": server,
                "certificate-authority-data": base64(ca_pem),
            },
        }],
        "users": [{
            "name": "admin",
            "user": {
                "client-certificate-data": base64(cert_pem),
                "client-key-data": base64(key_pem),
            },
        }],
        "contexts": [{
            "name": "testbed",
            "context": {"cluster": "testbed", "user": "admin"},
        }],
        "current-context": "testbed",
        "preferences": {},
    });
    // A JSON document is valid YAML, and kubectl reads either.
    serde_json::to_string_pretty(&doc).unwrap_or_default()
}

/// Base64 as Kubernetes writes it (k8s-openapi's `ByteString` serialises so).
fn base64(text: &str) -> serde_json::Value {
    serde_json::to_value(ByteString(text.as_bytes().to_vec())).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kubeconfig_names_the_server_and_embeds_the_credentials() {
        let text = render("https://127.0.0.1:6443", "CA", "CERT", "KEY");
        let kc: kube::config::Kubeconfig = serde_saphyr::from_str(&text).unwrap();
        assert_eq!(kc.current_context.as_deref(), Some("testbed"));
        let cluster = kc.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443"));
        assert_eq!(cluster.certificate_authority_data.as_deref(), Some("Q0E="));
        let user = kc.auth_infos[0].auth_info.as_ref().unwrap();
        assert_eq!(user.client_certificate_data.as_deref(), Some("Q0VSVA=="));
    }
}
