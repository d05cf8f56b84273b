"""The Spark runtime through the CLI: start, errors, log level, a standalone cluster.

Every bad input is one line on stderr and a non-zero exit with nothing
committed. The standalone cluster (a master and a worker started with
Spark's own spark-class on loopback) runs the import with gravfs shipped to
the executor as a zip.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from gravfs.fs.repository import Repository
from tests.repo_util import small_settings
from tests.spark.test_import import make_tree

pytestmark = pytest.mark.spark

SPARK_CONF = ["--conf", "spark.ui.enabled=false", "--conf", "spark.driver.memory=1g"]


@pytest.fixture
def env(tmp_path):
    store, state = str(tmp_path / "store"), str(tmp_path / "state")
    Repository.init(store, state, settings=small_settings()).close()
    src = str(tmp_path / "src")
    os.makedirs(src)
    make_tree(src, dirs=4, files=20)
    return store, state, src


def run_cli(*args, store: str, state: str, check: bool = True, **env):
    """``python -m gravfs.cli ARGS`` with extra environment; (rc, stdout, stderr)."""
    e = dict(os.environ, GRAVFS_STORE=store, GRAVFS_STATE_DIR=state, **env)
    e.pop("GRAVFS_DEBUG", None)
    p = subprocess.run([sys.executable, "-m", "gravfs.cli", *args], env=e, capture_output=True,
                       timeout=300)
    out, err = p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
    if check and p.returncode != 0:
        raise AssertionError(f"gravfs {' '.join(args)} failed ({p.returncode}): {err}")
    return p.returncode, out, err


def _head(store, state, branch="main") -> str:
    with Repository.open(store, state) as r:
        return r.head(branch, fresh=True)


def _one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("gravfs: ")]
    assert len(lines) == 1, err
    assert "Traceback" not in err, err
    return lines[0]


def test_import_cli_json_and_quiet_spark_log(env):
    store, state, src = env
    run_cli("branch", "create", "single", store=store, state=state)
    run_cli("import", "-q", src, "single:x", store=store, state=state)
    rc, out, err = run_cli("spark", "import", src, "main:x", "-m", "bulk", "--master", "local[2]",
                           "--partitions", "3", "--json", *SPARK_CONF, store=store, state=state)
    res = json.loads(out)
    assert res["entries"] == 4 * 22 + 2 and res["partitions"] == 3
    # the JVM's own standard error goes to Spark's log too (Java 17+ said "WARNING:
    # Using incubator modules: jdk.incubator.vector" on the terminal at every start)
    assert err == "", err
    rc, out, err = run_cli("diff", "single", "main", store=store, state=state)
    assert out.strip() == "no differences"
    rc, out, err = run_cli("log", "main", store=store, state=state)
    assert "bulk" in out


def test_no_java(env):
    store, state, src = env
    head = _head(store, state)
    rc, out, err = run_cli("spark", "import", src, "main", *SPARK_CONF, store=store, state=state,
                           check=False, JAVA_HOME="/nonexistent")
    assert rc != 0
    assert _one_line(err) == ("gravfs: Spark needs Java (17 or later): none found on PATH or in "
                              "JAVA_HOME")
    assert _head(store, state) == head


def test_spark_that_does_not_start(env):
    store, state, src = env
    head = _head(store, state)
    # a master URL of the right form that Spark refuses once started
    rc, out, err = run_cli("spark", "import", src, "main", "--master", "local[0]", *SPARK_CONF,
                           store=store, state=state, check=False)
    assert rc != 0
    line = _one_line(err)
    assert line.startswith("gravfs: Spark did not start (master local[0]): "), line
    assert _head(store, state) == head


def test_a_jvm_that_does_not_start_is_named_by_its_own_words(env):
    """Its standard error is in Spark's log: the error line quotes why it stopped."""
    store, state, src = env
    rc, out, err = run_cli("spark", "import", src, "main", "--conf", "spark.driver.memory=1x",
                           store=store, state=state, check=False)
    line = _one_line(err)
    assert rc == 1 and line.startswith("gravfs: Spark did not start (master local[*]): "), line
    assert "(the JVM said: Invalid maximum heap size: -Xmx1x; Spark's log: " \
        f"{os.path.join(state, 'logs', 'spark.log')})" in line, line


def test_bad_inputs_fail_before_spark(env, tmp_path):
    store, state, src = env
    cases = [
        (["spark", "import", src, "nosuch"], "gravfs: branch 'nosuch' not found"),
        (["spark", "import", str(tmp_path / "missing"), "main"], "missing: no such file or directory"),
        (["spark", "import", "/etc/hostname", "main"], "/etc/hostname: not a directory"),
        (["spark", "import", src, "main", "--conf", "novalue"], "--conf needs KEY=VALUE"),
        (["spark", "import", src, "main", "--partitions", "0"], "--partitions must be at least 1"),
        (["-s", str(tmp_path / "nostore"), "spark", "import", src, "main"], "no gravfs repository"),
        (["spark", "import", src, "main:a/../b"], "path a/../b contains '..'"),
        # spark-submit printed a Java stack trace, then gravfs "its gateway exited"
        (["spark", "import", src, "main", "--master", "bogus[2]"],
         "'bogus[2]' is not a Spark master URL (local, local[N], local[*]"),
        (["spark", "index", "--master", "local[x]"], "'local[x]' is not a Spark master URL"),
    ]
    for argv, want in cases:
        rc, out, err = run_cli(*argv, store=store, state=state, check=False)
        assert rc != 0, argv
        assert want in _one_line(err), (argv, err)
        assert len(err.strip().splitlines()) == 1, (argv, err)  # no JVM started to say more


def test_master_urls_checked_before_the_jvm():
    """The forms Spark takes pass; others are refused without starting a JVM."""
    from gravfs.spark.runtime import SparkStartError, check_master

    for good in ("local", "local[4]", "local[*]", "local[2,3]", "local[*, 4]",
                 "local-cluster[2,1,1024]", "spark://h1:7077,h2:7077", "yarn",
                 "k8s://https://api:443"):
        check_master(good)
    for bad in ("locale", "local[]", "local[x]", "local[2", "mesos://h:5050", "Yarn",
                "h:7077", "local-cluster[2]"):
        with pytest.raises(SparkStartError, match="is not a Spark master URL"):
            check_master(bad)


def test_task_failing_after_retries(env):
    """Uploads fail on the executors: one line naming the store error, nothing committed."""
    store, state, src = env
    head = _head(store, state)
    rc, out, err = run_cli("spark", "import", src, "main", "--master", "local[2]", *SPARK_CONF,
                           store=store, state=state, check=False,
                           GRAVFS_STORE_FAULT="op=upload|put,key=data/*,mode=fail")
    assert rc != 0
    line = _one_line(err)
    assert line.startswith(f"gravfs: importing {src} failed: "), line
    assert "injected" in line or "unavailable" in line.lower(), line
    assert _head(store, state) == head


def test_ctrl_c_is_one_line_commits_nothing_and_leaves_no_jvm(env, tmp_path):
    """SIGINT to the command's process group (a terminal's Ctrl-C) while the tasks copy
    files: "gravfs: interrupted" and exit 130, without py4j's errors and tracebacks
    (PySpark's handler called the JVM from inside the signal handler); no process of
    the group is left; the branch is as it was and the next run imports."""
    store, state, _ = env
    src = str(tmp_path / "big")
    make_tree(src, dirs=40, files=300)
    head = _head(store, state)
    e = dict(os.environ, GRAVFS_STORE=store, GRAVFS_STATE_DIR=state)
    p = subprocess.Popen([sys.executable, "-m", "gravfs.cli", "spark", "import", src, "main",
                          "--master", "local[2]", *SPARK_CONF], env=e, start_new_session=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        def copying() -> bool:  # a task has uploaded a file: the job is running
            return p.poll() is not None or any(
                f.startswith(".gravfs-tmp") or len(f) == 64
                for _, _, fs in os.walk(os.path.join(store, "data")) for f in fs)
        deadline = time.monotonic() + 240
        while not copying() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.killpg(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=120)
    finally:
        p.kill()
        p.wait()
    err = err.decode("utf-8", "replace")
    assert p.returncode == 130, err
    assert [ln for ln in err.splitlines() if "incubator" not in ln] == ["gravfs: interrupted"], err
    deadline = time.monotonic() + 60  # the JVM's shutdown hooks may take a moment
    while subprocess.run(["pgrep", "-s", str(p.pid)], capture_output=True).returncode == 0:
        assert time.monotonic() < deadline, "a process of the command outlived it"
        time.sleep(0.2)
    assert _head(store, state) == head
    run_cli("spark", "import", src, "main", "--master", "local[2]", *SPARK_CONF,
            store=store, state=state)
    assert _head(store, state) != head


def test_a_jvm_error_is_named_by_its_exception(spark):
    """py4j's first line ("An error occurred while calling o60.parquet.") says nothing;
    the JVM exception under it does."""
    from gravfs.spark.runtime import job_failed
    with pytest.raises(Exception) as e:
        spark.range(1).write.parquet("nosuchscheme://bucket/x")
    assert str(job_failed(e.value, "writing x")) == (
        'writing x failed: UnsupportedFileSystemException: No FileSystem for scheme '
        '"nosuchscheme"')


# --- standalone cluster ------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(pred, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


@pytest.fixture
def standalone(tmp_path):
    """A Spark standalone master and one worker (1 core) on loopback."""
    import pyspark

    spark_class = os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class")
    port = _free_port()
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_WORKER_DIR=str(tmp_path / "work"),
               PYSPARK_PYTHON=sys.executable)
    logs = {n: open(tmp_path / f"{n}.log", "wb") for n in ("master", "worker")}
    procs = [subprocess.Popen([spark_class, "org.apache.spark.deploy.master.Master", "--host",
                               "127.0.0.1", "--port", str(port), "--webui-port", "0"],
                              env=env, stdout=logs["master"], stderr=subprocess.STDOUT)]
    url = f"spark://127.0.0.1:{port}"
    procs.append(subprocess.Popen([spark_class, "org.apache.spark.deploy.worker.Worker", url,
                                   "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                                   "--webui-port", "0"],
                                  env=env, stdout=logs["worker"], stderr=subprocess.STDOUT))
    try:
        _wait_for(lambda: b"Successfully registered with master"
                  in (tmp_path / "worker.log").read_bytes(), "the worker to register")
        yield url
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for f in logs.values():
            f.close()


def test_standalone_cluster_ships_gravfs(env, standalone, tmp_path):
    store, state, src = env
    code = f"""
import json, sys
from gravfs.fs.repository import Repository
from gravfs.spark import import_tree, start_session
spark = start_session({standalone!r}, [("spark.ui.enabled", "false"),
                      ("spark.driver.host", "127.0.0.1"), ("spark.driver.bindAddress", "127.0.0.1"),
                      ("spark.executor.memory", "512m"), ("spark.driver.memory", "512m")])
def where(_):
    import gravfs
    yield gravfs.__file__
files = spark.sparkContext.parallelize([0], 1).mapPartitions(where).collect()
with Repository.open({store!r}, {state!r}) as repo:
    res = import_tree(spark, repo, {src!r}, "main", "x", partitions=2)
spark.stop()
print(json.dumps({{"files": files, "entries": res.files}}))
"""
    run_cli("branch", "create", "single", store=store, state=state)
    run_cli("import", "-q", src, "single:x", store=store, state=state)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=300,
                       cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr.decode()[-3000:]
    res = json.loads(p.stdout.decode().strip().splitlines()[-1])
    assert all("gravfs.zip" in f for f in res["files"]), res  # the shipped package
    assert res["entries"] == 4 * 22 + 2
    rc, out, err = run_cli("diff", "single", "main", store=store, state=state)
    assert out.strip() == "no differences"


def test_sparks_log_file_is_rotated(tmp_path):
    """Spark's log (<state dir>/logs/spark.log) was one file every job appended to for
    good; it rolls over at LOG_BYTES and keeps LOG_KEPT, as a mount's log does."""
    log_file = str(tmp_path / "logs" / "spark.log")
    os.makedirs(os.path.dirname(log_file))
    code = f"""
import sys
sys.path.insert(0, {os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))!r})
from gravfs.spark import runtime
runtime.LOG_BYTES, runtime.LOG_KEPT = 4000, 2
spark = runtime.start_session("local[1]", [("spark.ui.enabled", "false")], log_file={log_file!r})
logger = spark.sparkContext._jvm.org.apache.logging.log4j.LogManager.getLogger("gravfs-test")
for i in range(60):
    logger.warn("line %03d " % i + "x" * 200)
spark.stop()
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    names = sorted(n for n in os.listdir(os.path.dirname(log_file)) if n.startswith("spark.log"))
    assert names == ["spark.log", "spark.log.1", "spark.log.2"], names
    sizes = [os.path.getsize(os.path.join(os.path.dirname(log_file), n)) for n in names]
    assert all(s <= 4000 + 300 for s in sizes), sizes
    with open(log_file) as f:
        assert "line 059" in f.read()  # the newest lines in the file in use
