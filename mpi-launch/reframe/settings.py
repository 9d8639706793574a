'''ReFrame 4.x site configuration for trying and testing aiperf_check.py on one machine.

One system, `aiperf-test`, matching any host, with two partitions:

* `local`: jobs run on this machine, ranks started by `mpirun`;
* `slurm`: jobs submitted to the SLURM of `SLURM_CONF` (scripts/dev/test-reframe starts a
  private one), ranks started by `srun` (or `mpirun` inside the job).

Everything ReFrame writes goes under one folder, `$AIPERF_REFRAME_OUT` (default:
results/reframe of this checkout): `stage/` and `output/` (the records of each run are kept
in output/aiperf-test/PARTITION/builtin/AiperfCheck/run), `perflogs/`, `reports/` and
ReFrame's own log, `reframe.log`.

Environment:
  AIPERF_REFRAME_OUT         the folder above
  AIPERF_REFRAME_LAUNCHER    the slurm partition's launcher: srun (default) or mpirun
  AIPERF_REFRAME_SCHEDULER   the slurm partition's scheduler: squeue (default: SLURM
                             without accounting, as in the private SLURM) or slurm
                             (sacct, where slurmdbd keeps accounting)

A centre adds the check to its own configuration instead; what it needs from one is a
partition whose launcher is srun, mpirun or mpiexec, and a perflog handler.

The perflog, perflogs/aiperf-test/PARTITION/AiperfCheck.log, starts with a header line
naming the `|`-separated fields; each run appends one line:

  completion time|result|test|system|partition|environ|num_tasks|num_tasks_per_node|
  outputdir|then per variable: name|value|unit|ref|lower|upper|result|
'''

import os

_CHECKOUT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
OUT = os.path.abspath(os.environ.get('AIPERF_REFRAME_OUT',
                                     os.path.join(_CHECKOUT, 'results', 'reframe')))
# ReFrame opens its log file before it creates any folder.
os.makedirs(OUT, exist_ok=True)
SLURM_LAUNCHER = os.environ.get('AIPERF_REFRAME_LAUNCHER', 'srun')
SLURM_SCHEDULER = os.environ.get('AIPERF_REFRAME_SCHEDULER', 'squeue')

PERFLOG_FORMAT = '|'.join([
    '%(check_job_completion_time)s',
    '%(check_result)s',
    '%(check_name)s',
    '%(check_system)s',
    '%(check_partition)s',
    '%(check_environ)s',
    '%(check_num_tasks)s',
    '%(check_num_tasks_per_node)s',
    '%(check_outputdir)s',
    '%(check_perfvalues)s',
])
PERFVARS_FORMAT = '|'.join([
    '%(check_perf_var)s',
    '%(check_perf_value)s',
    '%(check_perf_unit)s',
    '%(check_perf_ref)s',
    '%(check_perf_lower_thres)s',
    '%(check_perf_upper_thres)s',
    '%(check_perf_result)s',
]) + '|'

site_configuration = {
    'systems': [
        {
            'name': 'aiperf-test',
            'descr': 'one machine: mpirun locally, or a (private) SLURM',
            'hostnames': ['.*'],
            'prefix': OUT,
            'partitions': [
                {
                    'name': 'local',
                    'descr': 'this machine, ranks started by mpirun',
                    'scheduler': 'local',
                    'launcher': 'mpirun',
                    # ReFrame's predefined environment: aiperf is a prebuilt binary.
                    'environs': ['builtin'],
                    'max_jobs': 1,
                },
                {
                    'name': 'slurm',
                    'descr': f'SLURM jobs, ranks started by {SLURM_LAUNCHER}',
                    'scheduler': SLURM_SCHEDULER,
                    'launcher': SLURM_LAUNCHER,
                    'environs': ['builtin'],
                    'max_jobs': 1,
                },
            ],
        },
    ],
    'logging': [
        {
            'level': 'debug',
            'handlers': [
                {
                    'type': 'stream',
                    'name': 'stdout',
                    'level': 'info',
                    'format': '%(message)s',
                },
                {
                    'type': 'file',
                    'name': os.path.join(OUT, 'reframe.log'),
                    'level': 'debug',
                    'format': '[%(asctime)s] %(levelname)s: %(check_info)s: %(message)s',
                    'append': True,
                },
            ],
            'handlers_perflog': [
                {
                    'type': 'filelog',
                    'basedir': os.path.join(OUT, 'perflogs'),
                    'prefix': '%(check_system)s/%(check_partition)s',
                    'level': 'info',
                    'format': PERFLOG_FORMAT,
                    'format_perfvars': PERFVARS_FORMAT,
                    'append': True,
                },
            ],
        },
    ],
    'general': [
        {
            'report_file': os.path.join(OUT, 'reports', 'run-report-{sessionid}.json'),
        },
    ],
}
