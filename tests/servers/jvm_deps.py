"""The JVM dependencies of ``jvm/pom.xml`` as ``make jvm-deps`` left them: one class path file per profile."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLASSPATHS = ROOT / ".jvm"


def classpath(profile: str) -> str:
    """The class path of one profile of jvm/pom.xml (``spark``, ``s3proxy``, ``minicluster``, ``kafka``)."""
    path = CLASSPATHS / f"{profile}.classpath"
    if not path.exists():
        raise RuntimeError(f"{path} is missing: `make jvm-deps` fetches the JVM dependencies from Maven Central")
    return path.read_text().strip()
