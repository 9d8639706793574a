# Sourced by the launchers: the rank placement of an aiperf job. One rank per accelerator
# on every node, plus the primary (world rank 0) on the first node, so that node 0 has
# RANKS_PER_NODE + 1 ranks and the others RANKS_PER_NODE. aiperf forms one replica group per
# node from the shared-memory split, so each node's accelerators train one model together.
#
# Inputs (environment):
#   NODES            node names, space-separated (default: the SLURM allocation's, else this host)
#   RANKS_PER_NODE   training ranks per node (default: GPUs per node from SLURM, else nvidia-smi's
#                    count, else 1 — on CPU nodes set it to the ranks you want)
#   CPUS_PER_RANK    cores per rank (default: the allocation's SLURM_CPUS_PER_TASK, else unset:
#                    the launcher's own placement); aiperf's threads follow the cores a rank
#                    is bound to
# Outputs (variables): AIPERF_NODES (array), AIPERF_RPN, AIPERF_NP, AIPERF_CPR (cores per
# rank, empty when not given), and the function aiperf_hostlist, which prints one node name
# per rank in rank order.

aiperf_die() { echo "mpi-launch: $*" >&2; exit 2; }

if [ -n "${NODES:-}" ]; then
    read -r -a AIPERF_NODES <<< "$NODES"
elif [ -n "${SLURM_JOB_NODELIST:-}" ]; then
    command -v scontrol >/dev/null || aiperf_die "SLURM_JOB_NODELIST is set but scontrol is not on PATH"
    mapfile -t AIPERF_NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
else
    AIPERF_NODES=("$(hostname)")
fi
[ "${#AIPERF_NODES[@]}" -ge 1 ] || aiperf_die "no nodes: set NODES or run inside a SLURM allocation"

gpus_from_slurm() {
    # SLURM_GPUS_PER_NODE may read "4" or "a100:4"; SLURM_GPUS_ON_NODE is a count.
    local g="${SLURM_GPUS_PER_NODE:-${SLURM_GPUS_ON_NODE:-}}"
    g="${g##*:}"
    [[ "$g" =~ ^[0-9]+$ ]] && [ "$g" -gt 0 ] && echo "$g"
}
if [ -n "${RANKS_PER_NODE:-}" ]; then
    AIPERF_RPN="$RANKS_PER_NODE"
elif g="$(gpus_from_slurm)"; then
    AIPERF_RPN="$g"
elif command -v nvidia-smi >/dev/null && n="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" && [ "$n" -gt 0 ]; then
    AIPERF_RPN="$n"
else
    AIPERF_RPN=1
fi
[[ "$AIPERF_RPN" =~ ^[0-9]+$ ]] && [ "$AIPERF_RPN" -ge 1 ] ||
    aiperf_die "RANKS_PER_NODE must be a positive integer, got '$AIPERF_RPN'"
AIPERF_NP=$(( ${#AIPERF_NODES[@]} * AIPERF_RPN + 1 ))
AIPERF_CPR="${CPUS_PER_RANK:-${SLURM_CPUS_PER_TASK:-}}"
[ -z "$AIPERF_CPR" ] || { [[ "$AIPERF_CPR" =~ ^[0-9]+$ ]] && [ "$AIPERF_CPR" -ge 1 ]; } ||
    aiperf_die "CPUS_PER_RANK (or SLURM_CPUS_PER_TASK) must be a positive integer, got '$AIPERF_CPR'"

aiperf_hostlist() {
    local i n
    for i in "${!AIPERF_NODES[@]}"; do
        n="$AIPERF_RPN"
        [ "$i" = 0 ] && n=$((n + 1))
        for _ in $(seq "$n"); do echo "${AIPERF_NODES[$i]}"; done
    done
}
