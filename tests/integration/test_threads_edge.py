#!/usr/bin/env python3
# ctest-timeout: 900
"""The edge with --threads 2 (STUDIO_THREADS=2, the flag's environment
fallback): the edge-heavy integration files, each a real run of its own,
must pass unchanged with two worker loops.  Each file's exit status and
closing line are the verdict (a failing case inside fails this test).
"""
import os
import subprocess
import sys

import harness
from harness import check, log

t = harness.Tests()
HERE = os.path.dirname(os.path.abspath(__file__))
FILES = ["test_e2e_fanout.py", "test_e2e_two_writers.py", "test_resume_replay.py",
         "test_drain_streams.py"]


def run_with_threads(name):
    env = dict(os.environ, STUDIO_THREADS="2")
    p = subprocess.run([sys.executable, os.path.join(HERE, name)], env=env, capture_output=True,
                       text=True, timeout=800)
    tail = (p.stdout + p.stderr).strip().splitlines()[-15:]
    log("FIGURE --threads 2: %s -> exit %d, %s" % (name, p.returncode, tail[-1] if tail else ""))
    check(p.returncode == 0, "%s passes with --threads 2:\n%s" % (name, "\n".join(tail)))


for _name in FILES:
    def _case(_n=_name):
        run_with_threads(_n)
    _case.__name__ = "threads2_" + _name[:-3]
    t.case(_case)

t.main()
