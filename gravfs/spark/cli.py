"""``gravfs spark JOB``: the command-line side of the Spark jobs.

cli.py hands over its subparsers and its helpers (open the repository, split
BRANCH[:PREFIX]) so this module never imports the CLI above it.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Callable, Optional

from gravfs.quoting import quote
from gravfs.store.modes import private_dir
from gravfs.version.config import default_state_dir

log = logging.getLogger(__name__)


def add_spark_parser(sub, common, open_repo: Callable, split_ref_path: Callable) -> None:
    """Register ``gravfs spark import ...`` on the CLI's subparsers."""
    sp = sub.add_parser("spark", parents=[common], help="run a pipeline on Spark",
                        description="Run a gravfs pipeline on Spark: an in-process "
                        "SparkSession, local[*] unless --master is given.")
    jobs = sp.add_subparsers(dest="job", metavar="JOB")
    jobs.required = True
    opts = type(sp)(add_help=False)
    opts.add_argument("--master", help="Spark master URL (default: local[*]); for any "
                      "non-local master gravfs ships itself to the executors")
    opts.add_argument("--conf", action="append", default=[], metavar="K=V",
                      help="a Spark setting (repeatable)")
    opts.add_argument("--json", action="store_true", help="print the summary as JSON")
    im = jobs.add_parser("import", parents=[common, opts],
                         help="import a directory tree as one commit",
                         description="Import a local or shared directory tree into "
                         "BRANCH[:PREFIX] as one commit (the same tree as 'gravfs import').")
    im.add_argument("src", metavar="SOURCE", help="a directory every executor can read")
    im.add_argument("dest", metavar="BRANCH[:PREFIX]")
    im.add_argument("-m", "--message", help="commit message (default: Import SOURCE)")
    im.add_argument("--partitions", type=int, metavar="N",
                    help="sorted partitions that write ranges (default: Spark's parallelism)")

    def run(args) -> int:
        return cmd_spark_import(args, open_repo, split_ref_path)

    im.set_defaults(func=run)
    from gravfs.spark.exportcli import add_export_parsers
    add_export_parsers(jobs, [common, opts], open_repo, spark_log_path)


def spark_log_path(state_dir: Optional[str]) -> str:
    """<state dir>/logs/spark.log (appended to by every run), like the mount's logs."""
    logs = private_dir(os.path.join(state_dir or default_state_dir(), "logs"))
    return os.path.join(logs, "spark.log")


def cmd_spark_import(args, open_repo: Callable, split_ref_path: Callable) -> int:
    from gravfs.errors import GravfsError
    from gravfs.spark.importer import check_inputs, import_tree
    from gravfs.spark.progress import stage_progress
    from gravfs.spark.runtime import SparkJobError, parse_conf, start_session

    if args.partitions is not None and args.partitions < 1:
        raise GravfsError("--partitions must be at least 1")
    branch, prefix = split_ref_path(args.dest, "BRANCH[:PREFIX]")
    conf = parse_conf(args.conf)
    with open_repo(args) as repo:
        check_inputs(repo, args.src, branch)  # bad input fails before the JVM starts
        log_file = None if args.verbose else spark_log_path(args.state_dir)
        t0 = time.monotonic()
        spark = start_session(args.master, conf, args.verbose, app_name="gravfs import",
                              log_file=log_file)
        try:
            with stage_progress(spark.sparkContext, enabled=not args.json):
                res = import_tree(spark, repo, args.src, branch, prefix, args.message,
                                  partitions=args.partitions)
        except SparkJobError as exc:
            where = f" (Spark's log: {log_file})" if log_file else ""
            raise SparkJobError(f"{exc}; nothing was committed{where}") from exc
        finally:
            spark.stop()
        secs = time.monotonic() - t0
    where = f"{branch}:{quote(prefix.encode('utf-8', 'surrogateescape')) or '/'}"
    if args.json:
        print(json.dumps({"commit": res.commit.id, "branch": branch, "prefix": prefix,
                          "entries": res.files, "partitions": res.partitions,
                          "ranges": res.ranges, "ranges_rewritten": res.ranges_rewritten,
                          "seconds": round(secs, 3)}, sort_keys=True))
    else:
        print(f"Imported {res.files} file(s) into {where} as commit {res.commit.id[:12]} "
              f"({res.partitions} partitions, {res.ranges} ranges, {secs:.1f}s)")
    return 0
