"""``gravfs spark index [--full]``: the command-line side of the index build."""

from __future__ import annotations

import json
import time
from typing import Callable


def add_index_parser(jobs, common, opts, open_repo: Callable, log_path: Callable) -> None:
    """Register ``gravfs spark index`` on the ``gravfs spark`` subparsers (``log_path``:
    gravfs.spark.cli.spark_log_path, handed over so the two modules form no circle)."""
    ix = jobs.add_parser("index", parents=[common, opts],
                         help="build or extend the provenance index",
                         description="Index the commits and ranges the provenance index "
                         "does not hold yet (under _gravfs/index/ in the store), for "
                         "'gravfs provenance' and 'gravfs log REF -- PATH'.")
    ix.add_argument("--full", action="store_true",
                    help="rebuild the whole index instead of extending it")
    ix.set_defaults(func=lambda args: cmd_spark_index(args, open_repo, log_path))


def cmd_spark_index(args, open_repo: Callable, spark_log_path: Callable) -> int:
    from gravfs.spark.index import IndexResult, build_index, plan_index
    from gravfs.spark.progress import stage_progress
    from gravfs.spark.runtime import SparkJobError, parse_conf, start_session

    conf = parse_conf(args.conf)
    with open_repo(args) as repo:
        plan = plan_index(repo, args.full)
        if not plan.commits:  # nothing to do: no JVM to start
            return _report(args, IndexResult(None, plan.full, 0, 0, {}, 0, 0, plan.total,
                                             plan.expired), 0.0)
        log_file = None if args.verbose else spark_log_path(args.state_dir)
        t0 = time.monotonic()
        spark = start_session(args.master, conf, args.verbose, app_name="gravfs index",
                              log_file=log_file, command=True)
        try:
            with stage_progress(spark.sparkContext, enabled=not args.json):
                res = build_index(spark, repo, plan=plan)
        except SparkJobError as exc:
            where = f" (Spark's log: {log_file})" if log_file else ""
            raise SparkJobError(f"{exc}; the index is unchanged{where}") from exc
        finally:
            spark.stop()
        secs = time.monotonic() - t0
    return _report(args, res, secs)


def _report(args, res, secs: float) -> int:
    if args.json:
        print(json.dumps({"run": res.run, "full": res.full, "commits": res.commits,
                          "ranges": res.ranges, "rows": res.rows, "files": res.files,
                          "bytes": res.bytes, "commits_total": res.commits_total,
                          "expired_commits": res.expired, "seconds": round(secs, 3)},
                         sort_keys=True))
        return 0
    left = (f"; {res.expired} commit(s) garbage collection expired are left out"
            if res.expired else "")
    if res.run is None:
        print(f"The provenance index is up to date ({res.commits_total} commits{left})")
    else:
        rows = sum(res.rows.values())
        print(f"Indexed {res.commits} commit(s) and {res.ranges} range(s)"
              f"{' (full rebuild)' if res.full else ''}: {rows} rows in {res.files} file(s), "
              f"{res.bytes} bytes, {secs:.1f}s; the index covers {res.commits_total} commits"
              f"{left}")
    return 0
