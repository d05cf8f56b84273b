"""Command line of garbage collection: ``gravfs gc rules set|show`` and ``gravfs spark gc``.

The CLI hands over its subparsers and its repository opener, so nothing here
imports the CLI above it; Spark is loaded only when a run starts.
"""

from __future__ import annotations

import json
import os
import time
from typing import Callable


def add_gc_parser(sub, common, open_repo: Callable) -> None:
    """``gravfs gc rules set --default-days N [--branch NAME=DAYS ...]`` and ``... show``."""
    gp = sub.add_parser("gc", parents=[common], help="garbage collection: retention rules",
                        description="Retention rules of the garbage collector (run it with "
                        "'gravfs spark gc').")
    gs = gp.add_subparsers(dest="gc_command", metavar="COMMAND")
    gs.required = True
    rp = gs.add_parser("rules", parents=[common], help="set or show the retention rules")
    rs = rp.add_subparsers(dest="rules_action", metavar="ACTION")
    rs.required = True
    st = rs.add_parser("set", parents=[common], help="replace the retention rules",
                       description="Replace the repository's retention rules: a branch keeps "
                       "its head, the commits of its first-parent history dated within its "
                       "window and the first one older; tags keep their commit.")
    st.add_argument("--default-days", required=True, metavar="N",
                    help="days of history every branch keeps (0: only heads and tags)")
    st.add_argument("--branch", action="append", default=[], metavar="NAME=DAYS",
                    help="another window for one branch (repeatable)")
    st.set_defaults(func=lambda args: cmd_rules_set(args, open_repo))
    sh = rs.add_parser("show", parents=[common], help="print the retention rules")
    sh.add_argument("--json", action="store_true")
    sh.set_defaults(func=lambda args: cmd_rules_show(args, open_repo))


def cmd_rules_set(args, open_repo: Callable) -> int:
    from gravfs.version.retention import make_rules, parse_branch_rules, parse_days, save_rules
    default = parse_days(args.default_days, "--default-days")
    branches = parse_branch_rules(args.branch)
    with open_repo(args) as repo:
        rules = make_rules(default, branches, (n for n, _ in repo.list_branches()))
        save_rules(repo.store, rules)
    _print_rules(rules, as_json=False)
    return 0


def cmd_rules_show(args, open_repo: Callable) -> int:
    from gravfs.version.retention import load_rules
    with open_repo(args) as repo:
        rules = load_rules(repo.store)
        known = {n for n, _ in repo.list_branches()}
    if rules is None:
        if args.json:
            print("null")
        else:
            print("no retention rules (set them with 'gravfs gc rules set --default-days N')")
        return 0
    _print_rules(rules, args.json, known)
    return 0


def _print_rules(rules, as_json: bool, known=None) -> None:
    if as_json:
        print(json.dumps({"default_days": rules.default_days, "branches": rules.branches},
                         sort_keys=True))
        return
    print(f"default: {rules.default_days} day(s)")
    for name, days in sorted(rules.branches.items()):
        gone = " (no such branch now: unused)" if known is not None and name not in known else ""
        print(f"branch {name}: {days} day(s){gone}")


def add_gc_job(jobs, parents: list, open_repo: Callable, log_path: Callable) -> None:
    """``gravfs spark gc [--dry-run] [--min-age DURATION] [--report DIR] [--sweep-only RUN]``."""
    g = jobs.add_parser("gc", parents=parents, help="garbage collection by the retention rules",
                        description="Delete the data objects, ranges and metaranges no commit "
                        "kept by the retention rules (nor this host's staging) references, "
                        "older than the minimum age. The report is written first, under "
                        "_gravfs/gc/<run-id>/.")
    g.add_argument("--dry-run", action="store_true", help="write the report, delete nothing")
    g.add_argument("--min-age", default="24h", metavar="DURATION",
                   help="never delete anything younger (default 24h; 0 only for a store no "
                   "other host writes to)")
    g.add_argument("--report", metavar="DIR", help="also copy the report into DIR/<run-id>/")
    g.add_argument("--sweep-only", metavar="RUN_ID",
                   help="delete what the (finished) mark of an earlier run reported")
    g.set_defaults(func=lambda args: cmd_spark_gc(args, open_repo, log_path))


def cmd_spark_gc(args, open_repo: Callable, log_path: Callable) -> int:
    from gravfs.spark.gc import gc, parse_duration
    from gravfs.spark.progress import stage_progress
    from gravfs.spark.runtime import SparkJobError, parse_conf, start_session
    from gravfs.version.retention import RUN_ID, load_rules

    min_age = parse_duration(args.min_age)
    conf = parse_conf(args.conf)
    if args.report:  # before the mark, which may take hours: not after it
        _check_report_dir(args.report)
    with open_repo(args) as repo:
        if args.sweep_only:
            if not RUN_ID.match(args.sweep_only):
                from gravfs.errors import GravfsError
                raise GravfsError(f"--sweep-only: {args.sweep_only!r} is not a run id "
                                  "(YYYYMMDDTHHMMSSZ-xxxxxx)")
            from gravfs.spark.gc import check_sweepable
            check_sweepable(repo.store, args.sweep_only)  # before the JVM starts
        elif load_rules(repo.store) is None:  # before the JVM starts
            from gravfs.spark.gc import GcRefusedError
            raise GcRefusedError("no retention rules: set them first with 'gravfs gc rules "
                                 "set --default-days N'")
        log_file = None if args.verbose else log_path(args.state_dir)
        t0 = time.monotonic()
        spark = start_session(args.master, conf, args.verbose, app_name="gravfs gc",
                              log_file=log_file, command=True)
        try:
            with stage_progress(spark.sparkContext, enabled=not args.json):
                res = gc(spark, repo, dry_run=args.dry_run, min_age=min_age,
                         report_dir=args.report, sweep_only=args.sweep_only)
        except SparkJobError as exc:
            where = f" (Spark's log: {log_file})" if log_file else ""
            raise SparkJobError(f"{exc}{where}") from exc
        finally:
            spark.stop()
        secs = time.monotonic() - t0
    if args.json:
        print(json.dumps(res.to_json(), sort_keys=True))
        return 0
    print(f"gc run {res.run_id}: {res.state}{' (dry run)' if res.dry_run else ''} in {secs:.1f}s")
    if not args.sweep_only:
        print(f"  kept {res.kept_commits} commit(s), {res.metaranges} tree(s), {res.ranges} "
              f"range(s) ({res.ranges_read} read, the rest from the mark cache)")
        print(f"  live: {res.live_objects} object(s), {res.live_bytes} bytes; unreferenced but "
              f"younger than the minimum age: {res.young_objects}")
        print(f"  expired: {res.expired_objects} object(s), {res.expired_bytes} bytes "
              f"(report: _gravfs/gc/{res.run_id}/)")
    if not res.dry_run:
        print(f"  deleted: {res.deleted_objects} object(s), {res.deleted_bytes} bytes"
              + (f"; {res.refreshed_objects} kept, reused meanwhile" if res.refreshed_objects
                 else ""))
    return 0


def _check_report_dir(path: str) -> None:
    """--report's directory exists or can be made, and can be written."""
    from gravfs.errors import GravfsError
    if os.path.exists(path) and not os.path.isdir(path):
        raise GravfsError(f"--report: {path} is not a directory")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise GravfsError(f"--report: cannot make directory {path}: {exc.strerror}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise GravfsError(f"--report: cannot write to {path}")
