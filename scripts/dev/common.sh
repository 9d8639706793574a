# shellcheck shell=bash
# Shared settings for the aiperf scripts: where caches live and which libtorch the build uses.
# Sourced, never run. Resolves LIBTORCH without installing anything (scripts/dev/setup does that).

AIPERF_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
AIPERF_CACHE="${AIPERF_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/aiperf}"
# tch 0.26.0 checks for exactly this libtorch version.
TORCH_VERSION="2.13.0"
SLIM_LIBTORCH="$AIPERF_CACHE/libtorch-$TORCH_VERSION-cpu"
# The CUDA libtorch: PyPI's torch wheel with its CUDA runtime wheels, installed side by side
# (torch/lib finds nvidia/*/lib through its own rpath), for GPU nodes.
CUDA_TORCH_DIR="$AIPERF_CACHE/torch-$TORCH_VERSION-cuda"
AIPERF_DATA="${AIPERF_DATA:-$AIPERF_ROOT/data}"
export AIPERF_ROOT AIPERF_CACHE TORCH_VERSION SLIM_LIBTORCH CUDA_TORCH_DIR AIPERF_DATA

say() { printf '%s: %s\n' "${0##*/}" "$*" >&2; }
die() { printf '%s: error: %s\n' "${0##*/}" "$*" >&2; exit 1; }

# Whether this node has NVIDIA GPUs, and how that was seen (printed; exit 1: none).
# AIPERF_GPU_NODE=0|1 forces the answer (as it does for aiperf itself).
gpu_node() {
    case "${AIPERF_GPU_NODE:-}" in
        1) echo "forced by AIPERF_GPU_NODE=1"; return 0 ;;
        0) return 1 ;;
    esac
    local n
    if command -v nvidia-smi >/dev/null && n="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" && [ "$n" -gt 0 ]; then
        echo "nvidia-smi lists $n GPU(s)"
    elif [ -e /dev/nvidia0 ]; then
        echo "/dev/nvidia0 exists"
    else
        return 1
    fi
}

# Decide which libtorch the build links, in this order:
#   1. LIBTORCH set by the user (e.g. a cluster's CUDA libtorch);
#   2. LIBTORCH_USE_PYTORCH=1: the torch of the active Python / virtualenv (tch asks python3);
#   3. AIPERF_TORCH=cuda, or auto (the default) on a node with GPUs: the CUDA libtorch that
#      scripts/dev/setup installs into the cache;
#   4. AIPERF_TORCH=cpu, or auto without GPUs: the slim CPU libtorch scripts/dev/setup installs.
# Sets LIBTORCH, AIPERF_LIBTORCH_KIND (cpu, cuda or given) and AIPERF_LIBTORCH_SOURCE.
resolve_libtorch() {
    local want="${AIPERF_TORCH:-auto}" seen=""
    case "$want" in
        auto | cpu | cuda) ;;
        *) die "AIPERF_TORCH must be auto, cpu or cuda, got '$want'" ;;
    esac
    if [ -n "${LIBTORCH:-}" ]; then
        AIPERF_LIBTORCH_KIND=given
        AIPERF_LIBTORCH_SOURCE="LIBTORCH=$LIBTORCH"
    elif [ "${LIBTORCH_USE_PYTORCH:-}" = "1" ]; then
        AIPERF_LIBTORCH_KIND=given
        AIPERF_LIBTORCH_SOURCE="LIBTORCH_USE_PYTORCH=1 ($(command -v python3 || echo 'no python3'))"
    elif [ "$want" = cuda ] || { [ "$want" = auto ] && seen="$(gpu_node)"; }; then
        export LIBTORCH="$CUDA_TORCH_DIR/torch"
        AIPERF_LIBTORCH_KIND=cuda
        AIPERF_LIBTORCH_SOURCE="CUDA libtorch $LIBTORCH (${seen:-AIPERF_TORCH=cuda})"
    else
        export LIBTORCH="$SLIM_LIBTORCH"
        AIPERF_LIBTORCH_KIND=cpu
        AIPERF_LIBTORCH_SOURCE="cached slim CPU libtorch $LIBTORCH"
    fi
    export AIPERF_LIBTORCH_KIND AIPERF_LIBTORCH_SOURCE
}

# OpenMPI refuses root and more ranks than cores unless told; set both for local runs.
mpi_local_env() {
    if [ "$(id -u)" = 0 ]; then
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    fi
    export OMPI_MCA_rmaps_base_oversubscribe=1
    # Idle ranks yield the core instead of busy-polling (matters when oversubscribed).
    export OMPI_MCA_mpi_yield_when_idle=1
}

# The executable of the bench target named $1, from cargo's --message-format=json on stdin.
bench_executable() {
    python3 -c 'import json, sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == sys.argv[1] and m.get("executable"):
        print(m["executable"])' "$1"
}

AIPERF_BIN="$AIPERF_ROOT/target/release/aiperf"
AIPERF_DATA_PREP_BIN="$AIPERF_ROOT/target/release/aiperf-data-prep"
export AIPERF_BIN AIPERF_DATA_PREP_BIN

# scored CMD…: runs `aiperf score`/`aiperf-score`, whose exit status is the verdict
# (docs/reviewer.md, "Exit status"): 0 VALID, 3 UNOFFICIAL and 4 INVALID are scored results, which a script
# that wants the figures accepts; 1 (an error), 2 (usage), 5 (altered records) and 6 (a
# failed audit) are not.
scored() {
    local rc=0
    "$@" || rc=$?
    [ "$rc" -eq 0 ] || [ "$rc" -eq 3 ] || [ "$rc" -eq 4 ]
}

# The oldest Rust the workspace builds with: Cargo.toml's rust-version.
rust_version_required() {
    sed -n 's/^rust-version *= *"\([0-9.]*\)"/\1/p' "$AIPERF_ROOT/Cargo.toml" | head -n1
}

# Stops with how to get Rust unless cargo and rustc are on PATH and at least rust-version
# (Debian 12's packaged Rust is older: install with rustup, as the message says).
check_rust() {
    local need have
    need="$(rust_version_required)"
    local how="install Rust >= $need with rustup (no root needed): curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal, then '. \"\$HOME/.cargo/env\"' (or open a new shell) and re-run"
    command -v cargo >/dev/null && command -v rustc >/dev/null || die "Rust not found (no cargo/rustc on PATH): $how"
    have="$(rustc --version | awk '{print $2}')"
    if [ "$(printf '%s\n%s\n' "$need" "${have%%-*}" | sort -V | head -n1)" != "$need" ]; then
        die "rustc $have is older than the $need this workspace needs (Cargo.toml rust-version): $how; or 'rustup update stable'"
    fi
}
