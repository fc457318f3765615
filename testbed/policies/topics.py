"""Topic names and topic classes: the one home of the naming rule.

A scenario declares topic classes (`workload.topics`), each with its latency threshold Lth (paper
3.3; 5.1: `follow_leader` and `sensor_data` of every UAV swarm, `avatar` of every MMOG avatar). A
topic is one instance of a class, named `<class>-<instance>` (`follow_leader-swarm3`, `avatar-17`).
A class name cannot contain '-' (testbed.scenario.model.TOPIC_RE), so the class is the name up to
the first '-'.
"""

from __future__ import annotations

CLASS_SEPARATOR = "-"


def topic_name(topic_class: str, instance: str | int) -> str:
    """`follow_leader`, `swarm3` -> `follow_leader-swarm3`."""
    return f"{topic_class}{CLASS_SEPARATOR}{instance}"


def topic_class(topic: str) -> str:
    """`follow_leader-swarm3` -> `follow_leader`; a name without an instance is its own class."""
    return topic.split(CLASS_SEPARATOR, 1)[0]
