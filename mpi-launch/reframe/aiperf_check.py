'''The aiperf benchmark as a ReFrame 4.x run-only check.

Runs `aiperf run` under MPI with the records in the stage folder, scores them with
`aiperf score --json` and reports the score's figures as performance variables:
sustained_ops, regulated_ops, ops_per_accelerator and steady_ops (OPS).

    reframe -C SETTINGS -c mpi-launch/reframe/aiperf_check.py -r       # emulated, 300 s
    reframe -C SETTINGS -c mpi-launch/reframe/aiperf_check.py -r \
        -S num_tasks=36 -S num_tasks_per_node=9 -S trainer=real -S preset=imagenet \
        -S duration_s=7200 -S data=/scratch/imagenet                  # 4 nodes x 8 GPUs

Variables (`-S NAME=VALUE`): num_tasks and num_tasks_per_node (the placement: see
Placement), duration_s, trainer, preset, data, extra_args, launcher_options, aiperf_bin,
aiperf_root.
'''

import json
import os
import shlex
from dataclasses import dataclass

import reframe as rfm
import reframe.utility.sanity as sn
import reframe.utility.typecheck as typ
from reframe.core.backends import getlauncher
from reframe.core.builtins import (performance_function, run_after, run_before,
                                   sanity_function, variable)

#: The checkout this file lives in (mpi-launch/reframe/ is two levels down).
CHECKOUT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))

#: `aiperf score` exit statuses that carry a score: VALID, UNOFFICIAL, INVALID
#: (docs/reviewer.md, "Exit status"). The others are errors or altered records.
SCORED_STATUSES = (0, 3, 4)

#: The wrapper in mpi-launch/ for each ReFrame launcher when the run spans nodes, and the
#: wrapper's environment variable for extra launcher flags.
WRAPPERS = {
    'srun': ('srun-aiperf', 'SRUN_ARGS', {}),
    'mpirun': ('mpirun-aiperf', 'MPIRUN_ARGS', {'MPIRUN': 'mpirun'}),
    'mpirun-openmpi': ('mpirun-aiperf', 'MPIRUN_ARGS', {'MPIRUN': 'mpirun'}),
    'mpiexec': ('mpirun-aiperf', 'MPIRUN_ARGS', {'MPIRUN': 'mpiexec'}),
}


@dataclass(frozen=True)
class Placement:
    '''aiperf's rank layout: the primary (world rank 0) plus ``ranks_per_node`` training
    ranks on the first node, ``ranks_per_node`` on each other node (one replica group per
    node, so every node needs the same number of training ranks).'''

    nodes: int
    ranks_per_node: int

    @property
    def world_size(self):
        '''The MPI ranks launched: every training rank and the primary.'''
        return self.nodes * self.ranks_per_node + 1

    @classmethod
    def from_tasks(cls, num_tasks, num_tasks_per_node):
        '''The layout for ReFrame's task counts.

        One node (``num_tasks_per_node`` unset, or not below ``num_tasks``): ``num_tasks``
        ranks, the primary and ``num_tasks - 1`` training ranks. Several nodes:
        ``num_tasks_per_node`` is the accelerators per node plus one, as in
        mpi-launch/aiperf.sbatch, so the allocation is ``num_tasks / num_tasks_per_node``
        nodes and every node but the first leaves one task slot unused.
        '''
        if num_tasks_per_node is None or num_tasks_per_node >= num_tasks:
            if num_tasks < 2:
                raise ValueError(
                    f'num_tasks={num_tasks}: aiperf needs the primary and at least '
                    f'one training rank (num_tasks >= 2)'
                )
            return cls(nodes=1, ranks_per_node=num_tasks - 1)
        if num_tasks_per_node < 2 or num_tasks % num_tasks_per_node:
            raise ValueError(
                f'num_tasks={num_tasks}, num_tasks_per_node={num_tasks_per_node}: across '
                f'nodes num_tasks_per_node is the accelerators per node + 1 (at least 2) '
                f'and num_tasks a multiple of it (nodes x num_tasks_per_node)'
            )
        return cls(nodes=num_tasks // num_tasks_per_node,
                   ranks_per_node=num_tasks_per_node - 1)


class Score:
    '''One run's entry of ``aiperf score --json``, and the figures the check reports.'''

    def __init__(self, path):
        with open(path) as fp:
            doc = json.load(fp)
        self.entry = doc[0] if isinstance(doc, list) else doc

    @property
    def records(self):
        '''The integrity verdict on the records: ``intact`` when they are the run's own.'''
        return self.entry['integrity']['records']

    @property
    def world_size(self):
        '''Ranks the run had: its accelerators (training ranks) and the primary.'''
        return self.entry['accelerators'] + 1

    @property
    def nodes(self):
        '''Nodes the training ranks ran on.'''
        return self.entry['nodes']

    @property
    def sustained_ops(self):
        '''The score: operations per second sustained over the whole run.'''
        return float(self.entry['ops_per_s'])

    @property
    def regulated_ops(self):
        '''The regulated score: the sustained OPS times −ln(error) of the best model.'''
        return float(self.entry['regulated'])

    @property
    def ops_per_accelerator(self):
        '''The sustained OPS divided by the accelerators.'''
        return float(self.entry['ops_per_s_per_accelerator'])

    @property
    def steady_ops(self):
        '''The OPS after the warm-up; 0.0 when the run has no steady state (a group still
        in its warm-up at the end: ``steady_ops_per_s`` is null), since ReFrame's
        performance values must be numbers. A lower-bound reference then fails.'''
        steady = self.entry['stability']['steady_ops_per_s']
        return 0.0 if steady is None else float(steady)


@sn.deferrable
def read_score(path):
    '''The score in `path`, read when the sanity check is evaluated.'''
    return Score(path)


@rfm.simple_test
class AiperfCheck(rfm.RunOnlyRegressionTest):
    '''aiperf under MPI: the run, its closing score table and the score of its records.

    Task counts are ReFrame's own (``-S num_tasks=…``, ``-S num_tasks_per_node=…``); see
    :class:`Placement`. The records stay in the test's output folder (``run/``), with
    ``score.json``, for rescoring and audits.
    '''

    descr = 'aiperf: AutoML benchmark under MPI, scored from its HDF5 records'
    valid_systems = ['*']
    valid_prog_environs = ['*']
    sourcesdir = None
    num_tasks = 3
    num_tasks_per_node = None
    tags = {'aiperf', 'mpi', 'benchmark'}
    keep_files = ['run', 'score.json']

    #: The aiperf binary (default: target/release/aiperf of this checkout).
    aiperf_bin = variable(str, value=os.path.join(CHECKOUT, 'target', 'release', 'aiperf'))
    #: The checkout whose mpi-launch/ wrappers place the ranks of a run across nodes.
    aiperf_root = variable(str, value=CHECKOUT)
    #: Run length in seconds (`aiperf run --duration`).
    duration_s = variable(int, value=300)
    #: `emulated` (waits for compute, real MPI exchanges), `simulated` (no exchange) or
    #: `real` (libtorch training: the benchmark itself; needs the preset's data).
    trainer = variable(str, value='emulated')
    #: aiperf's preset (fashion-mnist, cifar10, imagenet = the official rules) or a JSON file.
    preset = variable(str, value='fashion-mnist')
    #: The dataset folder for the real trainer (`--data`); empty: aiperf's default.
    data = variable(str, value='')
    #: More `aiperf run` flags, e.g. `-S extra_args=--seed,7`.
    extra_args = variable(typ.List[str], value=[])
    #: More launcher flags, e.g. `-S launcher_options=--mpi=pmix`.
    launcher_options = variable(typ.List[str], value=[])

    # No references by default. Lower bounds for a system, with the figures a centre
    # measured, fail the check when a run falls more than 10% below them, e.g.:
    #
    #   reference = {
    #       'mycluster:gpu': {
    #           'sustained_ops': (2.4e15, -0.10, None, 'OPS'),
    #           'regulated_ops': (5.1e15, -0.10, None, 'OPS'),
    #           'ops_per_accelerator': (7.5e13, -0.10, None, 'OPS'),
    #           'steady_ops': (2.5e15, -0.10, None, 'OPS'),
    #       }
    #   }
    #
    # set in a subclass registered with @rfm.simple_test (or edited here).

    @run_after('setup')
    def place_ranks(self):
        '''Refuses an unknown trainer, places the ranks and sets the time limit. (Raised
        here, an error fails this test case; at init it would only drop the check.)'''
        if self.trainer not in ('emulated', 'simulated', 'real'):
            raise ValueError(
                f'trainer={self.trainer!r}: must be emulated, simulated or real'
            )
        self.placement = Placement.from_tasks(self.num_tasks, self.num_tasks_per_node)
        if self.placement.nodes == 1:
            # One node: ask the scheduler for exactly one.
            self.num_tasks_per_node = self.num_tasks
        if self.time_limit is None:
            self.time_limit = self.duration_s + 900

    @property
    def records_dir(self):
        '''Where `aiperf run` writes the records: `run/` in the stage folder.'''
        return os.path.join(self.stagedir, 'run')

    @run_before('run')
    def set_command(self):
        '''The launch of `aiperf run` and, after it, the scoring of its records.'''
        self.executable_opts = [
            'run', '--config', self.preset, '--trainer', self.trainer,
            '--duration', str(self.duration_s), '--results', self.records_dir,
            *(['--data', self.data] if self.data else []),
            *self.extra_args,
        ]
        if self.placement.nodes == 1:
            self.executable = self.aiperf_bin
            self.job.launcher.options += self.launcher_options
        else:
            self._launch_through_wrapper()
        self.postrun_cmds = [
            'echo "aiperf run exit status: $?"',
            f'{shlex.quote(self.aiperf_bin)} score --json '
            f'{shlex.quote(self.records_dir)} > score.json; '
            f'echo "aiperf score exit status: $?"',
        ]

    def _launch_through_wrapper(self):
        '''Across nodes the first node runs one rank more than the others, which a
        launcher's uniform -np/--ntasks cannot say: the mpi-launch/ wrapper for the
        partition's launcher places the ranks, started once from the job script.'''
        name = self.current_partition.launcher_type.registered_name
        if name not in WRAPPERS:
            raise ValueError(
                f'launcher {name!r} of partition {self.current_partition.fullname}: '
                f'runs across nodes need one of {", ".join(WRAPPERS)}'
            )
        wrapper, args_var, env = WRAPPERS[name]
        self.job.launcher = getlauncher('local')()
        self.executable = os.path.join(self.aiperf_root, 'mpi-launch', wrapper)
        env = dict(env, AIPERF_BIN=self.aiperf_bin,
                   RANKS_PER_NODE=str(self.placement.ranks_per_node))
        env[args_var] = ' '.join(self.launcher_options)
        # ReFrame writes `export NAME=VALUE` as given: quote for the shell.
        self.env_vars.update({k: shlex.quote(v) for k, v in env.items()})

    @property
    def score_file(self):
        '''The JSON that `aiperf score --json` wrote after the run.'''
        return os.path.join(self.stagedir, 'score.json')

    def _score(self):
        return Score(self.score_file)

    @sanity_function
    def assert_scored(self):
        '''The run exited 0, printed its closing score table with intact records, and
        its score (from the records) counts the ranks and nodes of the placement.'''
        status = r'aiperf {0} exit status: (\d+)'
        score = read_score(self.score_file)
        return sn.all([
            sn.assert_eq(
                sn.extractsingle(status.format('run'), self.stdout, 1, int), 0,
                msg='aiperf run exited with status {0}'),
            sn.assert_found(
                r'^\s*records\s+intact\b', self.stdout,
                msg="no 'records intact' in aiperf's closing score table"),
            sn.assert_in(
                sn.extractsingle(status.format('score'), self.stdout, 1, int),
                SCORED_STATUSES,
                msg='aiperf score exited with status {0} (not a score)'),
            sn.assert_eq(sn.getattr(score, 'records'), 'intact',
                         msg="aiperf score --json: records {0}, expected {1}"),
            sn.assert_eq(sn.getattr(score, 'world_size'), self.placement.world_size,
                         msg='the score counts {0} ranks (accelerators + primary); '
                             'the placement asked for {1}'),
            sn.assert_eq(sn.getattr(score, 'nodes'), self.placement.nodes,
                         msg='the score counts {0} nodes; the placement asked for {1}'),
        ])

    @performance_function('OPS')
    def sustained_ops(self):
        '''The score (sustained OPS).'''
        return self._score().sustained_ops

    @performance_function('OPS')
    def regulated_ops(self):
        '''The regulated score.'''
        return self._score().regulated_ops

    @performance_function('OPS')
    def ops_per_accelerator(self):
        '''The sustained OPS per accelerator.'''
        return self._score().ops_per_accelerator

    @performance_function('OPS')
    def steady_ops(self):
        '''The steady-state OPS (0.0 without a steady state: see Score.steady_ops).'''
        return self._score().steady_ops
