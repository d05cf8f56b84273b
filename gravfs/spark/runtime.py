"""The Spark runtime of gravfs's pipelines: one in-process SparkSession.

``local[*]`` unless a master is given. Executors of a cluster do not have
gravfs installed, so for any non-local master the package is zipped and
added with ``addPyFile`` (its dependencies must be importable by the
executors' Python: ``spark.pyspark.python``, by default this interpreter).
Spark's own log stays at WARN unless asked for more. No Java, or a Spark
that does not start, is one GravfsError line, never a JVM traceback.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import zipfile
from typing import Iterable, Optional

import gravfs
from gravfs import logtail
from gravfs.errors import GravfsError
from gravfs.keyvalue import parse_pairs

log = logging.getLogger(__name__)

DEFAULT_MASTER = "local[*]"


class SparkStartError(GravfsError):
    """Spark could not start (no Java, a bad master, a JVM that exited)."""


class SparkJobError(GravfsError):
    """A Spark job failed: a task failed after its retries, or the context died."""


def parse_conf(items: Iterable[str]) -> list[tuple[str, str]]:
    """``K=V`` strings (as given to --conf) -> pairs; a malformed one is a GravfsError."""
    return parse_pairs(items, "--conf")


_LOCAL = re.compile(r"local(\[(\d+|\*)(\s*,\s*\d+)?\]|-cluster\[\s*\d+\s*,\s*\d+\s*,\s*\d+\s*\])?")


def check_master(master: str) -> None:
    """Refuse a master URL Spark would refuse, before its JVM starts: spark-submit
    prints a Java stack trace, and pyspark then reports only that its gateway exited."""
    if master.startswith("local"):
        ok = _LOCAL.fullmatch(master) is not None
    else:
        ok = master == "yarn" or master.startswith(("spark://", "k8s://"))
    if not ok:
        raise SparkStartError(f"{master!r} is not a Spark master URL (local, local[N], "
                              "local[*], local[N,F], spark://HOST:PORT, yarn or "
                              "k8s://https://HOST:PORT)")


def is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[")


def java_available() -> bool:
    """True when Spark can find a java binary (JAVA_HOME or PATH), as spark-class looks."""
    home = os.environ.get("JAVA_HOME")
    if home:
        return os.access(os.path.join(home, "bin", "java"), os.X_OK)
    return shutil.which("java") is not None


def package_zip(dest_dir: str) -> str:
    """Zip the gravfs package (Python sources only) into dest_dir; returns the zip's path."""
    root = os.path.dirname(os.path.abspath(gravfs.__file__))
    path = os.path.join(dest_dir, "gravfs.zip")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            # directory entries: zipimport finds packages without __init__.py only by them
            z.writestr(os.path.join("gravfs", os.path.relpath(dirpath, root), "").replace(
                "/./", "/"), b"")
            for name in sorted(filenames):
                if name.endswith(".py"):
                    full = os.path.join(dirpath, name)
                    z.write(full, os.path.join("gravfs", os.path.relpath(full, root)))
    return path


# Spark's log is rotated as a mount's is: every job of years of cron runs appends to
# it (a failed task's traceback is tens of KiB), on the state dir's disk
LOG_BYTES = 32 << 20
LOG_KEPT = 4  # spark.log.1 the newest

_LOG4J = """\
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = file
appender.file.type = RollingFile
appender.file.name = file
appender.file.fileName = {path}
appender.file.filePattern = {path}.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = {size}
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = {kept}
appender.file.strategy.fileIndex = min
"""


def log_to_file(path: str, level: str, dest_dir: str) -> tuple[str, str]:
    """The --conf item that sends the driver JVM's log (local executors included) to
    ``path`` at ``level``: a log4j2 configuration written into dest_dir."""
    props = os.path.join(dest_dir, f"spark-log4j2-{level.lower()}.properties")
    tmp = f"{props}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write(_LOG4J.format(level=level.lower(), path=path, size=LOG_BYTES, kept=LOG_KEPT))
    os.replace(tmp, props)  # concurrent runs write the same bytes
    return "spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{props}"


def _scratch() -> str:
    """A directory for this process's Spark files, removed at exit."""
    path = tempfile.mkdtemp(prefix="gravfs-spark-")
    atexit.register(shutil.rmtree, path, True)
    return path


def start_session(master: Optional[str] = None, conf: Iterable[tuple[str, str]] = (),
                  verbose: int = 0, app_name: str = "gravfs", log_file: Optional[str] = None,
                  command: bool = False):
    """A SparkSession for gravfs's jobs (see the module doc); raises SparkStartError.

    ``log_file``: Spark's log goes there instead of stderr (the CLI's terminal
    keeps gravfs's own lines only; a failed task's traceback is in the file).
    ``command``: the session of one CLI command, which takes Ctrl-C from PySpark
    (``_take_interrupts``); a notebook's or a library user's session keeps PySpark's.
    """
    master = master or DEFAULT_MASTER
    check_master(master)
    if not java_available():
        raise SparkStartError("Spark needs Java (17 or later): none found on PATH or in "
                              "JAVA_HOME")
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise SparkStartError("pyspark is not installed (pip install pyspark)") from None
    level = "WARN" if verbose == 0 else "INFO" if verbose == 1 else "DEBUG"
    given = {"spark.master": master, "spark.app.name": app_name,
             "spark.ui.showConsoleProgress": "false", "spark.log.level": level, **dict(conf)}
    if log_file is not None:
        k, v = log_to_file(log_file, level, os.path.dirname(log_file))
        given[k] = f"{given[k]} {v}" if k in given else v
    if "spark.pyspark.python" in given:  # pyspark's driver reads only the environment
        os.environ["PYSPARK_PYTHON"] = given["spark.pyspark.python"]
    elif "PYSPARK_PYTHON" not in os.environ:
        # the workers run this interpreter (gravfs's venv), not whatever python3 PATH finds
        os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = SparkSession.builder
    for k, v in given.items():
        builder = builder.config(k, v)
    log.info("starting Spark (master %s)", master)
    command = command and threading.current_thread() is threading.main_thread()
    if command:
        _quiet_py4j(verbose)
    start = logtail.size(log_file)
    try:
        if log_file is not None:
            _start_jvm_logging_to(log_file, given)
        spark = builder.getOrCreate()
    except Exception as exc:  # py4j/pyspark raise many kinds; all mean "did not start"
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        said = _jvm_said(log_file, start)
        notes = ([f"the JVM said: {said[:300]}"] if said else []) + (
            [f"Spark's log: {log_file}"] if log_file is not None else [])
        raise SparkStartError(f"Spark did not start (master {master}): "
                              f"{first[:300].rstrip('.')}"
                              f"{' (' + '; '.join(notes) + ')' if notes else ''}") from exc
    spark.sparkContext.setLogLevel(level)
    if command:
        _take_interrupts(spark.sparkContext)
    if not is_local(master):
        ship_package(spark)
    return spark


def _start_jvm_logging_to(log_file: str, conf: dict) -> None:
    """Start the driver's JVM as the session would, with its standard error in
    ``log_file``: the JVM writes there what log4j does not carry (a warning on every
    start of Java 17+, "Using incubator modules", and a crash's last words)."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    with SparkContext._lock:
        if SparkContext._gateway is not None:  # a session of this process runs already
            return
        spark_conf = SparkConf(loadDefaults=False).setAll(conf.items())
        with open(log_file, "ab") as err:  # the JVM keeps its own descriptor
            SparkContext._gateway = launch_gateway(spark_conf, popen_kwargs={"stderr": err})
        SparkContext._jvm = SparkContext._gateway.jvm


# a line of the log4j layout above ("yy/MM/dd HH:mm:ss LEVEL ..."), not the JVM's own
_LOG4J_LINE = re.compile(r"\d\d/\d\d/\d\d \d\d:\d\d:\d\d ")
# the lines of a Java exception a log4j record carries (%ex): its class, causes, frames
_EXCEPTION_LINE = re.compile(r"(at |Caused by|Suppressed|\.\.\. \d+ more|[\w.$]+(Exception|Error)\b)")


def _jvm_said(log_file: Optional[str], start: int) -> str:
    """The first line the JVM itself wrote to ``log_file`` past ``start`` (why it
    did not start: a bad option, too little memory), or ''."""
    in_record = False  # inside a log4j record: its exception's lines follow it
    for line in logtail.lines_since(log_file, start):
        if _LOG4J_LINE.match(line):
            in_record = True
            continue
        said = line.strip()
        if not said:
            continue
        if in_record and (line[0].isspace() or _EXCEPTION_LINE.match(said)):
            continue
        in_record = False
        if not said.startswith("WARNING: Using incubator modules"):
            return said
    return ""


# py4j's own lines when a call to the JVM is interrupted or the JVM is gone (it logs them
# on the root logger, with tracebacks): gravfs reports the failure in one line, and
# Spark's log has the rest
_PY4J_NOISE = ("KeyboardInterrupt while sending command.", "Exception while sending command.")


class _Py4jNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() not in _PY4J_NOISE


_quiet = _Py4jNoise()
_landed = threading.Event()
_interrupted = threading.Event()


def landed() -> None:
    """The job's result is in place (a commit landed): an interrupt from now on no longer
    stops the command, which would report it interrupted when it was not undone (a
    command's session only: see start_session)."""
    _landed.set()


def _quiet_py4j(verbose: int) -> None:
    logging.getLogger().addFilter(_quiet)
    if verbose < 2:
        logging.getLogger("py4j").setLevel(logging.CRITICAL)


def _take_interrupts(sc) -> None:
    """Ctrl-C: cancel the session's jobs from a thread of its own and interrupt the main
    thread, which the CLI reports in one line. PySpark's handler cancelled them from
    inside the signal handler, on the JVM connection the interrupted main thread was
    reading: py4j printed some 80 lines of errors and tracebacks."""
    def cancel():
        try:
            sc.cancelAllJobs()
        except Exception:  # the session may be gone (a terminal's Ctrl-C reaches the JVM)
            log.debug("cancelling Spark's jobs failed", exc_info=True)

    def handler(signum, frame):
        if _landed.is_set():
            log.warning("interrupted after the result landed: finishing")
            return
        _interrupted.set()
        threading.Thread(target=cancel, name="gravfs-cancel", daemon=True).start()
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)


def ship_package(spark) -> str:
    """Add gravfs, zipped, to the session's Python path on every executor; returns the zip."""
    path = package_zip(_scratch())
    spark.sparkContext.addPyFile(path)
    log.info("shipped gravfs to the executors as %s", path)
    return path


_PY_ERROR = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt)): (.+)$")
# a JVM exception in py4j's text: ": org.apache.hadoop.fs.UnsupportedFileSystemException: ..."
_JAVA_ERROR = re.compile(
    r"^(?::\s*|Caused by:\s*)?(?:[a-z_]\w*\.)+([A-Z]\w*(?:Exception|Error)): (.+)$")


def job_failed(exc: BaseException, what: str) -> BaseException:
    """One line for a Spark job that failed (a task failed after its retries, or the
    context died): the Python error the task raised if there is one, else the
    first line of Spark's message. After a Ctrl-C, the interrupt itself: py4j, cleaning
    up the interrupted call, may raise an error of its own in its place."""
    if _interrupted.is_set():
        return KeyboardInterrupt()
    text = str(exc)
    found = None
    for line in text.splitlines():
        m = _PY_ERROR.match(line.strip())
        if m and "py4j" not in m.group(1) and "org.apache" not in m.group(1):
            found = m
    if found is not None:
        name = found.group(1).rsplit(".", 1)[-1]
        detail = found.group(2) if name == "GravfsError" or "gravfs" in found.group(1) \
            else f"{name}: {found.group(2)}"
    else:
        lines = [l.strip() for l in text.strip().splitlines()]
        java = next((m for m in map(_JAVA_ERROR.match, lines) if m), None)
        # "An error occurred while calling o60.parquet." says nothing without its cause
        detail = f"{java.group(1)}: {java.group(2)}" if java is not None \
            else (lines or [type(exc).__name__])[0]
    return SparkJobError(f"{what} failed: {detail[:400]}")
