"""The pub/sub control plane's pure parts (paper sections 3.2-3.4, 5.5).

model.py: what brokers report and what the topic manager decides (JSON for ZooKeeper).
latency.py: the paper's latency formulas on Serf coordinates.
policies.py: broker selection policies and Algorithm 1.
assessment.py, assess_spark.py: the 1000-random-placement assessment of Fig. 4 and Fig. 5.
"""
