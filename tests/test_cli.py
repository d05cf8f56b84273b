"""The command line as users run it: output, exit codes, one-line errors."""

import json
import os
import subprocess
import sys

import pytest

from tests.repo_util import run_cli


@pytest.fixture
def cli(tmp_path):
    store, state = str(tmp_path / "store"), str(tmp_path / "state")

    def run(*args, **kw):
        return run_cli(*args, store=store, state=state, **kw)

    run("init")
    return run


@pytest.fixture
def s3_cli(tmp_path, s3_server, monkeypatch):
    """The CLI on SeaweedFS, configured the way a user would: URL + AWS environment."""
    if s3_server.proc is None or s3_server.proc.poll() is not None:
        s3_server.start()
    monkeypatch.setenv("GRAVFS_S3_ENDPOINT", s3_server.endpoint_url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
    store = f"s3://{s3_server.bucket}/cli-{tmp_path.name}"
    state = str(tmp_path / "state")

    def run(*args, **kw):
        return run_cli(*args, store=store, state=state, **kw)

    run("init")
    return run


def test_full_workflow_on_s3(s3_cli, tmp_path):
    test_full_workflow(s3_cli, tmp_path)


def test_full_workflow(cli, tmp_path):
    src = tmp_path / "src"
    (src / "logs" / "2026").mkdir(parents=True)
    (src / "logs" / "2026" / "a.log").write_text("alpha\n")
    (src / "README").write_text("readme\n")
    (src / "empty").mkdir()
    (src / "link").symlink_to("README")
    _, out, _ = cli("import", str(src), "main:raw", "-m", "first import")
    assert "Imported 4 file(s)" in out
    _, out, _ = cli("ls", "main:raw")
    lines = out.splitlines()
    assert len(lines) == 4
    assert lines[0].endswith("  README") and lines[0].startswith(" 644")
    assert lines[1].endswith("  empty/") and lines[2].endswith("  link -> README")
    assert lines[3].endswith("  logs/")
    _, out, _ = cli("cat", "main:raw/logs/2026/a.log")
    assert out == "alpha\n"
    cli("branch", "create", "dev", "--from", "main")
    (tmp_path / "new.txt").write_text("new\n")
    cli("put", str(tmp_path / "new.txt"), "dev:raw/new.txt")
    _, out, _ = cli("status", "dev", "--json")
    assert json.loads(out) == [{"path": "raw/new.txt", "type": "added"}]
    cli("commit", "dev", "-m", "add new")
    _, out, _ = cli("diff", "main", "dev", "--json")
    assert [json.loads(l) for l in out.splitlines()] == [{"path": "raw/new.txt", "type": "added"}]
    cli("merge", "dev", "main")
    _, out, _ = cli("log", "main", "--json")
    log = [json.loads(l) for l in out.splitlines()]
    assert log[0]["message"] == "Merge dev into main" and len(log[0]["parents"]) == 2
    cid = log[0]["id"]
    _, out, _ = cli("cat", f"{cid[:8]}:raw/new.txt")
    assert out == "new\n"
    cli("tag", "create", "v1", "main")
    _, out, _ = cli("cat", "v1:raw/README")
    assert out == "readme\n"
    _, out, _ = cli("fsck")
    assert "clean" in out
    cli("rm", "main:raw/README")
    cli("reset", "main")
    _, out, _ = cli("status", "main")
    assert "nothing to commit" in out


def test_compact_says_what_it_did(cli, tmp_path):
    """compact: a compaction, staged changes dropped because they leave the head as it
    is (a file put and removed again), or nothing staged at all."""
    (tmp_path / "f").write_bytes(b"x")
    assert cli("compact", "main")[1] == "Nothing to compact on main\n"
    cli("put", str(tmp_path / "f"), "main:a")
    assert cli("compact", "main")[1] == "Compacted staging of main\n"
    cli("commit", "main", "-m", "a")
    cli("put", str(tmp_path / "f"), "main:b")
    cli("rm", "main:b")
    assert cli("compact", "main")[1] == ("Dropped the staged changes of main: they leave "
                                         "its head as it is (nothing to commit)\n")
    assert cli("status", "main")[1] == "On branch main: nothing to commit\n"
    assert cli("compact", "main")[1] == "Nothing to compact on main\n"


@pytest.mark.parametrize("args,code,needle", [
    (("cat", "main:nope"), 2, "no such file"),
    (("cat", "nobranch:x"), 2, "not found"),
    (("branch", "create", "bad name"), 4, "invalid branch name"),
    (("branch", "create", "main"), 3, "already exists"),
    (("commit", "main", "-m", "x"), 1, "nothing to commit"),
    (("merge", "main", "main"), 1, "into itself"),
    (("put", "/no/such/file", "main:x"), 2, "/no/such/file: no such file or directory"),
    (("put", "/", "main:x"), 1, "/: is a directory (gravfs import stages a directory tree)"),
    (("compact", "nosuch"), 2, "branch 'nosuch' not found"),
    (("import", "/no/such/dir", "main:x"), 2, "/no/such/dir: no such file or directory"),
    (("import", "/etc/hostname", "main:x"), 1, "/etc/hostname: not a directory"),
    (("cat", "main:"), 1, "/: is a directory"),
    (("commit", "main", "-m", "x", "--meta", "foo"), 1, "--meta needs KEY=VALUE, got 'foo'"),
    (("commit", "main", "-m", "x", "--meta", "=v"), 1, "--meta needs KEY=VALUE, got '=v'"),
    (("commit", "main", "-m", "x", "--meta", "a=1", "--meta", "a=2"), 1,
     "--meta a given twice: give each key once"),
    (("log", "main~5"), 2, "main~5: history of main has only 1 commit"),
    (("log", "main", "-n", "-1"), 1, "-n must not be negative, got -1"),
])
def test_errors_are_one_line(cli, args, code, needle):
    rc, out, err = cli(*args, check=False)
    assert rc == code, (rc, err)
    assert needle in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_missing_store_is_a_clear_error(tmp_path):
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "GRAVFS_STORE"}
    p = subprocess.run([sys.executable, "-m", "gravfs.cli", "branch", "list"], env=env,
                       capture_output=True, text=True)
    assert p.returncode != 0 and "no store given" in p.stderr


def test_help_reads_well():
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-m", "gravfs.cli", "--help"], capture_output=True, text=True)
    assert p.returncode == 0
    for cmd in ["init", "branch", "tag", "import", "put", "rm", "cat", "ls", "status", "commit",
                "log", "diff", "merge", "revert", "cherry-pick", "reset", "fsck", "mount",
                "umount", "sst-dump"]:
        assert cmd in p.stdout


def test_global_options_also_after_the_command(tmp_path):
    import subprocess
    import sys
    store = str(tmp_path / "s")
    env = {"PATH": "/usr/bin:/bin", "GRAVFS_STATE_DIR": str(tmp_path / "st")}
    run = lambda *a: subprocess.run([sys.executable, "-m", "gravfs.cli", *a], env=env,  # noqa: E731
                                    capture_output=True, text=True)
    assert run("init", "-s", store).returncode == 0
    p = run("branch", "list", "-s", store)
    assert p.returncode == 0 and p.stdout.startswith("main\t")
    p = run("-s", store, "log", "main", "-n", "1", "--json")
    assert p.returncode == 0 and "Repository created" in p.stdout


# -- how names are printed (issue 9) -------------------------------------------------------

FORGING = ["evil\n   added  forged", "tab\there", 'q"uote', "back\\slash", "bell\x07",
           "esc\x1b[31mred", "bidi\u202eevil"]


def _raw_cli(tmp_path, *args) -> bytes:
    import os
    import subprocess
    import sys
    env = dict(os.environ, GRAVFS_STORE=str(tmp_path / "store"),
               GRAVFS_STATE_DIR=str(tmp_path / "state"))
    p = subprocess.run([sys.executable, "-m", "gravfs.cli", *args], env=env,
                       capture_output=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return p.stdout


def _put_names(cli, tmp_path, names, branch="main"):
    (tmp_path / "f").write_text("x")
    for n in names:
        cli("put", str(tmp_path / "f"), f"{branch}:{n}")


def test_names_cannot_forge_lines_of_status_diff_ls_and_errors(cli, tmp_path):
    """Names with newlines and control characters were printed raw: one row per entry,
    each name quoted as git quotes it (valid UTF-8 such as "é" printed as is)."""
    names = FORGING + ["héllo", "plain name"]
    _put_names(cli, tmp_path, names)
    expected = {'"evil\\n   added  forged"', '"tab\\there"', '"q\\"uote"', '"back\\\\slash"',
                '"bell\\a"', '"esc\\033[31mred"', '"bidi\\342\\200\\256evil"', "héllo",
                "plain name"}
    _, out, _ = cli("status", "main")
    rows = out.splitlines()
    assert len(rows) == len(names) and all(r.startswith("   added  ") for r in rows)
    assert {r[len("   added  "):] for r in rows} == expected
    cli("commit", "main", "-m", "names")
    _, out, _ = cli("diff", "main~1", "main")
    assert {r[len("   added  "):] for r in out.splitlines()} == expected
    _, out, _ = cli("ls", "main")
    assert {r.split("  ", 2)[-1].split("UTC  ")[-1] for r in out.splitlines()} == expected
    rc, _, err = cli("cat", "main:nope\nline two", check=False)
    assert rc == 2 and err.count("\n") == 1 and '"nope\\nline two"' in err
    _, out, _ = cli("put", str(tmp_path / "f"), "main:new\nname")
    assert out.count("\n") == 1 and '"new\\nname"' in out


def test_messages_and_authors_reach_the_terminal_without_control_sequences(cli, tmp_path):
    """Another user's commit message or author was printed raw: an escape sequence in it
    cleared the reader's screen. Now such characters are escaped (as in quoted names),
    every line of a message is indented as git does, --json keeps the text as written."""
    src = tmp_path / "f"
    src.write_bytes(b"1")
    cli("put", str(src), "main:f")
    message = "evil\x1b[2J\x07\rline\nsecond\tline\n\u202eabc"
    _, out, _ = cli("commit", "main", "-m", message, "--author", "a\x1b[31mred")
    assert out.endswith(": evil\\033[2J\\a\\rline\n")
    _, out, _ = cli("log", "main", "-n", "1")
    assert "\x1b" not in out and "\r" not in out and "\u202e" not in out
    assert "Author: a\\033[31mred\n" in out
    assert "\n\n    evil\\033[2J\\a\\rline\n    second\tline\n    \\342\\200\\256abc\n" in out
    _, out, _ = cli("log", "main", "-n", "1", "--json")
    assert json.loads(out)["message"] == message
    _, out, _ = cli("log", "main", "--", "f")
    assert "\x1b" not in out and "    second\tline" in out


def test_log_of_a_directory_lists_what_changed_under_it(cli, tmp_path):
    (tmp_path / "f").write_text("f")
    for path, message in (("d/a", "first"), ("e", "elsewhere"), ("d/sub/b", "deeper")):
        cli("put", str(tmp_path / "f"), f"main:{path}")
        cli("commit", "main", "-m", message)
    _, out, _ = cli("log", "main", "--", "d/")
    assert [line.strip() for line in out.splitlines() if line.startswith("    ")] == \
        ["deeper", "modified: d/", "first", "added: d/"]


def test_ref_names_read_as_they_are(cli, tmp_path):
    """A name that is not UTF-8 made the branch, then failed with an internal error; a
    bidi override or a line separator made a name read otherwise. Both are refused;
    such a name an older gravfs made is listed quoted, and can be deleted."""
    rc, _, err = cli("branch", "create", "bad\udcff", check=False)
    assert rc == 4 and "not valid UTF-8" in err and "internal error" not in err
    rc, _, err = cli("tag", "create", "v\u202e1", "main", check=False)
    assert rc == 4 and "U+202E" in err
    _, out, _ = cli("branch", "list")
    assert [r.split("\t")[0] for r in out.splitlines()] == ["main"]
    head = json.loads(cli("branch", "list", "--json")[1])[0]["commit"]
    refs = tmp_path / "store" / "_gravfs" / "refs" / "tags"
    refs.mkdir(parents=True, exist_ok=True)
    (refs / "v\u202e1").write_text(head + "\n")  # as an older gravfs made it
    _, out, _ = cli("tag", "list")
    assert out.split("\t")[0] == '"v\\342\\200\\2561"'
    _, out, _ = cli("tag", "delete", "v\u202e1")
    assert out == 'Deleted tag "v\\342\\200\\2561"\n'


def test_put_says_the_path_it_staged(cli, tmp_path):
    """Repeated and leading slashes name the same key, and the message shows that key."""
    (tmp_path / "f").write_text("x")
    _, out, _ = cli("put", str(tmp_path / "f"), "main:/a//b.txt")
    assert out.strip() == "Staged main:a/b.txt (1 bytes)"
    _, out, _ = cli("ls", "main:a")
    assert out.split()[-1] == "b.txt"


def test_put_with_its_arguments_swapped_says_so(cli, tmp_path):
    """A destination without BRANCH: is refused before anything is read or staged,
    naming the argument; with LOCAL looking like the destination, the message says the
    two look swapped (it used to say only "put needs BRANCH:PATH")."""
    (tmp_path / "f.csv").write_text("x")
    rc, _, err = cli("put", "main:f.csv", str(tmp_path / "f.csv"), check=False)
    assert rc == 1
    assert err.strip() == (f"gravfs: put needs BRANCH:PATH as its destination, got "
                           f"{str(tmp_path / 'f.csv')!r} (usage: gravfs put LOCAL "
                           f"BRANCH:PATH; the arguments look swapped)")
    rc, _, err = cli("put", str(tmp_path / "f.csv"), "f.csv", check=False)
    assert (rc, err.strip()) == (1, "gravfs: put needs BRANCH:PATH as its destination, "
                                    "got 'f.csv'")
    _, out, _ = cli("status", "main")
    assert "f.csv" not in out


def test_put_into_a_directory_keeps_the_files_name(cli, tmp_path):
    """DEST ending in '/' is a directory, as for cp or aws s3 cp: the file goes in under
    its own name (before, "main:a/" staged a file named a); a file there is an error."""
    (tmp_path / "f.csv").write_text("x")
    _, out, _ = cli("put", str(tmp_path / "f.csv"), "main:a/")
    assert out.strip() == "Staged main:a/f.csv (1 bytes)"
    _, out, _ = cli("put", str(tmp_path / "f.csv"), "main:a/")  # a directory now
    assert out.strip() == "Staged main:a/f.csv (1 bytes)"
    _, out, _ = cli("put", str(tmp_path / "f.csv"), "main:/")
    assert out.strip() == "Staged main:f.csv (1 bytes)"
    rc, _, err = cli("put", str(tmp_path / "f.csv"), "main:f.csv/", check=False)
    assert (rc, err.strip()) == (10, "gravfs: f.csv/: not a directory")
    rc, _, err = cli("put", "-", "main:a/", input=b"x", check=False)
    assert rc == 1 and "needs a file name" in err


def test_put_reads_a_pipe_or_character_device_to_its_end(cli, tmp_path):
    """A pipe a shell hands over (``<(zcat f.gz)``, a FIFO) and a character device
    (``/dev/null``) are read as ``-`` is; a socket is refused, a directory is pointed
    at ``gravfs import``."""
    import socket

    sent = os.urandom(300_000)  # more than a pipe's buffer
    (tmp_path / "sent").write_bytes(sent)
    env = dict(os.environ, GRAVFS_STORE=str(tmp_path / "store"),
               GRAVFS_STATE_DIR=str(tmp_path / "state"))
    p = subprocess.run(["bash", "-c", f'"{sys.executable}" -m gravfs.cli put '
                        f'<(cat "{tmp_path / "sent"}") main:piped'], env=env,
                       capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.decode().strip() == "Staged main:piped (300000 bytes)"
    _, out, _ = cli("put", "/dev/null", "main:empty")
    assert out.strip() == "Staged main:empty (0 bytes)"
    cli("commit", "main", "-m", "from a pipe")
    assert subprocess.run([sys.executable, "-m", "gravfs.cli", "cat", "main:piped"], env=env,
                          capture_output=True, timeout=120).stdout == sent
    _, out, _ = cli("ls", "main")
    assert [ln.split()[:2] for ln in out.splitlines()] == [["644", "0"], ["644", "300000"]]
    holder = socket.socket(socket.AF_UNIX)
    try:
        holder.bind(str(tmp_path / "sock"))
        rc, _, err = cli("put", str(tmp_path / "sock"), "main:s", check=False)
    finally:
        holder.close()
    assert (rc, err.strip()) == (1, f"gravfs: {tmp_path / 'sock'}: not a regular file, pipe "
                                    "or character device")
    assert cli("status", "main")[1] == "On branch main: nothing to commit\n"


def test_rm_of_a_directory_names_the_option_that_removes_it(cli, tmp_path):
    (tmp_path / "f").write_text("x")
    cli("put", str(tmp_path / "f"), "main:d/x")
    rc, _, err = cli("rm", "main:d", check=False)
    assert rc == 10 and err == "gravfs: d: directory not empty (rm -r removes it with its " \
        "contents)\n", err
    rc, _, err = cli("rm", "main:/", check=False)  # the root is named, not an empty name
    assert rc == 10 and err.startswith("gravfs: /: directory not empty"), err
    cli("rm", "-r", "main:d")
    rc, _, err = cli("ls", "main:d", check=False)
    assert rc == 2, err


def test_diff_of_paths(cli, tmp_path):
    """``diff A B -- PATH...``: changes at and under each PATH, not of a name PATH begins."""
    (tmp_path / "f").write_text("x")
    for p in ("d/a", "d/b", "d.txt", "dd/c", "e/f"):
        cli("put", str(tmp_path / "f"), f"main:{p}")
    cli("commit", "main", "-m", "one")
    (tmp_path / "f").write_text("y")
    for p in ("d/a", "d.txt", "dd/c", "e/f", "d/new"):
        cli("put", str(tmp_path / "f"), f"main:{p}")
    cli("rm", "main:d/b")
    cli("commit", "main", "-m", "two")
    _, out, _ = cli("diff", "main~1", "main", "--", "d", "e/f")
    assert out.splitlines() == [" changed  d/a", " removed  d/b", "   added  d/new",
                                " changed  e/f"]
    _, out, _ = cli("diff", "--json", "main~1", "main", "--", "d/b")
    assert [json.loads(l) for l in out.splitlines()] == [{"path": "d/b", "type": "removed"}]
    _, out, _ = cli("diff", "main~1", "main", "--", "nosuch")
    assert out == "no differences\n"
    assert len(cli("diff", "main~1", "main", "--", "/")[1].splitlines()) == 6
    # status takes paths the same way, also over a compacted staging
    cli("put", str(tmp_path / "f"), "main:d/c")
    cli("put", str(tmp_path / "f"), "main:dd/e")
    cli("rm", "main:e/f")
    for compacted in (False, True):
        if compacted:
            cli("compact", "main")
        assert cli("status", "main", "--", "d", "e")[1].splitlines() == [
            "   added  d/c", " removed  e/f"]
        assert cli("status", "main", "--", "nosuch")[1] == \
            "On branch main: nothing to commit\n"
        assert len(cli("status", "main")[1].splitlines()) == 3


@pytest.mark.parametrize("unbuffered", ["1", ""])
def test_every_command_says_when_standard_output_fails(tmp_path, unbuffered):
    """A full disk behind stdout read "gravfs: No space left on device", as if the
    repository were full (cat), or, with Python's usual buffered stdout, "Exception
    ignored ... OSError" and exit 120 (ls, log, status: the write failed at exit); a
    reader that stops early (head) is not an error."""
    store, state = str(tmp_path / "store"), str(tmp_path / "state")
    run_cli("init", store=store, state=state)
    (tmp_path / "f").write_bytes(os.urandom(300_000))
    for i in range(3000):  # a listing longer than a pipe's buffer
        (tmp_path / "src" / f"d{i % 3}").mkdir(parents=True, exist_ok=True)
        (tmp_path / "src" / f"d{i % 3}" / f"file-{i:05d}").write_bytes(b"%d" % i)
    run_cli("import", "-q", str(tmp_path / "src"), "main", store=store, state=state)
    run_cli("put", str(tmp_path / "f"), "main:f", store=store, state=state)
    env = dict(os.environ, GRAVFS_STORE=store, GRAVFS_STATE_DIR=state,
               PYTHONUNBUFFERED=unbuffered)
    for args in (["cat", "main:f"], ["ls", "main:d0"], ["log", "main"], ["status", "main"],
                 ["ls", "-z", "main:d1"], ["diff", "main~1", "main"]):
        with open("/dev/full", "wb") as full:
            p = subprocess.run([sys.executable, "-m", "gravfs.cli", *args], env=env,
                               stdout=full, stderr=subprocess.PIPE, text=True, timeout=300)
        assert (p.returncode, p.stderr) == (
            1, "gravfs: writing to standard output: No space left on device\n"), args
        reader = subprocess.Popen(["head", "-c", "10"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE)
        p = subprocess.run([sys.executable, "-m", "gravfs.cli", *args], env=env,
                           stdout=reader.stdin, stderr=subprocess.PIPE, text=True, timeout=300)
        reader.stdin.close()
        assert len(reader.stdout.read()) == 10 and reader.wait() == 0
        assert (p.returncode, p.stderr) == (0, ""), args


def test_merge_conflict_names_are_quoted(cli, tmp_path):
    _put_names(cli, tmp_path, ["c\nx"])
    cli("commit", "main", "-m", "base")
    cli("branch", "create", "dev")
    (tmp_path / "g").write_text("main side")
    cli("put", str(tmp_path / "g"), "main:c\nx")
    cli("commit", "main", "-m", "main side")
    (tmp_path / "g").write_text("dev side")
    cli("put", str(tmp_path / "g"), "dev:c\nx")
    cli("commit", "dev", "-m", "dev side")
    rc, out, err = cli("merge", "dev", "main", check=False)
    assert rc == 6 and err.count("\n") == 1 and '"c\\nx"' in err
    assert out == 'conflict  "c\\nx"\n'  # every conflicting path, one a line


def test_merge_lists_every_conflict(cli, tmp_path):
    """The error line names ten; stdout has them all, one a line, to resolve or script."""
    (tmp_path / "f").write_text("base")
    names = [f"d/f{i:02d}" for i in range(25)]
    for n in names:
        cli("put", str(tmp_path / "f"), f"main:{n}")
    cli("commit", "main", "-m", "base")
    cli("branch", "create", "dev")
    for side in ("main", "dev"):
        (tmp_path / "f").write_text(side)
        for n in names:
            cli("put", str(tmp_path / "f"), f"{side}:{n}")
        cli("commit", side, "-m", side)
    rc, out, err = cli("merge", "dev", "main", check=False)
    assert rc == 6 and err.strip().endswith("d/f09 and 15 more"), err
    assert out.splitlines() == [f"conflict  {n}" for n in names]
    # a revert's conflicts too: main~1 changed what main changed again
    (tmp_path / "f").write_text("again")
    cli("put", str(tmp_path / "f"), "main:d/f03")
    cli("commit", "main", "-m", "again")
    rc, out, err = cli("revert", "main", "main~1", check=False)
    assert rc == 6 and out == "conflict  d/f03\n", (out, err)


def test_commands_that_write_a_branch_refuse_a_tag_or_a_commit(cli, tmp_path):
    """Each says the ref is not a branch (as put does), not "branch not found"."""
    (tmp_path / "f").write_text("x")
    cli("put", str(tmp_path / "f"), "main:f")
    cli("commit", "main", "-m", "c")
    cli("tag", "create", "v1", "main")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "g").write_text("g")
    for args in (["commit", "v1", "-m", "x"], ["reset", "v1"], ["merge", "main", "v1"],
                 ["revert", "v1", "main"], ["import", "-q", str(tmp_path / "src"), "v1:x"],
                 ["put", str(tmp_path / "f"), "v1:x"]):
        rc, _, err = cli(*args, check=False)
        assert (rc, err) == (9, "gravfs: 'v1' is not a branch; commits and tags are "
                                "read-only\n"), args
    # status and compact read or tidy a branch's staging: "branch 'v1' not found" before;
    # a ref expression or a commit id prefix is a commit too
    head = cli("log", "main", "--json")[1].split('"id": "')[1][:12]
    for ref in ("v1", "main~1", head):
        for args in (["status", ref], ["compact", ref], ["commit", ref, "-m", "x"]):
            rc, _, err = cli(*args, check=False)
            assert (rc, err) == (9, f"gravfs: {ref!r} is not a branch; commits and tags are "
                                    "read-only\n"), args
    rc, _, err = cli("merge", "main", "main", check=False)
    assert (rc, err) == (1, "gravfs: cannot merge branch 'main' into itself\n")
    for args in (["commit", "nope", "-m", "x"], ["status", "nope"], ["compact", "nope"],
                 ["commit", "abcdef12", "-m", "x"]):  # (hex, yet no such commit either)
        rc, _, err = cli(*args, check=False)
        assert (rc, err) == (2, f"gravfs: branch {args[1]!r} not found\n"), args


def test_an_empty_commit_message_is_refused_unless_allowed(cli, tmp_path):
    """As git and lakectl: a blank message was committed without a word (log showed
    nothing to tell the commit by)."""
    (tmp_path / "f").write_text("f")
    cli("put", str(tmp_path / "f"), "main:f")
    for message in ("", "  \n "):
        rc, _, err = cli("commit", "main", "-m", message, check=False)
        assert (rc, err) == (1, "gravfs: empty commit message: say what the commit changes "
                                "(-m MESSAGE), or pass --allow-empty-message\n")
    assert "added  f" in cli("status", "main")[1]  # nothing lost
    _, out, _ = cli("commit", "main", "-m", "", "--allow-empty-message")
    assert out.startswith("Committed ") and cli("status", "main")[1].startswith("On branch main: nothing")


def test_revert_of_a_merge_takes_its_parent(cli, tmp_path):
    (tmp_path / "f").write_text("f")
    cli("branch", "create", "dev")
    cli("put", str(tmp_path / "f"), "dev:f")
    cli("commit", "dev", "-m", "f")
    cli("put", str(tmp_path / "f"), "main:g")
    cli("commit", "main", "-m", "g")
    cli("merge", "dev", "main")
    rc, _, err = cli("revert", "main", "main", check=False)
    assert rc == 1 and "is a merge commit (parents 1 " in err and "--parent N" in err, err
    _, out, _ = cli("revert", "main", "main", "--parent", "1")
    assert out.startswith("Reverted main on main: commit ")
    assert [line.split()[-1] for line in cli("ls", "main:")[1].splitlines()] == ["g"]
    # and back: the merge's change again, picked against the same parent
    merge = json.loads(cli("log", "main~1", "-n", "1", "--json")[1])["id"]
    _, out, _ = cli("cherry-pick", "main", merge, "--parent", "1")
    assert out.startswith(f"Cherry-picked {merge} onto main: commit ")
    assert [line.split()[-1] for line in cli("ls", "main:")[1].splitlines()] == ["f", "g"]
    rc, _, err = cli("cherry-pick", "main", merge, "--parent", "1", check=False)
    assert rc == 1 and "nothing to commit: cherry-picking " in err, err


def test_z_and_json_give_names_raw(cli, tmp_path):
    bad = b"bad\xffutf".decode("utf-8", "surrogateescape")  # not UTF-8: a surrogate here
    names = FORGING + ["héllo", bad]
    _put_names(cli, tmp_path, names)
    raw = {n.encode("utf-8", "surrogateescape") for n in names}
    out = _raw_cli(tmp_path, "status", "main", "-z")
    assert out.endswith(b"\0")
    assert {r.split(b"\t", 1)[1] for r in out[:-1].split(b"\0")} == raw
    assert {r.split(b"\t", 1)[0] for r in out[:-1].split(b"\0")} == {b"added"}
    rows = json.loads(_raw_cli(tmp_path, "status", "main", "--json"))
    assert {r["path"].encode("utf-8", "surrogateescape") for r in rows} == raw
    import base64
    assert [base64.b64decode(r["path_b64"]) for r in rows if "path_b64" in r] == [b"bad\xffutf"]
    cli("commit", "main", "-m", "names")
    out = _raw_cli(tmp_path, "diff", "main~1", "main", "-z")
    assert {r.split(b"\t", 1)[1] for r in out[:-1].split(b"\0")} == raw
    rows = [json.loads(l) for l in _raw_cli(tmp_path, "diff", "main~1", "main", "--json").splitlines()]
    assert {r["path"].encode("utf-8", "surrogateescape") for r in rows} == raw
    out = _raw_cli(tmp_path, "ls", "main", "-z")
    assert set(out[:-1].split(b"\0")) == raw
    rows = [json.loads(l) for l in _raw_cli(tmp_path, "ls", "main", "--json").splitlines()]
    assert {r["path"].encode("utf-8", "surrogateescape") for r in rows} == raw


def test_ls_and_cat_reach_keys_another_writer_made(tmp_path):
    """`gravfs ls` shows foreign keys escaped (text, -z) and raw with why (--json);
    `gravfs cat` reads them by the escaped name."""
    from gravfs.fs.repository import Repository
    from tests.foreign_util import FOREIGN_KEYS, commit_keys
    repo = Repository.init(str(tmp_path / "store"), str(tmp_path / "state"))
    commit_keys(repo, "main", FOREIGN_KEYS)
    repo.close()
    out = _raw_cli(tmp_path, "ls", "main").decode()
    shown = [r.split()[-1] for r in out.splitlines()]
    assert [s for s in shown if not s.startswith("long")] == [
        "%2Fabs", "a/", "d/", "nul%00x", "trail%2F"]
    assert _raw_cli(tmp_path, "cat", "main:nul%00x") == b"nul byte"
    assert _raw_cli(tmp_path, "cat", "main:d/%2E%2E/up") == b"dot-dot"
    assert b"%2Fabs\0" in _raw_cli(tmp_path, "ls", "main", "-z")
    rows = {json.loads(l)["path"]: json.loads(l)
            for l in _raw_cli(tmp_path, "ls", "main", "--json").splitlines()}
    assert rows["nul\x00x"]["shown"] == "nul%00x" and "NUL" in rows["nul\x00x"]["foreign"]
    assert rows["trail/"]["shown"] == "trail%2F" and "foreign" not in rows["a"]


def test_error_messages_quote_local_paths(cli, tmp_path):
    bad = str(tmp_path / "no\nsuch")
    for args in [("put", bad, "main:x"), ("sst-dump", bad)]:
        rc, _, err = cli(*args, check=False)
        assert rc != 0 and err.count("\n") == 1 and "no\\nsuch" in err, err
    (tmp_path / "a\nfile").write_text("not a directory")
    rc, _, err = cli("init", str(tmp_path / "a\nfile" / "store"), check=False)  # an OSError
    assert rc == 1 and err.count("\n") == 1 and "a\\nfile" in err, err


def test_a_commit_to_a_read_only_store_names_the_store_and_keeps_the_staging(cli, tmp_path):
    from tests.repo_util import read_only
    (tmp_path / "f").write_text("staged")
    cli("put", str(tmp_path / "f"), "main:f")
    with read_only(str(tmp_path / "store")) as ro:
        (tmp_path / "g").write_text("new content")
        for args in [("commit", "main", "-m", "m"), ("put", str(tmp_path / "g"), "main:g")]:
            rc, _, err = cli(*args, check=False)
            assert rc == 1 and err.count("\n") == 1, err  # no warning about temp files
            assert err.startswith(f"gravfs: {ro}/") and "Read-only file system" in err, err
    assert "added  f" in cli("status", "main")[1]
    cli("commit", "main", "-m", "m")
    assert cli("cat", "main:f")[1] == "staged"


def test_ls_lists_a_page_at_a_time_as_one_listing(tmp_path, monkeypatch):
    """Pages of LS_PAGE names give what one listing gives, also when a page ends between
    a file and a directory of one name (object-store data: listed once, as the
    directory)."""
    from gravfs import cli as cli_module
    from gravfs.fs.entry import KIND_FILE, EntryInfo
    from gravfs.fs.repository import Repository

    with Repository.init(str(tmp_path / "store"), str(tmp_path / "state")) as repo:
        a, n = repo.data.put_bytes(b"x")
        e = EntryInfo(address=a, size=n, mtime_ns=1, kind=KIND_FILE)
        keys = [b"d/%02d" % i for i in range(9)] + [b"d/04/in", b"d/07/in", b"d/zz"]
        repo.stage("main", [(k, e) for k in keys])
        whole = [(x.kind, x.fs_name) for x in repo.list_dir("main", "d")]
        assert ("dir", b"04") in whole and ("file", b"04") not in whole
        for page in (1, 2, 3, 4, 5, 100):
            monkeypatch.setattr(cli_module, "LS_PAGE", page)
            got = [(x.kind, x.fs_name) for x in cli_module._listing(repo, "main", "d")]
            assert got == whole, page


def test_closed_standard_input_or_output_is_said(cli, tmp_path):
    """``put - <&-`` and ``cat >&-``: Python has no stream then (an internal error was
    printed); nothing is staged."""
    store, state = str(tmp_path / "store"), str(tmp_path / "state")
    env = dict(os.environ, GRAVFS_STORE=store, GRAVFS_STATE_DIR=state)
    (tmp_path / "f").write_text("x")
    cli("put", str(tmp_path / "f"), "main:f")
    for args, fd, what in ((["put", "-", "main:g"], 0, "input"), (["cat", "main:f"], 1, "output"),
                           (["ls", "-z", "main"], 1, "output")):
        p = subprocess.run([sys.executable, "-m", "gravfs.cli", *args], env=env,
                           stderr=subprocess.PIPE, preexec_fn=lambda fd=fd: os.close(fd),
                           timeout=120)
        assert (p.returncode, p.stderr.decode()) == (1, f"gravfs: standard {what} is closed\n")
    assert cli("status", "main")[1] == "   added  f\n"
    # what any command prints is an error with stdout closed (status printed nothing, exit 0)
    for args in (["status", "main"], ["branch", "list"]):
        p = subprocess.run([sys.executable, "-m", "gravfs.cli", *args], env=env,
                           stderr=subprocess.PIPE, preexec_fn=lambda: os.close(1), timeout=120)
        assert (p.returncode, p.stderr.decode()) == (1, "gravfs: standard output is closed\n")
    # with stderr closed an error goes nowhere (Python's print sent it into stdout)
    p = subprocess.run([sys.executable, "-m", "gravfs.cli", "cat", "main:nope"], env=env,
                       stdout=subprocess.PIPE, preexec_fn=lambda: os.close(2), timeout=120)
    assert (p.returncode, p.stdout) == (2, b"")


def test_names_an_ascii_terminal_cannot_show_are_escaped(cli, tmp_path):
    """With a locale (or PYTHONIOENCODING) that cannot encode a name, ls and status
    failed with an internal error (exit 70); they print it escaped, as stderr does."""
    store, state = str(tmp_path / "store"), str(tmp_path / "state")
    (tmp_path / "f").write_text("x")
    cli("put", str(tmp_path / "f"), "main:héllo/wörld.txt")
    env = dict(os.environ, GRAVFS_STORE=store, GRAVFS_STATE_DIR=state, PYTHONIOENCODING="ascii")
    for args, want in ((["ls", "main:héllo"], "w\\xf6rld.txt\n"),
                       (["status", "main"], "   added  h\\xe9llo/w\\xf6rld.txt\n")):
        p = subprocess.run([sys.executable, "-m", "gravfs.cli", *args], env=env,
                           capture_output=True, timeout=120)
        assert p.returncode == 0 and p.stdout.decode("ascii").endswith(want), p


@pytest.mark.parametrize("args,missing", [(("status",), "branch"), (("log",), "ref"),
                                          (("diff", "main"), "REF2")])
def test_a_missing_argument_is_named_alone(cli, args, missing):
    """The paths after -- are optional: a usage error named them as required too
    ("required: branch, PATH")."""
    code, _, err = cli(*args, check=False)
    assert code == 2
    assert err.strip().splitlines()[-1].endswith(f"the following arguments are required: {missing}"), err


def test_a_commit_conflict_lists_its_paths_and_a_strategy_settles_it(tmp_path):
    """Two hosts' workspaces on one store change one path: the second commit lists it
    and says how to choose; --strategy staged-wins commits what that host shows."""
    store = str(tmp_path / "store")
    here, there = str(tmp_path / "state-a"), str(tmp_path / "state-b")
    run_cli("init", store=store, state=here)
    for state, data in ((here, b"from a\n"), (there, b"from b\n")):
        run_cli("put", "-", "main:shared.csv", input=data, store=store, state=state)
    run_cli("commit", "main", "-m", "a", store=store, state=here)
    code, out, err = run_cli("commit", "main", "-m", "b", store=store, state=there, check=False)
    assert code == 6 and out == "conflict  shared.csv\n", (out, err)
    assert "'gravfs commit main --strategy staged-wins' keeps yours" in err
    code, _, err = run_cli("commit", "main", "-m", "b", "--strategy", "mine", store=store,
                           state=there, check=False)
    assert code == 2 and "invalid choice: 'mine'" in err
    run_cli("commit", "main", "-m", "b", "--strategy", "staged-wins", store=store, state=there)
    assert run_cli("cat", "main:shared.csv", store=store, state=here)[1] == "from b\n"
    # head-wins where every change of yours met one of the head's: nothing to commit, said
    run_cli("put", "-", "main:shared.csv", input=b"again a\n", store=store, state=here)
    run_cli("put", "-", "main:shared.csv", input=b"again b\n", store=store, state=there)
    run_cli("commit", "main", "-m", "a2", store=store, state=here)
    code, _, err = run_cli("commit", "main", "-m", "b2", "--strategy", "head-wins", store=store,
                           state=there, check=False)
    assert code == 1 and "with the head's changes kept (head-wins), yours leave it" in err, err
    assert run_cli("status", "main", store=store, state=there)[1].startswith("On branch main: "
                                                                             "nothing to commit")
    assert run_cli("cat", "main:shared.csv", store=store, state=there)[1] == "again a\n"


def test_branch_delete_keeps_uncommitted_changes_unless_forced(cli, tmp_path):
    """The changes staged on this host would go with the branch (its commits stay
    readable by id): one line saying how to keep or drop them, nothing lost."""
    (tmp_path / "f").write_text("work in progress")
    cli("branch", "create", "dev")
    cli("put", str(tmp_path / "f"), "dev:wip")
    rc, out, err = cli("branch", "delete", "dev", check=False)
    assert (rc, out) == (1, "")
    assert err == ("gravfs: branch 'dev' has uncommitted changes on this host ('gravfs "
                   "status dev'): commit them or reset them first, or delete with --force, "
                   "which drops them\n")
    assert cli("cat", "dev:wip")[1] == "work in progress"
    assert cli("branch", "delete", "--force", "dev")[1] == "Deleted branch dev\n"
    assert "dev" not in cli("branch", "list")[1]
