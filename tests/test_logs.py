"""testbed.logs: library log records from the harness go to the run's log file, not the console."""

from __future__ import annotations

import logging

import pytest

from testbed.logs import LIBRARIES, route_library_logs


@pytest.fixture
def library_loggers():
    """Put the library loggers and the logger class back as they were (other tests share them)."""
    names = [n for n in logging.Logger.manager.loggerDict if n.split(".")[0] in LIBRARIES] + list(LIBRARIES)
    saved = {n: (list(logging.getLogger(n).handlers), logging.getLogger(n).level, logging.getLogger(n).propagate)
             for n in names}
    cls = logging.getLoggerClass()
    yield
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if name.split(".")[0] in LIBRARIES and isinstance(logger, logging.Logger):
            for handler in list(logger.handlers):
                logger.removeHandler(handler)
                if getattr(handler, "testbed_route", False):
                    handler.close()
            handlers, level, propagate = saved.get(name, ([], logging.NOTSET, True))
            for handler in handlers:
                logger.addHandler(handler)
            logger.setLevel(level)
            logger.propagate = propagate
    logging.setLoggerClass(cls)


class ConsoleLogger(logging.Logger):
    """What Mininet's log module makes every later logger: its own console handler and level."""

    def __init__(self, name):
        super().__init__(name)
        self.addHandler(logging.StreamHandler())
        self.setLevel(25)


def test_library_warnings_go_to_the_run_log_and_not_the_console(tmp_path, capsys, library_loggers):
    logging.setLoggerClass(ConsoleLogger)
    early = logging.getLogger("kazoo.testbed_probe")  # made before the routing, as kazoo's are
    assert early.handlers
    path = route_library_logs(tmp_path / "logs")
    assert logging.getLoggerClass() is logging.Logger  # later loggers are plain again
    early.warning("Connection dropped: socket connection broken")
    logging.getLogger("nats.testbed_probe").error("nats: timeout")
    logging.getLogger("kazoo.testbed_probe").info("chatter below the level")
    for handler in logging.getLogger("kazoo").handlers:
        handler.flush()
    assert capsys.readouterr().err == ""
    text = path.read_text()
    assert "kazoo.testbed_probe WARNING Connection dropped: socket connection broken" in text
    assert "nats.testbed_probe ERROR nats: timeout" in text and "chatter" not in text
    second = route_library_logs(tmp_path / "run2")  # a second run in the same process: the file moves
    early.warning("second run")
    for handler in logging.getLogger("kazoo").handlers:
        handler.flush()
    assert "second run" in second.read_text() and "second run" not in path.read_text()
    assert len(logging.getLogger("kazoo").handlers) == 1 + sum(
        isinstance(h, logging.NullHandler) for h in logging.getLogger("kazoo").handlers)
