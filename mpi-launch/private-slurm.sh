# shellcheck shell=bash
# Sourced, never run: a private SLURM for tests and for trying the templates — munged and
# the SLURM daemons as root with their configuration, state, spool, pid and log files in one
# work folder, nothing of the system's own SLURM or munge touched. Used by scripts/dev/test-slurm
# (one node: this machine), by mpi-launch/virtual-cluster (slurmctld here, one slurmd per
# virtual node) and by container/node (one slurmd per container host). The caller starts
# slurmctld and the slurmds itself (where they run is what differs), with `-f "$conf"`.
#
# Facts this relies on: munged's socket directory must be 0755 and its key
# and log directories 0700; no cgroups here, so proctrack/linuxproc and task/none; Debian's
# OpenMPI speaks PMIx only (MpiDefault=pmix); config_overrides lets a node advertise more
# CPUs than it has; MinJobAge=5 keeps `sbatch --wait` quick; EnforcePartLimits=ALL makes an
# impossible job fail at submit instead of pending forever.

# The daemons and clients a private SLURM needs; names what is missing.
pslurm_check_tools() {
    local b missing=()
    for b in munged mungekey slurmctld slurmd sbatch scontrol sinfo; do
        command -v "$b" >/dev/null || missing+=("$b")
    done
    if [ "${#missing[@]}" -gt 0 ]; then
        echo "private SLURM: missing ${missing[*]}: install munge slurm-wlm slurmctld slurmd slurm-client (scripts/dev/setup does)" >&2
        return 1
    fi
}

# pslurm_munge_start WORK [KEY]: a munged whose socket is WORK/munge/run/munge.socket, with a
# fresh key, or a copy of KEY (the key every host of one cluster shares).
pslurm_munge_start() {
    local work="$1" key="${2:-}"
    chmod 755 "$work"
    mkdir -p "$work/munge/etc" "$work/munge/log" "$work/munge/run" "$work/munge/lib"
    chmod 700 "$work/munge/etc" "$work/munge/log" "$work/munge/lib"
    chmod 755 "$work/munge/run"
    if [ -n "$key" ]; then
        cp "$key" "$work/munge/etc/munge.key"
    else
        mungekey --create --keyfile="$work/munge/etc/munge.key" --force >/dev/null
    fi
    chmod 600 "$work/munge/etc/munge.key"
    munged --key-file="$work/munge/etc/munge.key" --socket="$work/munge/run/munge.socket" \
        --pid-file="$work/munged.pid" --log-file="$work/munge/log/munged.log" \
        --seed-file="$work/munge/lib/munge.seed" --force
}

# pslurm_write_conf WORK CONTROLLER PORT CLUSTER PARTITION_NODES NODE_LINE…: writes
# WORK/slurm.conf and prints its path. CONTROLLER is SlurmctldHost (`name` or
# `name(address)`), PORT slurmctld's port (slurmd's is PORT + 1), PARTITION_NODES the node
# list of the one partition `test`, each NODE_LINE a `NodeName=…` line. Per-node files use
# SLURM's %n (the node name), so several slurmds can share the folder.
pslurm_write_conf() {
    local work="$1" controller="$2" port="$3" cluster="$4" partition="$5"
    shift 5
    local line
    mkdir -p "$work/state" "$work/spool" "$work/log"
    for line in "$@"; do
        # slurmd needs its spool folder before it starts.
        [[ "$line" =~ NodeName=([^ ]+) ]] && mkdir -p "$work/spool/${BASH_REMATCH[1]}"
    done
    {
        cat <<CONF
ClusterName=$cluster
SlurmctldHost=$controller
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$work/munge/run/munge.socket
CredType=cred/munge
SlurmctldPort=$port
SlurmdPort=$((port + 1))
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool/%n
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd-%n.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=pmix
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MinJobAge=5
EnforcePartLimits=ALL
SlurmdParameters=config_overrides
CONF
        printf '%s\n' "$@"
        echo "PartitionName=test Nodes=$partition Default=YES MaxTime=INFINITE State=UP"
    } > "$work/slurm.conf"
    echo "$work/slurm.conf"
}

# pslurm_all_idle N: true when the controller answers and N nodes are idle (SLURM_CONF set).
pslurm_all_idle() {
    scontrol ping 2>/dev/null | grep -q UP || return 1
    [ "$(sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2 ~ /^(idle|mix)$/' | wc -l)" -ge "$1" ]
}

# pslurm_wait_idle N SECONDS: waits until N nodes are idle.
pslurm_wait_idle() {
    for _ in $(seq $(($2 * 5))); do
        pslurm_all_idle "$1" && return 0
        sleep 0.2
    done
    return 1
}

# pslurm_stop WORK: stops every daemon with a pid file in WORK (slurmds, slurmctld, munged),
# waiting until each has gone (daemons linger as zombies briefly: /proc state, not kill -0).
pslurm_stop() {
    local work="$1" f pid pids=()
    for f in "$work"/slurmd-*.pid "$work"/slurmd.pid "$work"/slurmctld.pid "$work"/munged.pid; do
        [ -f "$f" ] || continue
        pid="$(cat "$f" 2>/dev/null)"
        [[ "$pid" =~ ^[0-9]+$ ]] || continue
        kill "$pid" 2>/dev/null && pids+=("$pid")
    done
    for _ in $(seq 50); do
        local alive=0
        for pid in "${pids[@]}"; do
            [ -r "/proc/$pid/stat" ] && ! awk '{exit $3 != "Z"}' "/proc/$pid/stat" && alive=1
        done
        [ "$alive" = 0 ] && return 0
        sleep 0.1
    done
    for pid in "${pids[@]}"; do
        kill -9 "$pid" 2>/dev/null || true
    done
}
