"""The SparkSession the analysis uses: `local[*]` by default, any Spark master by flag, quiet logs.

    from analysis.spark import session
    spark = session()                         # local[*], 4 shuffle partitions
    spark = session("spark://head:7077")      # a standalone cluster (or yarn, k8s://...)

The master comes from the argument, else `$ANALYSIS_SPARK_MASTER`, else `local[*]`. Local masters get
few shuffle partitions (the reductions are aggregations over at most millions of rows on a small
machine); a cluster keeps Spark's default unless `shuffle_partitions` is given. Inputs and outputs
are paths or URIs (`uri()` turns a local path into an absolute one and leaves `s3a://`, `hdfs://`,
`file:` ... alone), so the same jobs read a run directory here or in an object store.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

DEFAULT_MASTER = "local[*]"
LOCAL_SHUFFLE_PARTITIONS = 4
_LOG_CONFIG = Path(__file__).resolve().parent / "log4j2.properties"
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def is_uri(location: str | os.PathLike) -> bool:
    """True for `s3a://b/k`, `hdfs://nn/p`, `file:/x`; False for plain paths."""
    return bool(_SCHEME.match(str(location))) and not re.match(r"^[A-Za-z]:[\\/]", str(location))


def uri(location: str | os.PathLike) -> str:
    """A location Spark can read: URIs unchanged, local paths made absolute."""
    text = str(location)
    return text if is_uri(text) else str(Path(text).expanduser().resolve())


def join(location: str | os.PathLike, *parts: str) -> str:
    """Join a run directory (path or URI) with names below it."""
    text = str(location)
    if is_uri(text):
        return "/".join([text.rstrip("/"), *parts])
    return str(Path(text).joinpath(*parts))


def java_available() -> bool:
    """Spark needs a Java runtime: JAVA_HOME or `java` on PATH."""
    import shutil

    home = os.environ.get("JAVA_HOME")
    if home and Path(home, "bin", "java").exists():
        return True
    return shutil.which("java") is not None


def session(master: str | None = None, app_name: str = "testbed-analysis", shuffle_partitions: int | None = None,
            conf: dict[str, str] | None = None):
    """Get (or create) the SparkSession. Settings apply when this call starts the JVM."""
    from pyspark.sql import SparkSession

    # Python workers run this interpreter (it has pyarrow and this package), not the first python3 on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    master = master or os.environ.get("ANALYSIS_SPARK_MASTER") or DEFAULT_MASTER
    local = master.startswith("local")
    if shuffle_partitions is None and local:
        shuffle_partitions = LOCAL_SHUFFLE_PARTITIONS
    java_options = f"-Dlog4j2.configurationFile={_LOG_CONFIG.as_uri()}"
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.driver.extraJavaOptions", java_options)
               .config("spark.executor.extraJavaOptions", java_options))
    if local:
        builder = (builder.config("spark.driver.memory", os.environ.get("ANALYSIS_DRIVER_MEMORY", "2g"))
                   .config("spark.driver.host", "127.0.0.1")
                   .config("spark.driver.bindAddress", "127.0.0.1"))
    if shuffle_partitions is not None:
        builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
