# diskferry: setup, demo, tests, benchmarks.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
DEB_PACKAGES := util-linux qemu-utils qemu-system-common qemu-block-extra qemu-guest-agent nginx nbdkit \
	libnbd-bin curl xz-utils bzip2 zstd pigz strace libfuse2 xfsprogs
BENCH_PACKAGES := restic borgbackup

.PHONY: setup demo test lint bench clean

setup: $(VENV)/.installed
	@missing=$$(for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages: $$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $@

demo: setup
	$(VENV)/bin/diskferry demo

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test: lint
	$(VENV)/bin/pytest -q -ra

bench: setup
	@missing=$$(for p in $(BENCH_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
	$(PY) -m benchmarks.run

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
