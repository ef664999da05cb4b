# vtpu — two set-up commands on a fresh machine:
#   make demo   create .venv, install torch 2.13.0 (CPU) and vtpu, run the demo
#   make test   the same set-up if needed, then the C tests (plain and under
#               ASan+UBSan) and the Python tests
# Other targets: make bench (ratios vs PyTorch CPU), make op-coverage, make fuzz
# (the C op fuzzer for FUZZ_SECONDS, default 300), make conformance (PyTorch's
# own device tests against "tpu", docs/conformance.md), make clean.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
VPY := $(VENV)/bin/python
NATIVE_SRC := $(shell find runtime/src runtime/include python/vtpu/csrc -name '*.[ch]' -o -name '*.def' -o -name '*.cpp' 2>/dev/null) setup.py

.PHONY: all demo test test-c test-py bench op-coverage fuzz conformance install clean

all: install

# torch comes from the local CPU build; never let pip reach for a CUDA build.
$(VENV)/.deps:
	$(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --upgrade --quiet "pip>=23" setuptools wheel ninja
	$(VPY) -m pip install --quiet torch==2.13.0
	$(VPY) -c "import torch, sys; v = torch.__version__; sys.exit(0 if v.startswith('2.13.0') and torch.version.cuda is None else f'need the CPU build of torch 2.13.0, got {v}')"
	$(VPY) -m pip install --quiet pytest numpy expecttest
	touch $@

# The package is installed editable once (again when its metadata changes);
# the extension is built in place, where ninja recompiles only what changed
# (an edit to one binding file: one file compiled and the link).
$(VENV)/.package: $(VENV)/.deps pyproject.toml setup.py
	VTPU_SKIP_NATIVE=1 $(VPY) -m pip install --quiet --no-build-isolation --no-deps -e .
	touch $@

$(VENV)/.vtpu: $(VENV)/.package $(NATIVE_SRC)
	@mkdir -p build
	@echo "building vtpu._C (log: build/ext.log)"
	@TORCH_DEVICE_BACKEND_AUTOLOAD=0 $(VPY) setup.py --quiet build_ext --inplace > build/ext.log 2>&1 || { cat build/ext.log; exit 1; }
	touch $@

install: $(VENV)/.vtpu

demo: install
	$(VPY) -m vtpu.demo

test-c:
	$(MAKE) -C runtime -j2 test

# The Python suite runs twice: in Strict mode, then in DeferAndFuse.
test-py: install
	$(VPY) -m pytest -q tests
	TPU_DEFER_AND_FUSE=1 $(VPY) -m pytest -q tests

test: install test-c test-py

bench: install
	$(VPY) -m pip install --quiet matplotlib
	$(VPY) bench/overhead.py
	$(VPY) bench/elementwise.py
	$(VPY) bench/fuse.py
	$(VPY) bench/matmul.py
	$(VPY) bench/ops.py
	$(VPY) bench/conv.py
	$(VPY) bench/attention.py
	$(VPY) bench/gpt_step.py
	$(VPY) bench/compile.py
	$(VPY) bench/codegen.py
	$(VPY) bench/dist.py

fuzz:
	$(MAKE) -C runtime -j2 fuzz

# docs/op_coverage.md from PyTorch's OpInfo database (tests/test_opinfo.py checks it).
op-coverage: install
	$(VPY) tests/op_coverage.py

# PyTorch's test files are fetched into conformance/pytorch/ (git-ignored).
conformance: install
	$(VPY) -m pip install --quiet psutil
	conformance/fetch.sh
	$(VPY) conformance/run.py --mode all
	$(VPY) conformance/run.py --device cpu

clean:
	$(MAKE) -C runtime clean
	rm -rf build python/vtpu/*.so python/*.egg-info $(VENV)
