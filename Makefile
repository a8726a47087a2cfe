# The two set-up commands of the README: `make demo` and `make test`.
# `make test-fast`: the inner loop (no Spark, no Airflow, no PostgreSQL server).
# `make soak`: the long randomized-kill run.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# three workers keep two cores busy (a fourth gains nothing); tests of one xdist_group stay on one worker
WORKERS ?= 3
PYTEST := $(BIN)/python -m pytest

# the project's own modules, compiled to bytecode before a run (see `bytecode` below)
SOURCES := $(wildcard absreplay absreplay_examples coordinator spark_jobs migrations dags jobs tests bench)

.PHONY: demo test test-fast soak install chromium postgres bytecode jvm-archive jvm-deps

install: $(VENV)/.installed $(VENV)/.compiled bytecode

# uv installs into an ordinary venv (pip stays in it). Offline first, from uv's cache alone: online, PyPI
# answers for pyspark's source archives (no wheels) as if they had changed, and uv builds them again each
# time; a cache that lacks a package takes the second line, from the registries.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet uv
	$(BIN)/uv pip install --quiet --python $(BIN)/python --offline -e '.[dev]' 2>/dev/null \
	  || $(BIN)/uv pip install --quiet --python $(BIN)/python -e '.[dev]'
	touch $@

# every installed module compiled once, here: where PYTHONDONTWRITEBYTECODE is set no import writes
# bytecode, and every process (command, Spark worker, Airflow task) would compile its imports again. A
# target of its own so that `make -j2` runs it beside the tests' class archive; niced, so the archive gets
# the CPU first; without the packages' test suites and pip, which nothing here imports.
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

# the servers, the project and the JVM pieces side by side, then the suite
test:
	$(MAKE) -j2 chromium postgres install jvm-archive jvm-deps
	$(BIN)/ruff check .
	$(PYTEST) -n $(WORKERS) --dist loadgroup --durations=25 $(PYTEST_ARGS)

test-fast: install
	$(BIN)/ruff check .
	$(PYTEST) -n $(WORKERS) -m "not spark and not airflow and not postgres and not heavy" $(PYTEST_ARGS)

soak: install
	ABS_KILL_CYCLES=30 $(PYTEST) tests/runs/test_random_kills.py $(PYTEST_ARGS)
