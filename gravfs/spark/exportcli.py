"""``gravfs spark entries`` and ``gravfs spark export``: their parsers and commands.

gravfs.spark.cli registers them (``add_export_parsers``) and hands over its
helpers, so this module imports nothing above it. Bad input is refused before
the JVM starts.
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from typing import Callable, Iterator


def add_export_parsers(jobs, parents: list, open_repo: Callable, log_path: Callable) -> None:
    """Register ``entries`` and ``export`` on the ``gravfs spark`` subparsers."""
    en = jobs.add_parser("entries", parents=parents, help="write a commit's entries as Parquet",
                         description="Write every entry of REF (path, address, size, mtime, "
                         "mode, kind, identity, range id) as a Parquet table, up to 32 ranges "
                         "per task.")
    en.add_argument("ref", metavar="REF")
    en.add_argument("--out", required=True, metavar="DIR",
                    help="output directory, absent or empty: a path, s3://BUCKET/PREFIX "
                    "(written with gravfs's S3 settings), or any URL Spark can write")
    en.set_defaults(func=lambda args: cmd_entries(args, open_repo, log_path))

    ex = jobs.add_parser("export", parents=parents,
                         help="copy a commit's files to a directory or an S3 prefix",
                         description="Copy the files of REF to DEST (a directory every executor "
                         "sees, or s3://BUCKET/PREFIX) in parallel, verifying each copy; "
                         "_SUCCESS is written last. Re-running resumes. With --since REF2, "
                         "DEST must hold a finished export of REF2: only what changed is "
                         "copied and what was removed is deleted.")
    ex.add_argument("ref", metavar="REF")
    ex.add_argument("dest", metavar="DEST")
    ex.add_argument("--since", metavar="REF2",
                    help="incremental: DEST holds an export of REF2")
    ex.set_defaults(func=lambda args: cmd_export(args, open_repo, log_path))


@contextmanager
def _session(args, log_path: Callable, app: str, what: str) -> Iterator:
    from gravfs.spark.progress import stage_progress
    from gravfs.spark.runtime import SparkJobError, parse_conf, start_session
    conf = parse_conf(args.conf)
    log_file = None if args.verbose else log_path(args.state_dir)
    spark = start_session(args.master, conf, args.verbose, app_name=app, log_file=log_file,
                          command=True)
    try:
        with stage_progress(spark.sparkContext, enabled=not args.json):
            yield spark
    except SparkJobError as exc:
        where = f" (Spark's log: {log_file})" if log_file else ""
        raise SparkJobError(f"{exc}{what}{where}") from exc
    finally:
        spark.stop()


def cmd_entries(args, open_repo: Callable, log_path: Callable) -> int:
    from gravfs.spark.tables import out_mode, tree_of, write_entries
    with open_repo(args) as repo:
        tree_of(repo, args.ref)  # a missing ref fails before the JVM starts
        mode = out_mode(repo, args.out)
        with _session(args, log_path, "gravfs entries", "") as spark:
            res = write_entries(spark, repo, args.ref, args.out, mode)
    if args.json:
        print(json.dumps(res, sort_keys=True))
    else:
        print(f"Wrote {res['entries']} entries of {res['commit'][:12]} ({res['ranges']} ranges) "
              f"to {res['out']} in {res['seconds']:.1f}s")
    return 0


def cmd_export(args, open_repo: Callable, log_path: Callable) -> int:
    from gravfs.spark.export import check_export, run_export
    t0 = time.monotonic()
    with open_repo(args) as repo:
        job = check_export(repo, args.ref, args.dest, args.since)  # before the JVM starts
        if job.done:
            res = job.summary()
        else:
            with _session(args, log_path, "gravfs export",
                          "; run the same command again to resume") as spark:
                res = run_export(spark, repo, job)
    secs = time.monotonic() - t0
    if args.json:
        print(json.dumps({**res, "seconds": round(secs, 3)}, sort_keys=True))
    elif job.done:
        print(f"{args.dest} already holds the export of {res['commit'][:12]}: nothing to do")
    else:
        since = f" since {res['since'][:12]}" if res.get("since") else ""
        print(f"Exported {res['commit'][:12]}{since} to {args.dest}: {res['copied']} copied, "
              f"{res['present']} already there, {res['deleted']} deleted, {res['skipped']} "
              f"skipped ({res['bytes_copied']} bytes, {res['ranges_read']} of "
              f"{res['ranges']} ranges read, {secs:.1f}s)")
    return 0
