# The two set-up commands of the README: `make demo` and `make test`.
# `make test-fast`: the inner loop (no Spark, no Airflow, no PostgreSQL server).
# `make soak`: the long randomized-kill run.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# three workers on the 2-core reference machine: the suite keeps both cores busy (vmstat: ~0% idle), so a
# fourth gains nothing (896 s against 885 s); tests of one xdist_group stay on one worker
WORKERS ?= 3
PYTEST := $(BIN)/python -m pytest

# the project's own modules, compiled to bytecode before a run (see `bytecode` below)
SOURCES := $(wildcard absreplay absreplay_examples coordinator spark_jobs migrations dags jobs tests bench)

.PHONY: demo test test-fast soak install chromium postgres bytecode jvm-archive jvm-deps

install: $(VENV)/.installed $(VENV)/.compiled bytecode

# uv resolves and installs from its cache in about half pip's time (35 s against 62 s with warm caches
# on the 2-core reference machine); the venv stays an ordinary one, with pip in it.
# --offline first: from uv's cache alone when it holds everything the project needs (a machine that installed
# it before), else from the registries. Online, uv asks the registry again about every package, and PyPI
# answers for pyspark's and pyspark-client's source archives (they have no wheels) as if they had changed,
# so uv downloaded and built them again on every install: 22-24 s against 1.7 s offline, the same packages
# at the same versions. A machine whose cache lacks a package, or a pyproject.toml that asks for one it
# lacks, takes the second line.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet uv
	$(BIN)/uv pip install --quiet --python $(BIN)/python --offline -e '.[dev]' 2>/dev/null \
	  || $(BIN)/uv pip install --quiet --python $(BIN)/python -e '.[dev]'
	touch $@

# every installed module compiled once, here (uv's --compile-bytecode does the same inside the install).
# Python leaves that to the first import, and where PYTHONDONTWRITEBYTECODE is set (as on the reference
# machines) no import ever writes it, so every Python process (each command, Spark driver and worker,
# Airflow task) compiled Airflow, SQLAlchemy, pandas... from source again: importing the command line took
# 1.72 CPU-s instead of 0.66 s. A target of its own, so that `make -j2` compiles beside the tests' class
# archive, which needs only the installed packages (a fresh clone: 10.5 s of compiling on two cores under
# the archive's 30 s on one). Niced, so that the archive (the longer of the two) gets the CPU it wants, and
# without the packages' own test suites (1,856 of 9,649 files, a fifth of the source) and pip, which no
# process here imports: `make -j2 chromium install jvm-archive` of a fresh clone, 39 s -> 32.5 s
$(VENV)/.compiled: $(VENV)/.installed
	nice -n 19 $(BIN)/python -m compileall -q -j 0 -x '/tests/|/site-packages/pip/' $(VENV)/lib
	touch $@

# the same for the project's own sources (an editable install: they are not in the venv); compileall
# writes whatever the environment says and skips what is up to date, so this costs a second when nothing changed
bytecode: $(VENV)/.installed
	$(BIN)/python -m compileall -q -j 0 $(SOURCES)

# headless Chromium and its WebDriver for the browser test of the Airflow view (Debian's packages);
# skipped when present; `make test` installs them, so the README's test command needs nothing else
chromium: /usr/bin/chromedriver

/usr/bin/chromedriver:
	apt-get -o DPkg::Lock::Timeout=600 update -qq
	DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends chromium chromium-driver

# the PostgreSQL server of the tests (Debian's package), installed where missing and started on
# 127.0.0.1:5432 with trust auth
postgres:
	bash tests/servers/postgres.sh

# the JVM dependencies of jvm/pom.xml from Maven Central (into Maven's own cache, ~/.m2): one class path
# file per profile under .jvm/ (spark: S3A and Kafka for Spark's --jars; s3proxy, minicluster, kafka: the tests' servers);
# offline first, from the cache alone, as uv does for the Python packages
JVM_PROFILES := spark s3proxy minicluster kafka
JVM_DEPS := $(JVM_PROFILES:%=.jvm/%.classpath)
jvm-deps: $(JVM_DEPS) .jvm/classes/MiniYarn.class

# the tests' YARN launcher, compiled against the minicluster
.jvm/classes/MiniYarn.class: tests/servers/MiniYarn.java .jvm/minicluster.classpath
	javac -d .jvm/classes -cp "$$(cat .jvm/minicluster.classpath)" tests/servers/MiniYarn.java

.jvm/%.classpath: jvm/pom.xml
	@mkdir -p .jvm
	mvn -q -B -Dstyle.color=never -o -f jvm/pom.xml -P $* dependency:build-classpath -Dmdep.outputFile=$(abspath $@) >/dev/null 2>&1 \
	  || mvn -q -B -Dstyle.color=never -f jvm/pom.xml -P $* dependency:build-classpath -Dmdep.outputFile=$(abspath $@)

jvm-archive: $(VENV)/.installed
	$(BIN)/python -m tests.jvm_archive

demo: install
	$(BIN)/absreplay demo

# Chromium's install (apt-get, on a fresh machine only) beside the project's (uv: 2 s from its cache, about
# 40 s on a fresh machine), then the bytecode beside the tests' JVM class archive (tests/jvm_archive.py, about
# 30 s of one core)
test:
	$(MAKE) -j2 chromium postgres install jvm-archive jvm-deps
	$(BIN)/ruff check .
	$(PYTEST) -n $(WORKERS) --dist loadgroup --durations=25 $(PYTEST_ARGS)

test-fast: install
	$(BIN)/ruff check .
	$(PYTEST) -n $(WORKERS) -m "not spark and not airflow and not postgres and not heavy" $(PYTEST_ARGS)

soak: install
	ABS_KILL_CYCLES=30 $(PYTEST) tests/runs/test_random_kills.py $(PYTEST_ARGS)
