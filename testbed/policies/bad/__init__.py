"""BAD Pub/Sub's multistage load balancing (Nguyen, Uddin, Venkatasubramanian, DEBS '19):
which broker serves each subscriber, not where a topic lives.

One module per job, all pure (the live coordinator, the offline simulation and the tests share them):

- `config`: the stages' names and thresholds (alpha, beta, gamma, theta), one home for defaults.
- `load`: the broker load of section 4 (eq. 2-5, F_j = sum_k z_jk (1 + n_jk) lambda_k) kept
  incrementally as subscribers attach, subscribe and move; the cov of eq. 6-8.
- `placement`: stage 1, initial placement (5.1): nearest (`nr`), round robin (`rr`), random (`rnd`).
- `balance`: stage 2, dynamic migration (5.2: `ldm`, `sdm`), stage 3, the greedy shuffle (5.3,
  `gsh`), and Algorithm 1 that chains them.
"""

from testbed.policies.bad.balance import Move, dynamic_migration, greedy_shuffle, plan
from testbed.policies.bad.config import MIGRATIONS, PLACEMENTS, BalancerConfig
from testbed.policies.bad.load import Loads, cov
from testbed.policies.bad.placement import Placer

__all__ = ["BalancerConfig", "Loads", "Move", "MIGRATIONS", "PLACEMENTS", "Placer", "cov", "dynamic_migration",
           "greedy_shuffle", "plan"]
