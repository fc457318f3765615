"""Topic names and topic classes: the one home of the naming rule.

A scenario declares topic classes (`workload.topics`), each with its latency threshold Lth (paper
3.3; 5.1: `follow_leader` and `sensor_data` of every UAV swarm, `avatar` of every MMOG avatar). A
topic is one instance of a class, named `<class>-<instance>` (`follow_leader-swarm3`, `avatar-17`).
A class name cannot contain the separator (`CLASS_RE`), so the class is the name up to the first '-'.
Topic names also become ZooKeeper paths and NATS subjects, hence the small alphabet (`TOPIC_RE`).
"""

from __future__ import annotations

import re

CLASS_SEPARATOR = "-"
CLASS_RE = re.compile(r"[a-z][a-z0-9_]*")
TOPIC_RE = re.compile(rf"{CLASS_RE.pattern}(?:{CLASS_SEPARATOR}[a-z0-9]+)?")  # use fullmatch


def topic_name(topic_class: str, instance: str | int) -> str:
    """`follow_leader`, `swarm3` -> `follow_leader-swarm3`."""
    return f"{topic_class}{CLASS_SEPARATOR}{instance}"


def topic_class(topic: str) -> str:
    """`follow_leader-swarm3` -> `follow_leader`; a name without an instance is its own class."""
    return topic.split(CLASS_SEPARATOR, 1)[0]
