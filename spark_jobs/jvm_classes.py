"""Java classes of the project, compiled in the driver's JVM and handed to the executors as a jar.

PySpark cannot subclass a JVM class, and a jar built ahead of time would have to match the Spark it runs
on. So the few classes the project needs on the JVM side (``spark_jobs.state.stores.placement``'s pinned RDD,
``spark_jobs.local_fs``'s local file system) are Java source here, compiled when first needed by Janino,
the compiler Spark itself ships for code generation, against the very Spark of the session. Every class of
a source goes into one jar under the temporary directory (named after the source and Spark's version),
which ``SparkContext.addJar`` hands to the executors. Driver side only.
"""

from __future__ import annotations

import hashlib
import tempfile
import zipfile
from pathlib import Path

from pyspark.sql import SparkSession


def compiled(spark: SparkSession, name: str, source: str):
    """Class ``name`` of ``source`` (a Java ``Class``), loaded once per SparkContext, its jar added for the
    executors. The jar is kept, named after the source and the Spark version: a later session loads it
    (milliseconds) instead of compiling again (0.25 s)."""
    sc = spark.sparkContext
    cache = sc.__dict__.setdefault("_absreplay_classes", {})
    if name not in cache:
        jvm = sc._jvm
        parent = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        digest = hashlib.sha256(f"{sc.version}\n{source}".encode()).hexdigest()[:16]
        jar = Path(tempfile.gettempdir()) / f"absreplay-{name}-{digest}.jar"
        if not jar.exists():
            compiler = jvm.org.codehaus.janino.SimpleCompiler()
            compiler.setParentClassLoader(parent)
            compiler.cook(source)
            codes = compiler.getBytecodes()
            tmp = jar.with_suffix(f".{id(codes)}.tmp")
            with zipfile.ZipFile(tmp, "w") as z:
                for class_name in sorted(str(k) for k in codes.keySet().toArray()):
                    z.writestr(class_name.replace(".", "/") + ".class", bytes(codes.get(class_name)))
            tmp.replace(jar)
        urls = sc._gateway.new_array(jvm.java.net.URL, 1)
        urls[0] = jvm.java.io.File(str(jar)).toURI().toURL()
        sc._jsc.addJar(str(jar))
        cache[name] = jvm.java.net.URLClassLoader(urls, parent).loadClass(name)
    return cache[name]
