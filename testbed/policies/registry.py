"""The one list of broker selection policies, by name.

Every other list is derived from `POLICIES`: the scenario schema's `control.policy`, the CLI's
`--policy` and `paper --policies`, `testbed.paper_figures.POLICIES`, the topic manager's `--policy` and the
assessment's policies (paper 5.5). Adding a family (Pulsar's load manager, BAD's multistage
balancing, ...) is one module with a class implementing `Policy` (testbed.policies.base), one entry
in `FAMILIES` and its test; nothing else lists names.
"""

from __future__ import annotations

from testbed.policies.allpairs import AllPairs
from testbed.policies.base import Policy
from testbed.policies.epulsar import EPulsar
from testbed.policies.pulsar_lm import PulsarLoadManager
from testbed.policies.pulsar_hash import PulsarHash

# The paper's order: ePulsar (3.4), then the baselines it is assessed against (5.5), then Pulsar's
# real load manager ("Achieving Broker Load Balancing with Apache Pulsar").
FAMILIES = (EPulsar, AllPairs, PulsarHash, PulsarLoadManager)

POLICIES: dict[str, Policy] = {family.name: family() for family in FAMILIES}

DEFAULT_POLICY = EPulsar.name  # the system the testbed reproduces


def get_policy(name: str) -> Policy:
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(sorted(POLICIES))}") from None
