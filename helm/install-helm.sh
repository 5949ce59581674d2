#!/usr/bin/env bash
# Install the helm binary that the chart tests render with.
#
# Built from source through the Go module proxy (`go install`), because that is
# the only way in from this project's machines: no release tarballs, no
# get-helm script. Pinned so that every machine lints and renders the chart
# with the same helm; bump HELM_VERSION deliberately (it must be a v3 release
# whose go.mod the installed Go can build: v3.22.0 needs go >= 1.26.0).
#
# Usage: helm/install-helm.sh [BIN_DIR]     (default: <repo>/.tools/bin)
# Idempotent: does nothing when BIN_DIR/helm already reports HELM_VERSION.
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.22.0}"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin_dir="${1:-${repo_root}/.tools/bin}"
mkdir -p "${bin_dir}"
bin_dir="$(cd "${bin_dir}" && pwd)"
helm_bin="${bin_dir}/helm"

if [[ -x "${helm_bin}" ]] \
    && [[ "$("${helm_bin}" version --template '{{.Version}}' 2>/dev/null)" == "${HELM_VERSION}" ]]; then
    echo "helm ${HELM_VERSION} already at ${helm_bin}"
    exit 0
fi

go_bin="$(command -v go || true)"
if [[ -z "${go_bin}" && -x /usr/local/go/bin/go ]]; then
    go_bin=/usr/local/go/bin/go
fi
if [[ -z "${go_bin}" ]]; then
    echo "install-helm.sh: no 'go' on PATH or at /usr/local/go/bin/go; helm is built from source" >&2
    exit 1
fi

echo "building helm ${HELM_VERSION} with $("${go_bin}" version) (takes a few minutes cold)..."
start=${SECONDS}
# Run outside the repo so no go.work/go.mod of ours takes part. GOTOOLCHAIN=local:
# fail loudly rather than try to download a newer Go toolchain.
build_dir="$(mktemp -d)"
trap 'rm -rf "${build_dir}"' EXIT
cd "${build_dir}"
export GOTOOLCHAIN=local CGO_ENABLED=0

# The ldflags that helm's own Makefile sets on a release build. Without them a `go install`
# reports version "v3.22" (which the check above reads) and renders charts for Kubernetes
# v1.20, so any chart with a kubeVersion constraint fails `helm template`. The Kubernetes
# version is client-go's v0.MINOR as 1.MINOR, read from the go.mod of the pinned helm.
helm_gomod="$("${go_bin}" mod download -json "helm.sh/helm/v3@${HELM_VERSION}" \
    | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
k8s_minor="$(sed -n 's/^[[:space:]]*k8s\.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "${helm_gomod}")"
if [[ -z "${k8s_minor}" ]]; then
    echo "install-helm.sh: cannot find k8s.io/client-go in ${helm_gomod}" >&2
    exit 1
fi
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ldflags+=" -X ${pkg}.k8sVersionMajor=1 -X ${pkg}.k8sVersionMinor=${k8s_minor}"
done

GOBIN="${bin_dir}" "${go_bin}" install -trimpath -ldflags "${ldflags}" \
    "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"
installed="$("${helm_bin}" version --template '{{.Version}}')"
echo "installed helm ${installed} (renders for Kubernetes v1.${k8s_minor}) at ${helm_bin}" \
    "in $((SECONDS - start))s"
