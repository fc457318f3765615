"""The claims table after a test session (`python -m tests.claims_report [claims.json]`): how many
claims the live tests judged, and each one skipped, failed unjudged or not exercised, with its reason,
then the tests skipped as a whole. Reads what tests.claims wrote; a note where there is no record."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from tests.claims import DEFAULT_NAME, ENV

ROOT = Path(__file__).resolve().parent.parent
REASON = 400  # characters of a reason shown


def table(records: list[dict]) -> str:
    counts = Counter(r["status"] for r in records)
    lines = ["claims: " + ", ".join(f"{counts[s]} {s}" for s in ("judged", "skipped", "failed", "not exercised",
                                                                 "test skipped", "live test passed"))]
    unjudged = [r for r in records if r["status"] not in ("judged", "live test passed")]
    if unjudged:
        lines.append(f"{'status':<14} {'claim':<50} test / reason")
    for r in sorted(unjudged, key=lambda r: (r["status"] == "test skipped", r["test"])):
        machine = " [the machine's]" if r.get("attributed_to_machine") else ""
        lines.append(f"{r['status']:<14} {r['claim'][:50]:<50} {r['test']}")
        reason = " ".join(r["reason"].split())
        lines.append(f"{'':<14} {reason[:REASON]}{'...' if len(reason) > REASON else ''}{machine}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """One table per record named (default: $CLAIMS_JSON or the rootdir's); always 0: the tests'
    status is the tests' to give."""
    import os

    for path in [Path(a) for a in argv] or [Path(os.environ.get(ENV) or ROOT / DEFAULT_NAME)]:
        if not path.exists():
            print(f"claims: no record at {path}")
            continue
        print(f"{path.name}: " + table(json.loads(path.read_text())["claims"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
