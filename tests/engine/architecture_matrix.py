"""Every mlx-lm architecture served by the engine, against mlx-lm's own `generate_step`.

    .venv/bin/python -m tests.engine.architecture_matrix OUT.jsonl [model_type ...]

Each architecture's tiny random-weight model (tests/architecture_models.py) is loaded as a
worker loads it (`load_model`: the fast paths it takes) and served by an engine in this
process, greedy, 16 tokens a row:

- `batch`: three prompts of different lengths, submitted together (one of them without
  logprobs: the lean step);
- `cache`: a second turn that extends the first's prompt and reply: served from the prompt
  cache (it must report cached tokens), the tokens those of the whole prompt;
- `drafts`: a row drafting from a prediction (speculative decoding: verifying passes), the
  prediction mlx-lm's own reply with one token wrong (a refused draft rolled back);
- `resume`: a row resumed after 6 tokens, which must continue as the first run did.

Where the CPU's native paths take the architecture quantized to 4 bits (the fused layers
for every block, or the expert-grouped matmul for a mixture of experts), a 4-bit copy is
served too, through them: `4-bit batch` and `4-bit drafts`, against mlx-lm's
`generate_step` on the same 4-bit weights; where the fused layers do not take its blocks,
the row says why. `CUDA decode step`: the GPU's one-token step takes the architecture in
bfloat16, its contract (cuda_decode.Reference) installed as on a GPU, by the blocks'
description and a check against the model's own code near and far into a sequence.

Each row's tokens must be those of mlx-lm's `generate_step` over the same prompt, on the
same weights loaded by mlx-lm alone. Where batched rows differ, mlx-lm's own batched loop
(`BatchGenerator`) is asked too: when the engine gives what it gives, the difference is
batching's in mlx-lm itself (a recurrent layer's state over left padding, say), and the
result says so.

One JSON line per architecture goes to OUT (a "start" line before each, so that a crash of
the process shows which one did it): the matrix test runs this module in child processes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from inference.engine.process.startup import prepare_mlx_process

TOKENS = 16
RESUME_AFTER = 6
TEXTS = (
    "The lighthouse keeper climbed the stairs.",
    "Rivers",
    "A short note about the weather on a quiet Sunday morning in the hills, written slowly.",
)
WRONG_AT = 5  # the prediction's wrong token
TIE = 1e-4  # log-probability margin below which greedy's choice is float noise's


class Reference(list):
    """mlx-lm's greedy tokens, and how far each one's log-probability stood above the
    runner-up's (`margins`): where the engine's token differs, a margin below TIE is a tie
    that float noise breaks either way (a batch sums in another order), not a fault."""

    margins: list[float]


def reference(model, prompt: list[int], tokens: int = TOKENS, cache=None) -> Reference:
    """mlx-lm's `generate_step` over `prompt` (after what `cache` holds, where given)."""
    import mlx.core as mx
    from mlx_lm.generate import generate_step

    tokens_, margins = Reference(), []
    steps = generate_step(mx.array(prompt), model, max_tokens=tokens, prompt_cache=cache)
    for token, logprobs in steps:
        top = mx.topk(logprobs.astype(mx.float32), 2).tolist()
        tokens_.append(int(token))
        margins.append(abs(top[0] - top[1]))
    tokens_.margins = margins
    return tokens_


def cached_reference(model, first: list[int], second: list[int]) -> Reference:
    """mlx-lm's own second turn through its prompt cache: the first turn generated into a
    cache, the second prompt's new tokens prefilled after it (mlx_lm.server's path). With a
    sliding window it differs from a fresh prefill: the window's chunked update is not the
    step's."""
    from mlx_lm.models.cache import make_prompt_cache

    cache = make_prompt_cache(model)
    reference(model, first, cache=cache)
    held = getattr(cache[0], "offset", None)
    if not isinstance(held, int) or held >= len(second):
        return Reference()
    return reference(model, second[held:], cache=cache)


def batched_reference(model, prompts: list[list[int]]) -> list[list[int]]:
    """mlx-lm's own batched loop over the same prompts: where it too differs from
    `generate_step`, the difference is batching's, not the engine's."""
    from mlx_lm.generate import BatchGenerator

    generator = BatchGenerator(model, stop_tokens=None, completion_batch_size=len(prompts))
    try:
        uids = generator.insert(prompts, [TOKENS] * len(prompts))
        out: dict[int, list[int]] = {uid: [] for uid in uids}
        while any(len(row) < TOKENS for row in out.values()):
            for response in generator.next_generated():
                out[response.uid].append(response.token)
        return [out[uid] for uid in uids]
    finally:
        generator.close()


def served_tokens(run) -> list[int]:
    return [entry.token_id for delta in run.deltas for entry in delta.logprobs]


def verdict(got: list[int], want: list[int], eos: set[int], run) -> str | None:
    """None when the engine gave mlx-lm's tokens (or stopped on an end-of-sequence token
    where mlx-lm's loop, which knows no stop, went on); else what differs."""
    if run.end is None or not hasattr(run.end, "finish_reason"):
        return f"failed: {getattr(run.end, 'message', run.end)}"
    if got == want:
        return None
    if run.end.finish_reason == "stop" and want[: len(got)] == got and want[len(got)] in eos:
        return None
    first = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), None)
    if first is None:
        return f"differs from token {min(len(got), len(want))}"
    margins = getattr(want, "margins", None)
    if margins is not None and margins[first] < TIE:
        return None  # a tie at `first`: what follows it follows another token
    return f"differs from token {first}"


def batch_verdict(runs, wants: list[list[int]], eos: set[int], tokenizer) -> str | None:
    """The batched rows against `wants`: row 1 asked for no logprobs, its text is compared."""
    problems = []
    for i, (run, want) in enumerate(zip(runs, wants, strict=True)):
        if i == 1:
            problem = text_verdict(run, want, eos, tokenizer)
        else:
            problem = verdict(served_tokens(run), want, eos, run)
        if problem is not None:
            problems.append(f"row {i}: {problem}")
    return "; ".join(problems) or None


def text_verdict(run, want: list[int], eos: set[int], tokenizer) -> str | None:
    """`verdict` for a row read as text: the reference's tokens up to its first
    end-of-sequence token, decoded."""
    if run.end is None or not hasattr(run.end, "finish_reason"):
        return f"failed: {getattr(run.end, 'message', run.end)}"
    end = next((i for i, token in enumerate(want) if token in eos), len(want))
    expected = tokenizer.decode(want[:end])
    return None if run.text == expected else "its text differs"


class Trial:
    """One architecture's engine and mlx-lm's own model of the same folder; each scenario
    returns None when the engine served it right, else what went wrong, and notes in
    `notes` where mlx-lm's own paths explain a difference."""

    def __init__(self, engine, mlx_lm_model) -> None:
        self.engine, self.model = engine, mlx_lm_model
        self.tokenizer = engine.tokenizer
        self.eos = set(self.tokenizer.eos_token_ids)
        self.prompts = [self.encode(text) for text in TEXTS]
        self.wants = [reference(mlx_lm_model, prompt) for prompt in self.prompts]
        self.notes: dict = {}

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def request(self, prompt: list[int], *, logprobs: bool = True, **options):
        from inference.engine import GenerationRequest

        return GenerationRequest(prompt, TOKENS, logprobs=logprobs, **options)

    def batch(self) -> str | None:
        from .helpers import submit

        runs = [
            submit(self.engine, self.request(p, logprobs=i != 1, cache_scope="batch"))
            for i, p in enumerate(self.prompts)
        ]
        for run in runs:
            run.wait()
        problem = batch_verdict(runs, self.wants, self.eos, self.tokenizer)
        if problem is None:
            return None
        try:
            batched = batched_reference(self.model, self.prompts)
        except ValueError:  # mlx-lm's own loop cannot batch its caches: nothing to compare
            return problem
        if batched != self.wants and batch_verdict(runs, batched, self.eos, self.tokenizer) is None:
            self.notes["batching"] = "mlx-lm's own BatchGenerator differs from generate_step"
            return None
        return problem

    def cache(self) -> str | None:
        from .helpers import generate

        first = self.prompts[0]
        turn = generate(self.engine, self.request(first, cache_scope="c"))
        second = first + served_tokens(turn) + self.encode(" And then?")
        run = generate(self.engine, self.request(second, cache_scope="c"))
        problem = verdict(served_tokens(run), reference(self.model, second), self.eos, run)
        if problem is not None:
            theirs = cached_reference(self.model, first, second)
            if theirs and verdict(served_tokens(run), theirs, self.eos, run) is None:
                self.notes["prompt_cache"] = (
                    "as mlx-lm's own prompt-cache path, which differs from a fresh prefill"
                )
                problem = None
        if problem is None and not run.end.cached_tokens:
            return "no cached tokens on the second turn"
        return problem

    def drafts(self) -> str | None:
        from inference.engine.drafts.drafting import DraftPlan

        from .helpers import generate

        want = self.wants[0]
        wrong = (want[WRONG_AT] + 1) % len(self.tokenizer)
        plan = DraftPlan(prediction=(*want[:WRONG_AT], wrong, *want[WRONG_AT + 1 :]))
        run = generate(self.engine, self.request(self.prompts[0], draft=plan))
        problem = verdict(served_tokens(run), want, self.eos, run)
        self.notes["drafts_kept"] = run.end.accepted_prediction_tokens
        speculates = self.engine.runner.speculation.enabled
        if problem is None and speculates and not run.end.accepted_prediction_tokens:
            return "no draft kept"
        return problem

    def resume(self) -> str | None:
        """A resumed row prefills its prompt and the replayed tokens: mlx-lm's reference is
        the same tokens as one prompt."""
        from inference.engine.prompting.request import Resume

        from .helpers import generate

        replayed = list(self.wants[2][:RESUME_AFTER])
        resume = Resume(key="matrix", tokens=tuple(replayed))
        run = generate(self.engine, self.request(self.prompts[2], resume=resume))
        want = reference(self.model, self.prompts[2] + replayed, TOKENS - RESUME_AFTER)
        problem = verdict(served_tokens(run), want, self.eos, run)
        if problem is None and run.end.resumed_from != RESUME_AFTER:
            return f"resumed from {run.end.resumed_from}"
        return problem


SCENARIOS = ("batch", "cache", "drafts", "resume")
FUSED_SCENARIOS = ("batch", "drafts")


def check(model_type: str, workdir: Path, tokenizer_dir: Path) -> dict:
    """One architecture's row of the matrix."""
    from mlx_lm.utils import load_model as mlx_lm_load_model

    from tests.architecture_models import Unbuildable, build_folder

    result: dict = {"model_type": model_type}
    try:
        folder = build_folder(model_type, workdir / model_type, tokenizer_dir)
    except Unbuildable as why:
        return result | {"status": "unbuildable", "reason": str(why)}
    mlx_lm_model, _ = mlx_lm_load_model(folder)
    started = time.perf_counter()
    scenarios, notes = serve(folder, mlx_lm_model, SCENARIOS, result)
    paths, why_not = fast_paths(folder)
    if paths:
        quantized = quantized_copy(folder, workdir / f"{model_type}-4bit")
        fused, fused_notes = serve(quantized, mlx_lm_load_model(quantized)[0], FUSED_SCENARIOS)
        scenarios |= {f"4-bit {name}": value for name, value in fused.items()}
        notes |= {f"4-bit {name}": value for name, value in fused_notes.items()}
    result |= {"scenarios": scenarios, "fast_paths": paths, **notes}
    if why_not:
        result["not_fused"] = why_not
    result["seconds"] = round(time.perf_counter() - started, 2)
    ok = all(value == "ok" for value in result["scenarios"].values())
    return result | {"status": "served" if ok else "wrong"}


def serve(folder: Path, mlx_lm_model, names: tuple[str, ...], facts: dict | None = None):
    """The scenarios `names` on an engine serving `folder`: (their outcomes, the notes);
    the engine's batching facts into `facts` where given."""
    from inference.engine import Engine, EngineConfig, load_model

    config = EngineConfig(max_batch_size=4, prefill_batch_size=4)
    engine = Engine(lambda: load_model(folder), config=config).start()
    try:
        trial = Trial(engine, mlx_lm_model)
        scenarios = {name: getattr(trial, name)() or "ok" for name in names}
        if names == FUSED_SCENARIOS and engine.loaded.fast_path.path != "kernel":
            scenarios = {name: "served off the quantized kernel" for name in names}
        if facts is not None:
            facts["one_row_at_a_time"] = engine.unbatchable
            facts["prefills_alone"] = engine.prefills_alone
    finally:
        engine.shutdown()
    return scenarios, trial.notes


def quantized_copy(folder: Path, out: Path) -> Path:
    """`folder`'s model quantized to 4 bits (group 64), saved as mlx_lm.convert saves one."""
    import shutil

    from mlx_lm.utils import load_model as mlx_lm_load_model
    from mlx_lm.utils import quantize_model, save_config, save_model

    model, config = mlx_lm_load_model(folder)
    model, config = quantize_model(model, config, 64, 4)
    save_model(out, model)
    save_config(config, config_path=out / "config.json")
    for name in folder.iterdir():
        if name.name.startswith("tokenizer") or name.name.endswith("_map.json"):
            shutil.copy(name, out / name.name)
    return out


def fast_paths(folder: Path) -> tuple[list[str], str | None]:
    """The native paths this architecture takes when served quantized (4 bits), and why
    not the CPU's fused layers where they do not take every block: those where the fast
    path fuses every block (structure and a check at load: layer_shape.py), the
    expert-grouped matmul where it has experts, and the CUDA step where it computes the
    model in bfloat16 (its contract, cuda_decode.Reference, installed as a GPU installs the
    step: by its description and a check against the model's own code)."""
    import mlx.nn as nn
    from mlx_lm.utils import load_model as mlx_lm_load_model

    from inference.engine.acceleration.dense_weights import FastPathOptions, apply_fast_path
    from inference.engine.acceleration.quantized_kernel import KernelSwitchLinear

    model, _ = mlx_lm_load_model(folder)
    try:
        nn.quantize(model, group_size=64, bits=4)
        report = apply_fast_path(model, FastPathOptions(weights="kernel"))
    except Exception as error:  # a shape the quantizer or the kernel does not take
        return [], f"not quantized to 4 bits here ({type(error).__name__})"
    layers = getattr(model, "layers", None)
    fused = isinstance(layers, list) and 0 < report.layers_fused == len(layers)
    experts = any(type(m) is KernelSwitchLinear for _, m in model.named_modules())
    paths = (["CPU fused layers"] if fused else []) + (["CPU expert matmuls"] if experts else [])
    if _cuda_step_takes(folder):
        paths.append("CUDA decode step")
    return paths, None if fused else (report.not_fused or "not every block fused")


def _cuda_step_takes(folder: Path) -> bool:
    import mlx.core as mx
    from mlx.utils import tree_map
    from mlx_lm.utils import load_model as mlx_lm_load_model

    from inference.engine.acceleration import cuda_decode

    model, _ = mlx_lm_load_model(folder)
    floats = (mx.float32, mx.float16, mx.bfloat16)
    model.update(tree_map(lambda p: p.astype(mx.bfloat16) if p.dtype in floats else p,
                          model.parameters()))  # fmt: skip
    return cuda_decode.install(model, cuda_decode.Reference)


def run_matrix(model_types: list[str], processes: int = 2) -> dict[str, dict]:
    """The matrix over `model_types`, in child processes (this module's `main`), `processes`
    at a time; an architecture whose process died is recorded as such and the rest of its
    share goes on in a new one."""
    root = Path(__file__).resolve().parents[2]
    results: dict[str, dict] = {}
    shares = [model_types[i::processes] for i in range(processes)]
    with tempfile.TemporaryDirectory(prefix="mlxlab-matrix-") as scratch:
        while any(shares):
            children = []
            for index, share in enumerate(shares):
                if share:
                    out = Path(scratch) / f"{index}-{len(results)}.jsonl"
                    argv = [sys.executable, "-m", "tests.engine.architecture_matrix", str(out)]
                    child = subprocess.Popen([*argv, *share], cwd=root, stderr=subprocess.DEVNULL)
                    children.append((index, out, child))
            for index, out, child in children:
                child.wait()
                started = None
                for line in out.read_text().splitlines() if out.exists() else []:
                    entry = json.loads(line)
                    if "start" in entry:
                        started = entry["start"]
                    else:
                        results[entry["model_type"]] = entry
                        started = None
                if started is not None:  # the process died on it
                    results[started] = {"model_type": started, "status": "crashed",
                                        "reason": f"the process exited with {child.returncode}"}  # fmt: skip
                shares[index] = [t for t in shares[index] if t not in results]
    return results


STATUS_WORDS = {
    "served": "served",
    "wrong": "served wrong",
    "failed": "not served",
    "crashed": "not served (crashed)",
    "unbuildable": "not built here",
}


def render(results: dict[str, dict]) -> str:
    """docs/ARCHITECTURES.md from the matrix's results."""
    served = sum(r["status"] == "served" for r in results.values())
    lines = [
        "# Architectures",
        "",
        "Every architecture the installed mlx-lm builds, served by the engine: a tiny random-weight",
        "model of each (tests/architecture_models.py) through the batch, the prompt cache, drafts",
        "and a resume, greedy tokens against mlx-lm's own `generate_step`",
        "(tests/engine/architecture_matrix.py, run by `make test`; this page is its output:",
        "`.venv/bin/python -m tests.engine.architecture_matrix --doc`).",
        "",
        f"{served} of {len(results)} served as mlx-lm's `generate_step` computes them.",
        "Fast paths: the CPU's fused layers and expert matmuls (4-bit copies served through",
        "them, against mlx-lm on the same weights); `CUDA decode step`: a GPU's one-token",
        "step takes the architecture in bfloat16 (its contract installed, checked against the",
        "model's own code).",
        "",
        "| architecture | served | batching | fast paths | notes |",
        "|---|---|---|---|---|",
    ]
    for model_type in sorted(results):
        result = results[model_type]
        status = STATUS_WORDS[result["status"]]
        if result["status"] == "wrong":
            wrong = [f"{k}: {v}" for k, v in result["scenarios"].items() if v != "ok"]
            status += f" ({'; '.join(wrong)})"
        batching = "rows together"
        if result.get("one_row_at_a_time"):
            batching = "one row at a time: " + result["one_row_at_a_time"].split(": served")[0]
        elif result.get("prefills_alone"):
            batching = "rows together, prompts prefilled one at a time (recurrent state)"
        notes = [
            result.get("reason", ""),
            result.get("batching", ""),
            result.get("prompt_cache", ""),
            f"not fused: {result['not_fused']}" if result.get("not_fused") else "",
        ]
        cells = [model_type, status, batching, ", ".join(result.get("fast_paths", [])) or "-",
                 "; ".join(n for n in notes if n) or ""]  # fmt: skip
        lines.append("| " + " | ".join(cell.replace("|", "/") for cell in cells) + " |")
    return "\n".join(lines) + "\n"


DOC = Path(__file__).resolve().parents[2] / "docs" / "ARCHITECTURES.md"


def main() -> None:
    if sys.argv[1:] == ["--doc"]:
        from tests.architecture_models import architectures

        DOC.write_text(render(run_matrix(architectures())))
        print(f"wrote {DOC}")
        return
    out, *wanted = sys.argv[1:]
    prepare_mlx_process()
    from tests.architecture_models import architectures

    root = Path(__file__).resolve().parents[2]
    tokenizer_dir = root / "var" / "models" / "smollm2-135m-instruct"
    with tempfile.TemporaryDirectory(prefix="mlxlab-matrix-") as work, open(out, "a") as lines:
        for model_type in wanted or architectures():
            lines.write(json.dumps({"start": model_type}) + "\n")
            lines.flush()
            try:
                result = check(model_type, Path(work), tokenizer_dir)
            except Exception as exc:  # the engine's fault or the model's: the matrix says which
                result = {"model_type": model_type, "status": "failed",
                          "reason": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}  # fmt: skip
            lines.write(json.dumps(result) + "\n")
            lines.flush()


if __name__ == "__main__":
    main()
