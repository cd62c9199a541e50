#!/usr/bin/env bash
# One version: the operator crate's (crates/operator/Cargo.toml, inherited from
# the workspace). Everything that names the image must agree with it and with
# the image name `make image` produces (IMAGE_NAME, default valkey-operator):
#   - the Helm chart's appVersion, and the image its Deployment renders
#     (helm template: what the chart really uses, whatever values.yaml says);
#   - deploy/operator/deployment.yaml's image;
#   - the Dockerfile's default VERSION label.
# Exits 1 naming every file that disagrees. Needs helm (make setup builds it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
name=${IMAGE_NAME:-valkey-operator}
cache=${VALKEY_RS_CACHE:-$HOME/.cache/valkey-rs}
helm=${HELM_BIN:-$cache/bin/helm-v4.3.2/helm}

version=$(cargo metadata --no-deps --format-version 1 --offline |
  python3 -c 'import json, sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "operator"))')
want="$name:$version"
bad=0
check() { # what, found, expected
  if [[ $2 != "$3" ]]; then
    echo "version: $1 is '$2', want '$3' (the operator crate is $version)" >&2
    bad=1
  fi
}

chart=deploy/helm/valkey-operator
app=$(sed -n 's/^appVersion:[[:space:]]*"\{0,1\}\([^"]*\)"\{0,1\}[[:space:]]*$/\1/p' "$chart/Chart.yaml")
check "$chart/Chart.yaml appVersion" "$app" "$version"

if [[ ! -x $helm ]]; then
  echo "version: no helm at $helm (make setup builds it, HELM_BIN overrides)" >&2
  exit 1
fi
rendered=$("$helm" template valkey-operator "$chart" --namespace valkey-operator |
  sed -n 's/^[[:space:]]*image:[[:space:]]*"\{0,1\}\([^"]*\)"\{0,1\}[[:space:]]*$/\1/p' | sort -u)
check "the image $chart renders (helm template)" "$rendered" "$want"

manifest=deploy/operator/deployment.yaml
deployed=$(sed -n 's/^[[:space:]]*image:[[:space:]]*"\{0,1\}\([^"]*\)"\{0,1\}[[:space:]]*$/\1/p' "$manifest" | sort -u)
check "$manifest image" "$deployed" "$want"

dockerfile=$(sed -n 's/^ARG VERSION=\(.*\)$/\1/p' Dockerfile)
check "Dockerfile ARG VERSION" "$dockerfile" "$version"

((bad == 0)) || exit 1
echo "version: $version everywhere (chart appVersion and rendered image, $manifest, Dockerfile); image $want"
