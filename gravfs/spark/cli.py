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

from gravfs.fs.paths import display, show
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
                         help="import a directory tree, an S3 prefix or a manifest as one commit",
                         description="Import SOURCE into BRANCH[:PREFIX] as one commit that "
                         "replaces what PREFIX held (for a directory: the same tree as "
                         "'gravfs import').")
    im.add_argument("src", metavar="SOURCE", help="a directory every executor can read, "
                    "s3://BUCKET/PREFIX, or an inventory manifest (manifest.json, .csv, "
                    ".csv.gz, .parquet, or a directory of them with --manifest)")
    im.add_argument("dest", metavar="BRANCH[:PREFIX]")
    im.add_argument("-m", "--message", help="commit message (default: Import SOURCE)")
    im.add_argument("--partitions", type=int, metavar="N",
                    help="sorted partitions that write ranges (default: Spark's parallelism)")
    im.add_argument("--by-reference", action="store_true",
                    help="zero-copy: entries point at the source objects (s3:// or file://), "
                    "nothing is copied")
    im.add_argument("--manifest", action="store_true",
                    help="SOURCE is an inventory manifest (S3 Inventory CSV or Parquet)")
    im.add_argument("--manifest-columns", metavar="COLS",
                    help="the columns of a manifest's CSV files, comma-separated (default: "
                    "manifest.json's fileSchema, else bucket,key,size,last_modified_date,e_tag)")
    im.add_argument("--key-prefix", metavar="P",
                    help="manifest: import the keys under the folder P only, as paths "
                    "relative to it")

    def run(args) -> int:
        return cmd_spark_import(args, open_repo, split_ref_path)

    im.set_defaults(func=run)
    from gravfs.spark.gccli import add_gc_job
    add_gc_job(jobs, [common, opts], open_repo, spark_log_path)
    from gravfs.spark.index_cli import add_index_parser
    add_index_parser(jobs, common, opts, open_repo, spark_log_path)
    from gravfs.spark.exportcli import add_export_parsers
    add_export_parsers(jobs, [common, opts], open_repo, spark_log_path)


def spark_log_path(state_dir: Optional[str]) -> str:
    """<state dir>/logs/spark.log (appended to by every run), like the mount's logs."""
    logs = private_dir(os.path.join(state_dir or default_state_dir(), "logs"))
    return os.path.join(logs, "spark.log")


def per_second(count: int, secs: float) -> str:
    """A rate for a summary line: a few entries in a JVM's start-up time showed as "0
    entries/s", which read as if nothing had been imported."""
    rate = count / secs if secs > 0 else 0.0
    return f"{rate:,.0f}" if rate >= 10 else f"{rate:.1f}"


def cmd_spark_import(args, open_repo: Callable, split_ref_path: Callable) -> int:
    from gravfs.errors import GravfsError
    from gravfs.spark.importer import check_inputs, import_source, open_source
    from gravfs.spark.progress import stage_progress
    from gravfs.spark.runtime import SparkJobError, parse_conf, start_session

    if args.partitions is not None and args.partitions < 1:
        raise GravfsError("--partitions must be at least 1")
    branch, prefix = split_ref_path(args.dest, "BRANCH[:PREFIX]")
    conf = parse_conf(args.conf)
    source = open_source(args.src, args.manifest, columns=args.manifest_columns,
                         key_prefix=args.key_prefix)
    with open_repo(args) as repo:
        check_inputs(repo, source, branch, prefix)  # bad input fails before the JVM starts
        log_file = None if args.verbose else spark_log_path(args.state_dir)
        t0 = time.monotonic()
        spark = start_session(args.master, conf, args.verbose, app_name="gravfs import",
                              log_file=log_file, command=True)
        try:
            with stage_progress(spark.sparkContext, enabled=not args.json):
                res = import_source(spark, repo, source, branch, prefix, args.message,
                                    partitions=args.partitions, by_reference=args.by_reference)
        except SparkJobError as exc:
            where = f" (Spark's log: {log_file})" if log_file else ""
            raise SparkJobError(f"{exc}; nothing was committed{where}") from exc
        finally:
            spark.stop()
        secs = time.monotonic() - t0
    where = f"{branch}:{quote(prefix.encode('utf-8', 'surrogateescape')) or '/'}"
    how = "by reference" if args.by_reference else "copied"
    if args.json:
        print(json.dumps({"commit": res.commit.id, "branch": branch, "prefix": prefix,
                          "source": source.name, "by_reference": args.by_reference,
                          "entries": res.files, "partitions": res.partitions,
                          "ranges": res.ranges, "ranges_rewritten": res.ranges_rewritten,
                          "file_and_directory": res.file_dirs,
                          "file_and_directory_keys": [display(k) for k in res.file_dirs_shown],
                          "left_out": res.left_out, "left_out_paths": list(res.left_out_shown),
                          "seconds": round(secs, 3)}, sort_keys=True))
    else:
        parts, ranges = res.partitions, res.ranges
        print(f"Imported {res.files:,} entr{'y' if res.files == 1 else 'ies'} ({how}) into "
              f"{where} as commit {res.commit.id[:12]} ({parts} partition"
              f"{'' if parts == 1 else 's'}, {ranges} range{'' if ranges == 1 else 's'}, "
              f"{secs:.1f}s, {per_second(res.files, secs)} entries/s)")
        if res.file_dirs:
            names = ", ".join(map(show, res.file_dirs_shown))
            if res.file_dirs > len(res.file_dirs_shown):
                names += ", ..."
            are = "s are" if res.file_dirs > 1 else " is"
            print(f"Note: {res.file_dirs:,} imported name{are} both a file and a directory "
                  f"({names}): the mount shows the directory; gravfs cat reads the file")
        if res.left_out:
            names = ", ".join(quote(p.encode("utf-8", "surrogateescape"))
                              for p in res.left_out_shown)
            if res.left_out > len(res.left_out_shown):
                names += ", ..."
            print(f"Note: {res.left_out:,} path{'' if res.left_out == 1 else 's'} of the source "
                  f"left out, {res.left_out_as} ({names}); Spark's log names each")
    return 0
