"""The start-up of applications on a cluster, as the cluster suites report it (``hepix bench --suite cluster``,
with and without ``--hdfs``)."""
from __future__ import annotations

#: The start-up a second application on the same cluster should stay within (seconds).
SECOND_STARTUP_GOAL = 10.0


def startup_line(first: float, second: float | None, install_seconds: float | None = None,
                 unpacked: bool = False) -> str:
    """The start-up of the first and the second application on one cluster, and the install of the packed
    environment on the node before them (``install_seconds``; ``unpacked``: it was unpacked then, else it was
    there already), which is in neither."""
    then = f", the second {second:.1f} s" if second is not None else ""
    where = "" if install_seconds is None else (
        f"; the packed environment installed on the node once before them by spark-submit/install-env.sh in "
        f"{install_seconds:.1f} s ({'unpacked then' if unpacked else 'there already'}), in neither")
    return (f"application start-up on the cluster (wall - the job's seconds): the first {first:.1f} s{then} "
            f"(goal <= {SECOND_STARTUP_GOAL:.0f} s for a second application){where}")
