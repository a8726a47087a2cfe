"""py4j's class and static-method lookups, asked of the JVM once per driver instead of on every call.

PySpark reaches the JVM through py4j's view of it (``sc._jvm``), and py4j answers every attribute with a round
trip: ``getattr(sc._jvm, "org.apache.spark.sql.functions").col`` (each ``F.col``, ``F.lit``, ...) is two,
``sc._jvm.PythonUtils.toSeq`` (each function given columns) two more. The JVM resolves the name anew each
time, and an unqualified one (``PythonUtils``, ``functions``) is tried in the default package, ``java.lang``
and PySpark's star imports before it is found: every miss looks through each of Spark's ~260 jars
(``URLClassPath.getResource``). Two small epochs of a keyed aggregate made 244 such round trips; the misses
were 8% of the test session JVM's CPU (Java Flight Recorder), a lookup costs 0.1-0.6 ms.

``install`` makes the session's view keep what it resolved to a class, and each such class keep its static
methods and inner classes: the same objects py4j would make again, kept. A class's name and its methods do
not change while its JVM lives. What a lookup does not keep: packages (cheap, and a prefix of anything), a
static field's value (it may change), a name that failed (asked again, as before). A kept unqualified name
keeps its class even if a later ``java_import`` would resolve it to another. Driver side, once per session
(``spark_jobs.session.build_session``).
"""

from __future__ import annotations

from py4j.java_gateway import JavaClass, JavaMember, JVMView
from pyspark.sql import SparkSession


class _KeptClass(JavaClass):
    """A ``JavaClass`` that keeps its static methods and inner classes once looked up."""

    def __getattr__(self, name: str):
        member = super().__getattr__(name)
        if isinstance(member, JavaClass):  # an inner class (py4j makes a plain one)
            member = _KeptClass(member._fqn, member._gateway_client)
        if isinstance(member, JavaMember | JavaClass):
            self.__dict__[name] = member
        return member


class _KeptView(JVMView):
    """A ``JVMView`` that keeps the classes it resolved (as ``_KeptClass``)."""

    def __getattr__(self, name: str):
        found = super().__getattr__(name)
        if isinstance(found, JavaClass):
            found = self.__dict__[name] = _KeptClass(found._fqn, found._gateway_client)
        return found


def install(spark: SparkSession) -> None:
    """From now on, the session's py4j view keeps its class lookups (idempotent)."""
    view = spark.sparkContext._jvm
    if type(view) is JVMView:
        view.__class__ = _KeptView
