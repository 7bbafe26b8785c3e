"""The application file spark-submit runs for hepix.

    spark-submit [SPARK OPTIONS] spark-submit/hepix_main.py COMMAND [ARGS...]

forwards ``COMMAND ARGS...`` to ``jobs.cli.main`` and leaves with its exit
status.  The packages hecore, jobs, schemas and tasks come from the Python path:
the project's virtualenv on this machine, ``--py-files hepix-src.zip`` (and
the packed virtualenv) on a cluster.  When they cannot be imported, the
checkout this file sits in is tried last.
"""
import os
import sys
import traceback

_PACKAGES = ("jobs", "hecore", "schemas", "tasks")


def _installed_pyspark_first():
    """spark-submit puts its own pyspark.zip and py4j's zip first on this driver's path (and Spark's core jar);
    where they are the ones inside the installed pyspark (this machine's virtualenv), take them off, so that
    pyspark is imported compiled from the package rather than compiled afresh from the zip's sources
    (jobs.runtime.pydaemon)."""
    try:
        from jobs.runtime.pydaemon import forget_installed_archives
    except ImportError:
        return
    forget_installed_archives()


def _load_main():
    _installed_pyspark_first()
    try:
        from jobs.cli import main
    except ModuleNotFoundError as e:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        if e.name not in _PACKAGES or not os.path.isfile(os.path.join(root, "jobs", "cli.py")):
            raise
        sys.path.append(root)
        from jobs.cli import main
    return main


def run(argv):
    """Run ``hepix argv`` and return its exit status; never raises."""
    try:
        return int(_load_main()(argv) or 0)
    except SystemExit as e:                 # argparse (--help, usage errors), hepix's own exits
        if e.code is None:
            return 0
        if isinstance(e.code, int):
            return e.code
        print(e.code, file=sys.stderr)
        return 1
    except BaseException:                   # a bug: keep the traceback
        traceback.print_exc()
        return 1


if __name__ == "__main__":
    code = run(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    # Leave without interpreter teardown, like jobs.cli.entry: Pyfhel 3.5 can
    # abort while the interpreter tears down, which would turn a finished run
    # into exit 134.  The job has stopped its Spark session and closed its
    # output before main returns.
    os._exit(code)
