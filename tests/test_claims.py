"""The claims record (tests/claims.py) in a pytest session of its own, on one process and on two
xdist workers: a claim not judgeable fails unless the machine explains it, every outcome is in
claims.json, and the table says so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.claims_report import table

ROOT = Path(__file__).resolve().parent.parent

SESSION = '''
import pytest
from tests import claims

@pytest.fixture(scope="module")
def run():
    claims.not_exercised("failover across servers", "the killed broker held no topic")
    return 1

@pytest.mark.root
def test_judged(run):
    with claims.judge("latency median"):
        assert run == 1

def test_machine(run):
    claims.unjudged("downtime", "3 s the hypervisor held (steal 900 ms)", attributed_to_machine=True)

def test_ours(run):
    claims.unjudged("placement", "12 saturated seconds the machine does not explain", attributed_to_machine=False)

def test_env():
    pytest.skip("needs Containernet")

def test_wrong_judged():
    with claims.judge("a claim that fails"):
        assert False

@pytest.mark.fabricated_claims
def test_fabricated():
    claims.judged("a helper's own test")
    claims.not_exercised("a helper's own test", "fabricated run")
'''


@pytest.mark.parametrize("workers", [[], ["-n", "2", "--dist", "loadfile"]])
def test_every_claim_s_outcome_is_recorded_and_an_unexplained_one_fails(tmp_path, workers):
    (tmp_path / "test_session.py").write_text(SESSION)
    record = tmp_path / "claims.json"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                          "-c", os.devnull, "-p", "tests.claims", *workers, str(tmp_path / "test_session.py")],
                         capture_output=True, text=True, cwd=ROOT, timeout=120,
                         env={**os.environ, "CLAIMS_JSON": str(record), "PYTHONPATH": str(ROOT)})
    assert "2 failed, 2 passed, 2 skipped" in run.stdout, run.stdout[-2000:] + run.stderr[-2000:]
    got = {(r["test"].split("::")[-1], r["claim"], r["status"]) for r in json.loads(record.read_text())["claims"]}
    assert got == {("test_judged", "failover across servers", "not exercised"), ("test_judged", "latency median", "judged"),
                   ("test_wrong_judged", "a claim that fails", "judged"),
                   ("test_machine", "downtime", "skipped"), ("test_ours", "placement", "failed"),
                   ("test_env", "(the whole test)", "test skipped"),
                   ("test_judged", "(the whole test)", "live test passed")}
    printed = table(json.loads(record.read_text())["claims"])
    assert printed.startswith("claims: 2 judged, 1 skipped, 1 failed, 1 not exercised, 1 test skipped, 1 live test passed")
    assert "needs Containernet" in printed and "steal 900 ms" in printed


def test_the_report_says_where_there_is_no_record(tmp_path):
    run = subprocess.run([sys.executable, "-m", "tests.claims_report", str(tmp_path / "none.json")],
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert run.returncode == 0 and "claims: no record at" in run.stdout
