"""Scenario texts several test modules start from (data, not fixtures: each test appends its own lines)."""

#: The smallest valid UAV scenario: two zones, a cloud, one topic class.
MINIMAL = """\
name: t
duration: 10s
infrastructure:
  mec_zones: {zones: 2, inter_site_rtt: 30ms}
  cloud: {one_way: 40ms}
workload:
  kind: uav-swarm
  rate: 200/s
  topics:
    - {name: follow_leader, threshold: 40ms}
"""
