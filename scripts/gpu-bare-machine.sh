#!/usr/bin/env bash
# A bare GPU machine with no network, the README's commands (docs/GPU.md "A bare GPU machine"),
# from the project's root once every part of the wheelhouse is unpacked
# (scripts/gpu-wheelhouse.py unpack). Logs and answers go to $OUT (default var/gpu-run).
#   scripts/gpu-bare-machine.sh setup   # make setup from the wheelhouse, twice (timed)
#   scripts/gpu-bare-machine.sh serve   # make run, one chat completion (three, timed), /stats
#   scripts/gpu-bare-machine.sh served  # make run, then bench/gpu_served.py against it
set -uo pipefail
W=${GPU_WHEELHOUSE:-$HOME/gpu-wheelhouse}
OUT=${OUT:-var/gpu-run}
mkdir -p "$OUT"
export PATH=$W/redis/bin:$PATH  # a redis-server carried with part one (--redis), if any
KEEP=${GPU_KEEP:-.gpu/keep}  # what an earlier machine built (keep), carried back by a call
now() { python3 -c 'import time; print(time.time())'; }

# keep NAME DIR FILES...: DIR's FILES (globs) as $OUT/keep/NAME.tgz.NN, 15 MiB pieces (the
# device tool returns at most 16 MiB a file): the next session puts them under $KEEP and
# carries them, and restore puts them back, so a fresh machine skips what they took.
keep() {
  local name=$1 dir=$2; shift 2
  mkdir -p "$OUT/keep"
  (cd "$dir" && tar czf - $@) | split -b 15M -d - "$OUT/keep/$name.tgz." \
    && echo "kept $name: $(du -ch "$OUT/keep/$name".tgz.* | tail -1 | cut -f1)"
}
restore() {  # restore NAME DIR: what keep saved, if carried
  ls "$KEEP/$1".tgz.* > /dev/null 2>&1 || return 0
  mkdir -p "$2" && cat "$KEEP/$1".tgz.* | tar xzf - -C "$2" && echo "restored $1 into $2"
}
since() { python3 -c "import time; print(round(time.time() - $1, 1))"; }

setup() {
  export PIP_NO_INDEX=1 PIP_FIND_LINKS=$W/wheels
  { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    for t in nvcc cmake redis-server; do echo "$t: $(command -v $t || echo missing)"; done
    python3 -VV; python3 -c 'import ensurepip' && echo "ensurepip: yes"; } > "$OUT/machine.txt" 2>&1
  if ! python3 -c 'import ensurepip' 2>/dev/null && [ ! -x .venv/bin/python ]; then
    # No ensurepip (Debian's python3 without python3-venv): the venv runs the outer pip.
    python3 -m venv --without-pip --system-site-packages .venv
    python3 -c 'import site; print("\n".join(site.getsitepackages()))' \
      > "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/outer-venv.pth"
  fi
  # The CUDA step of an earlier machine: make setup finds it current (its status.json's
  # fingerprint: the same sources, Python, packages, nvcc and GPUs) and skips 250-300 s.
  restore cuda_decode native/cuda_decode/build
  local t=$(now)
  make setup 2>&1 | tee "$OUT/setup.log"; local rc=${PIPESTATUS[0]}
  echo "== make setup: rc=$rc, $(since $t) s" | tee -a "$OUT/setup.log"
  cp native/cuda_decode/build/status.json "$OUT/cuda_decode_status.json" 2>/dev/null
  if grep -q '"ok": true' native/cuda_decode/build/status.json 2>/dev/null; then
    keep cuda_decode native/cuda_decode/build '_cuda_decode*.so' status.json
  else  # only a failed build's log is worth its file
    tail -c 20000 native/cuda_decode/build/build.log > "$OUT/cuda_decode_build.log" 2>/dev/null
  fi
  t=$(now); make setup > "$OUT/setup2.log" 2>&1; rc=$?
  echo "== make setup again: rc=$rc, $(since $t) s, $(wc -c < "$OUT/setup2.log") bytes printed" | tee -a "$OUT/setup.log"
  .venv/bin/python -c 'import mlx.core as mx, torch; print("mlx", mx.__version__, mx.default_device(), "| torch", torch.__version__, torch.__file__)' 2>&1 | tee -a "$OUT/setup.log"
}

serve() {
  restore kernels var/kernels  # MLX's compiled kernels: a worker's warm-up without NVRTC
  local u=http://127.0.0.1:${PORT:-8000} t0=$(now)
  setsid make run > "$OUT/run.log" 2>&1 &
  local group=$!
  for _ in $(seq 240); do curl -s -o /dev/null "$u/health" && break; sleep 0.5; done
  echo "listening after $(since $t0) s" | tee "$OUT/summary.txt"
  for _ in $(seq 40); do [ -f var/admin-credentials.txt ] && break; sleep 0.5; done
  local key; key=$(.venv/bin/python manage.py create_api_key --user admin --label gpu-run 2>/dev/null)
  local body='{"model":"smollm2-135m-instruct","messages":[{"role":"user","content":"Name three colours."}],"max_tokens":48}'
  for n in 1 2 3; do
    local t=$(now)
    curl -s -m 420 -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \
      -d "$body" "$u/v1/chat/completions" > "$OUT/chat$n.json"
    echo "chat $n: $(since $t) s ($(since $t0) s after make run)" | tee -a "$OUT/summary.txt"
  done
  curl -s -H "Authorization: Bearer $key" "$u/stats" > "$OUT/stats.json"
  python3 - "$OUT" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
out = sys.argv[1]
chat = json.load(open(f"{out}/chat1.json"))
print("reply:", json.dumps(chat.get("choices", [{}])[0].get("message", chat))[:300], chat.get("usage"))
def walk(x, path=""):
    if isinstance(x, dict):
        for k, v in x.items():
            if k in ("gpu_step", "device", "warm_up_seconds", "path", "reason"):
                print(f"{path}.{k} = {v}")
            walk(v, f"{path}.{k}")
    elif isinstance(x, list):
        for i, v in enumerate(x):
            walk(v, f"{path}[{i}]")
walk(json.load(open(f"{out}/stats.json")))
PY
  kill -TERM -- "-$group" 2>/dev/null; sleep 12; kill -KILL -- "-$group" 2>/dev/null
  keep kernels var/kernels .; true
}

served() {  # bench/gpu_served.py against this lab: the engine alone, then over HTTP
  # SERVE_FOLDER and SERVE_MODEL: another model folder, registered under that name first.
  restore kernels var/kernels
  local u=http://127.0.0.1:${PORT:-8000} which=()
  if [ -n "${SERVE_FOLDER:-}" ]; then
    .venv/bin/python manage.py add_model "$SERVE_FOLDER" --name "$SERVE_MODEL" >> "$OUT/run.log" 2>&1
    which=(--folder "$SERVE_FOLDER" --model "$SERVE_MODEL")
  fi
  # As many rows as the bench's widest concurrency: 8 (a small CPU machine's) would cap it.
  MLXLAB_MAX_BATCH_SIZE=${MLXLAB_MAX_BATCH_SIZE:-128} setsid make run > "$OUT/run.log" 2>&1 &
  local group=$!
  for _ in $(seq 240); do curl -s -o /dev/null "$u/health" && break; sleep 0.5; done
  local key; key=$(.venv/bin/python manage.py create_api_key --user admin --label gpu-served 2>/dev/null)
  .venv/bin/python bench/gpu_served.py --out "$OUT" --url "$u" --key "$key" "${which[@]}" "${@}" 2>&1 | tee "$OUT/served.txt"
  curl -s -H "Authorization: Bearer $key" "$u/stats" > "$OUT/served_stats.json"  # the step in use
  kill -TERM -- "-$group" 2>/dev/null; sleep 12; kill -KILL -- "-$group" 2>/dev/null
  keep kernels var/kernels .; true
}

case "${1:-}" in
  setup) setup ;;
  serve) serve ;;
  served) shift; served "$@" ;;
  *) echo "usage: $0 setup|serve|served [gpu_served.py options]" >&2; exit 2 ;;
esac
