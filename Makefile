# diskferry: setup, demo, tests, benchmarks.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
DEB_PACKAGES := util-linux docker-registry skopeo apache2-utils qemu-utils qemu-system-common qemu-system-x86 qemu-block-extra qemu-guest-agent nginx nbdkit xorriso ovmf \
	libnbd-bin curl xz-utils bzip2 zstd pigz strace libfuse2 xfsprogs \
	mmdebstrap umoci podman runc uidmap
BENCH_PACKAGES := restic borgbackup

# podman as it works in sandboxes such as CI's (runc, cgroupfs, no default ulimits)
export CONTAINERS_CONF ?= $(CURDIR)/image/containers.conf

.PHONY: setup demo test stress lint bench fuzz image docs clean

setup: $(VENV)/.installed
	@missing=$$(for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages: $$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test,fuzz]'
	touch $@

# one image for the operator and every worker: build/diskferry-VERSION.oci.tar, and
# localhost/diskferry:VERSION in podman's store (image/build.sh says how)
image: setup
	PYTHON=$(PY) image/build.sh build

demo: setup
	$(VENV)/bin/diskferry demo

# docs/cli.md and docs/resources.md, made from the commands' help and the models' descriptions
docs:
	$(PY) tools/gen_docs.py

# the import contracts of .importlinter, over this checkout's sources
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	PYTHONPATH=src $(VENV)/bin/lint-imports --no-cache --no-logo

# one test process per core: most tests wait on servers and subprocesses
test: lint
	$(VENV)/bin/pytest -q -ra -n auto --durations=30

# the kill -9 loops with 50 moments each instead of 8
stress: setup
	DISKFERRY_STRESS=50 $(VENV)/bin/pytest -q -ra -m stress --timeout=3600

bench: setup
	@missing=$$(for p in $(BENCH_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
	$(VENV)/bin/pip install -q -e '.[test,fuzz,bench]'
# bytecode, as an installed wheel has it: no timed run compiles the sources (PYTHONDONTWRITEBYTECODE)
	$(PY) -m compileall -q src >/dev/null
	$(PY) -m benchmarks.run $(BENCH_ARGS)

# each target under atheris for FUZZ_SECONDS; corpora and crashes stay in FUZZ_DIR
FUZZ_SECONDS := 600
FUZZ_DIR := .fuzz
fuzz: setup
	@for t in $$(PYTHONPATH=fuzz:src $(PY) fuzz/run.py --list); do \
		echo "fuzzing $$t for $(FUZZ_SECONDS) s"; \
		mkdir -p $(FUZZ_DIR)/$$t; \
		PYTHONPATH=fuzz:src $(PY) fuzz/run.py $$t -max_total_time=$(FUZZ_SECONDS) -timeout=20 \
			-rss_limit_mb=1024 -artifact_prefix=$(FUZZ_DIR)/$$t- $(FUZZ_DIR)/$$t/corpus \
			|| exit 1; \
	done

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache $(FUZZ_DIR)
