"""Build and run the pjdfstest POSIX suite (../shared/third_party) against a directory.

The suite's ``.t`` files are shell scripts printing TAP; they are run here one
process each, a few at a time (they mostly sleep: ctime checks wait a second),
from a fresh directory on the filesystem under test, and their TAP is parsed
into (file, test number) -> passed. A test a script planned but never printed
(it died) counts as failed. Used by tests/fuse/test_pjdfstest.py; runnable by
hand: ``python -m tests.fuse.pjdfstest DIR`` prints per-directory counts for
the filesystem holding DIR.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TARBALL = os.environ.get("GRAVFS_PJDFSTEST_TARBALL") or os.path.join(
    os.path.dirname(ROOT), "shared", "third_party", "pjdfstest-85a8aea.tar.gz")
SCRIPT_TIMEOUT = 600  # seconds for one .t file (rename/09.t runs ~2,000 checks)

_TAP = re.compile(rb"^(not )?ok (\d+)")
_PLAN = re.compile(rb"^1\.\.(\d+)")


def build(dest: str, tarball: str = TARBALL) -> str:
    """Unpack and compile pjdfstest under dest; returns its source tree (with tests/)."""
    src = os.path.join(dest, "pjdfstest")
    if os.path.exists(os.path.join(src, "pjdfstest")):
        return src
    subprocess.run(["tar", "xzf", tarball, "-C", dest], check=True)
    for cmd in (["autoreconf", "-ifs"], ["./configure"], ["make", "pjdfstest"]):
        res = subprocess.run(cmd, cwd=src, capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"pjdfstest build: {' '.join(cmd)} failed:\n{res.stdout[-2000:]}"
                               f"\n{res.stderr[-2000:]}")
    return src


@dataclass
class Results:
    """Outcome of every planned test: {(script, number): (passed, message)}."""

    tests: dict = field(default_factory=dict)
    seconds: float = 0.0

    def failed(self) -> dict:
        return {k: v[1] for k, v in self.tests.items() if not v[0]}

    @property
    def total(self) -> int:
        return len(self.tests)

    @property
    def passed(self) -> int:
        return sum(1 for ok, _ in self.tests.values() if ok)

    def per_directory(self) -> dict[str, tuple[int, int]]:
        """{directory: (passed, total)}."""
        out: dict[str, list[int]] = {}
        for (script, _n), (ok, _msg) in self.tests.items():
            d = out.setdefault(script.split("/")[0], [0, 0])
            d[0] += ok
            d[1] += 1
        return {k: (v[0], v[1]) for k, v in sorted(out.items())}


def scripts(src: str) -> list[str]:
    """Every test script, as 'dir/NN.t', sorted."""
    tests = os.path.join(src, "tests")
    out = []
    for d in sorted(os.listdir(tests)):
        if os.path.isdir(os.path.join(tests, d)):
            out += [f"{d}/{t}" for t in sorted(os.listdir(os.path.join(tests, d)))
                    if t.endswith(".t")]
    return out


def parse_tap(script: str, out: bytes) -> dict:
    planned = 0
    seen: dict = {}
    for line in out.splitlines():
        m = _PLAN.match(line)
        if m:
            planned = int(m.group(1))
            continue
        m = _TAP.match(line)
        if m:
            ok = m.group(1) is None or b"# TODO" in line  # a TODO is the suite's own pass
            seen[(script, int(m.group(2)))] = (ok, line.decode(errors="replace"))
    for n in range(1, planned + 1):
        seen.setdefault((script, n), (False, "not run (the script stopped)"))
    if not seen:
        seen[(script, 0)] = (False, "no TAP output")
    return seen


def run_script(src: str, script: str, workdir: str) -> dict:
    """Run one .t file from a fresh directory under workdir (removed afterwards)."""
    cwd = os.path.join(workdir, "t-" + uuid.uuid4().hex[:12])
    os.mkdir(cwd)
    env = dict(os.environ, LC_ALL="C")
    try:
        res = subprocess.run(["/bin/sh", os.path.join(src, "tests", script)], cwd=cwd, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             timeout=SCRIPT_TIMEOUT)
        out = res.stdout
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"") + b"\nnot ok 0 - timed out\n"
    finally:
        shutil.rmtree(cwd, ignore_errors=True)
    return parse_tap(script, out)


def run_suite(src: str, workdir: str, jobs: int = 4, only: list[str] | None = None) -> Results:
    import time
    t = time.monotonic()
    res = Results()
    names = [s for s in scripts(src) if not only or s.split("/")[0] in only or s in only]
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        for part in pool.map(lambda s: run_script(src, s, workdir), names):
            res.tests.update(part)
    res.seconds = time.monotonic() - t
    return res


def table(results: dict[str, Results]) -> str:
    """Per-directory 'passed/total' for each filesystem, side by side."""
    names = list(results)
    dirs = sorted({d for r in results.values() for d in r.per_directory()})
    rows = [["directory", *names]]
    for d in dirs:
        rows.append([d, *(_frac(results[n].per_directory().get(d)) for n in names)])
    rows.append(["total", *(f"{r.passed}/{r.total}" for r in results.values())])
    rows.append(["seconds", *(f"{r.seconds:.0f}" for r in results.values())])
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w[i]) for i, c in enumerate(r)) for r in rows)


def _frac(pt) -> str:
    return "-" if pt is None else f"{pt[0]}/{pt[1]}"


if __name__ == "__main__":
    target = sys.argv[1]
    only = sys.argv[2:] or None
    build_dir = os.environ.get("PJDFSTEST_BUILD") or tempfile.mkdtemp(prefix="pjdfstest-")
    src = build(build_dir)
    r = run_suite(src, target, only=only)
    for (script, n), msg in sorted(r.failed().items()):
        print(f"FAIL {script} {n}: {msg}")
    print(table({"fs": r}))
