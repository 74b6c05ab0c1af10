"""docs/TUTORIAL.md, executed: every fenced `sh` command runs, in order, in one bash process in a fresh empty
directory, and must exit with the code the tutorial gives (`# exit N` at the end of the line, else 0); every
fenced block with `file=NAME` in its info string is written to NAME first, exactly as shown. `$DRIFTCHECK` is a
stand-in checkout whose build/fuzz/driftcheck is the built binary (DRIFTCHECK_BIN) and whose python/ is this
package, so the commands run as a reader types them."""

import os
import re
import shlex
import subprocess
import sys
import tempfile
import unittest

import harness

BIN = os.environ.get("DRIFTCHECK_BIN")
TUTORIAL = os.path.join(harness.REPO, "docs", "TUTORIAL.md")
FENCE = re.compile(r"^```(.*)$")
EXIT = re.compile(r"\s+#\s*exit\s+(\d+)\s*$")
EOF_MARK = "DRIFTCHECK_TUTORIAL_EOF"


def steps(text):
    """[("file", name, content) | ("run", command, expected exit code)] in document order."""
    out, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        info = m.group(1).split()
        body = []
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1
        name = next((w[len("file="):] for w in info if w.startswith("file=")), None)
        if name is not None:
            out.append(("file", name, "\n".join(body) + "\n"))
        elif info and info[0] == "sh":
            command = ""
            for line in body:
                command += line[:-1] + " " if line.endswith("\\") else line
                if line.endswith("\\"):
                    continue
                if command.strip():
                    m_exit = EXIT.search(command)
                    out.append(("run", command.strip(), int(m_exit.group(1)) if m_exit else 0))
                command = ""
        else:
            raise AssertionError(f"TUTORIAL.md: a fenced block ({' '.join(info) or 'no info'}) that is neither "
                                 "sh commands nor a file=NAME: the test would not run it")
    return out


def script(parsed):
    """One bash script: files written, commands run, each exit code checked; stops at the first mismatch."""
    s = ["set -u"]
    for n, step in enumerate(parsed):
        if step[0] == "file":
            _, name, content = step
            assert EOF_MARK not in content
            s.append(f"mkdir -p {shlex.quote(os.path.dirname(name) or '.')}")
            s.append(f"cat > {shlex.quote(name)} <<'{EOF_MARK}'\n{content}{EOF_MARK}")
            continue
        _, command, expected = step
        s.append(f"echo {shlex.quote('$ ' + command)}")
        s.append(command)
        s.append(f"rc=$?; if [ $rc -ne {expected} ]; then echo \"TUTORIAL step {n}: exit $rc, the tutorial says "
                 f"{expected}: \"{shlex.quote(command)}; exit 97; fi")
    s.append("echo TUTORIAL-COMPLETE")
    return "\n".join(s) + "\n"


class Parsing(unittest.TestCase):
    def test_commands_files_and_exit_codes_are_found(self):
        with open(TUTORIAL) as f:
            parsed = steps(f.read())
        runs = [s for s in parsed if s[0] == "run"]
        files = {s[1] for s in parsed if s[0] == "file"}
        self.assertGreaterEqual(len(runs), 12)
        self.assertTrue({"rmsnorm_kernel.py", "backends.toml", "driftcheck.toml"} <= files, files)
        self.assertGreaterEqual(sum(1 for s in runs if s[2] == 1), 3)
        self.assertIn(("run", "driftcheck gate --config driftcheck.toml  # exit 1", 1), runs)

    def test_a_wrong_exit_code_fails_the_script(self):
        with tempfile.TemporaryDirectory() as d:
            text = "```sh\ntrue\nfalse  # exit 1\nfalse\necho unreachable\n```\n"
            p = subprocess.run(["bash", "-c", script(steps(text))], cwd=d, capture_output=True, text=True)
            self.assertEqual(p.returncode, 97)
            self.assertIn("TUTORIAL step 2: exit 1, the tutorial says 0", p.stdout)
            self.assertNotIn("unreachable", p.stdout)


@unittest.skipUnless(BIN, "DRIFTCHECK_BIN is not set (CTest sets it to the built driftcheck)")
class Tutorial(unittest.TestCase):
    def test_every_command_runs_with_its_exit_code(self):
        with open(TUTORIAL) as f:
            body = script(steps(f.read()))
        with tempfile.TemporaryDirectory(prefix="dc-tutorial-") as root:
            checkout = os.path.join(root, "driftcheck")
            os.makedirs(os.path.join(checkout, "build", "fuzz"))
            os.symlink(os.path.abspath(BIN), os.path.join(checkout, "build", "fuzz", "driftcheck"))
            os.symlink(harness.PACKAGE_ROOT, os.path.join(checkout, "python"))
            work = os.path.join(root, "my-kernel")
            os.makedirs(work)
            env = {k: v for k, v in os.environ.items() if k not in ("DRIFTCHECK_BACKENDS", "PYTHONPATH")}
            env["DRIFTCHECK"] = checkout
            # `python3` in the backends file must be an interpreter with NumPy: this one (Debian's, in CTest).
            env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
            p = subprocess.run(["bash", "-c", body], cwd=work, env=env, capture_output=True, text=True, timeout=1500)
            log = (p.stdout + p.stderr)[-6000:]
            self.assertEqual(p.returncode, 0, log)
            self.assertIn("TUTORIAL-COMPLETE", p.stdout, log)
            self.assertTrue(os.path.exists(os.path.join(work, "ci", "baseline.json")))
            corpus = [e for e in os.listdir(os.path.join(work, "ci", "corpus")) if e != "CORPUS.json"]
            self.assertTrue(corpus, "the broken kernel's minimal case went into the corpus")


if __name__ == "__main__":
    unittest.main()
