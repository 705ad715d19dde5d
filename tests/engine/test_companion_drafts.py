"""A draft model's companion worker, asked as the target's engine asks it: a real companion
process proposes what the same draft model proposes inline, refusals included (its cache
per row trimmed); no companion at all means no drafts, at once."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from inference.engine.acceleration.loader import load_model
from inference.engine.drafts.companion import CompanionDrafter, CompanionLinks
from inference.engine.drafts.draft_model import ModelDrafter

ROOT = Path(__file__).resolve().parents[2]
PROMPT = [1, 4093, 314, 253, 2365, 1033, 30, 2, 198, 1, 520, 9531, 198, 27871, 260, 1365]


@pytest.fixture(scope="module")
def companion(draft_model_folder, tmp_path_factory):
    address = f"ipc://{tmp_path_factory.mktemp('companion')}/draft.sock"
    # The process `manage.py modelworker --companion` runs, without Django.
    serve = (
        "from inference.engine.process.startup import prepare_mlx_process\n"
        "prepare_mlx_process()\n"
        "from inference.engine.process.companion import CompanionServer\n"
        f"CompanionServer(model='draft', path={str(draft_model_folder)!r}, address={address!r})"
        ".serve_forever()"
    )
    process = subprocess.Popen([sys.executable, "-c", serve], cwd=ROOT)
    try:
        yield address, process
    finally:
        process.terminate()
        process.wait(10)


def _ready(links: CompanionLinks, address: str, process) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert process.poll() is None, "the companion exited"
        if CompanionDrafter(links, address).propose(PROMPT, 1):
            return
        time.sleep(0.5)
    pytest.fail("the companion did not answer")


def test_a_companion_proposes_what_the_draft_proposes_inline(companion, draft_model_folder):
    address, process = companion
    links = CompanionLinks()
    _ready(links, address, process)
    inline = ModelDrafter(load_model(draft_model_folder).model, 4)
    remote = CompanionDrafter(links, address, 4)
    history = list(PROMPT)
    for step in range(6):
        expected = inline.propose(history, 4)
        assert remote.propose(history, 4) == expected, step
        # Odd steps: the target refuses all but the first draft, and samples its own token.
        kept = expected if step % 2 == 0 else expected[:1]
        history += [*kept, (expected[-1] + 1 + step) % 1000]
    assert not remote.off
    remote.close()


def test_no_companion_means_no_drafts_at_once(tmp_path):
    drafter = CompanionDrafter(CompanionLinks(), f"ipc://{tmp_path}/nobody.sock", 4)
    started = time.monotonic()
    assert drafter.propose(PROMPT, 4) == [] and drafter.off
    assert drafter.propose(PROMPT, 4) == []  # off: not asked again
    assert time.monotonic() - started < 1.0
