"""Token-level credit heatmaps (HTML): what each method's update did to each token of sample responses.

Reads the samples a run logged (`samples.jsonl`: tokens, reward, first wrong step, per-token `advantage`,
`loss_mask` and `credit` = `-rows * dLoss/dlogp`, see `credo.diagnostics`) at one step of each method's first
seed, and renders them as one page:

- each token as its decoded text (`token_texts`: byte-level BPE markers such as `Ġ`/`Ċ` become the spaces
  and newlines the tokenizer's own decoding gives; with token ids and a tokenizer, that decoding itself), in
  a block that wraps at the page's width (a response of thousands of tokens stays readable);
- a diverging blue-orange palette (readable with the common colour-vision deficiencies): orange tokens are
  pushed down, blue ones up; one scale for the whole page by default, shown in a colour bar, with a switch
  to scale each row to its own largest |credit|;
- the tokens of a failed response from its first wrong step on underlined, and each such row's blame
  precision beside it (the share of its negative credit on or after that step);
- rows that got no credit say why (zero advantage, e.g. a group whose rewards were all equal; no token
  inside the loss mask; a gradient the loss cut off).

With the same seed, i.i.d. samplers draw the same responses at step 1, so their rows differ only by credit.
The page's records are also written beside it (`credit_<difficulty>.jsonl`), so that the page can be drawn
again without the runs (`credo report --from-json`).
"""

from __future__ import annotations

import codecs
import html
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from credo.io import iter_jsonl, printable, write_lines_atomic, write_text_atomic

SHADES = 10
"""Steps of colour intensity on each side of zero."""
DECADES = 3
"""Decades of |credit| a logarithmic page scale spans (smaller values get the lightest shade)."""
NEGATIVE = ((0xF7, 0xF7, 0xF7), (0xFD, 0xB8, 0x63), (0xE0, 0x82, 0x14), (0xB3, 0x58, 0x06))
"""Colour stops from zero to the largest negative credit (PuOr's orange arm)."""
POSITIVE = ((0xF7, 0xF7, 0xF7), (0x92, 0xC5, 0xDE), (0x43, 0x93, 0xC3), (0x21, 0x66, 0xAC))
"""Colour stops from zero to the largest positive credit (RdBu's blue arm)."""
SCALES = ("page", "row")


@cache
def byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet read backwards: the printable character standing for each byte -> the byte.

    Written out here rather than imported: transformers keeps its `bytes_to_unicode` in a different module from
    one release to another (`models.gpt2.tokenization_gpt2` in 4.x, `convert_slow_tokenizer` in 5.x).

    >>> byte_decoder()["Ġ"], byte_decoder()["Ċ"], byte_decoder()["a"]
    (32, 10, 97)
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = list(printable)
    shifted = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + shifted)
            shifted += 1
    return {chr(c): b for b, c in zip(printable, chars)}


_SENTENCEPIECE_BYTE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def token_texts(tokens: Sequence[str], ids: Sequence[int] | None = None, tokenizer=None) -> list[str]:
    """Each token's share of the decoded text, so that `"".join(result)` is the response as the tokenizer
    decodes it.

    With `ids` and a `tokenizer` (a Hugging Face tokenizer), the tokenizer's own incremental decoding. Else,
    from the token strings: byte-level BPE tokens (every character in GPT-2's byte alphabet, as
    `convert_ids_to_tokens` gives them: `Ġ` a space, `Ċ` a newline) are read back as bytes and decoded as
    UTF-8, a character split over tokens going to the token that completes it; SentencePiece tokens have
    `▁` read as a space and `<0xNN>` as a byte; any other token (e.g. the testbed's `</thought>`) is its
    own text.

    >>> token_texts(["Hello", "Ġworld", "Ċ", "ĠÃ", "©"])
    ['Hello', ' world', '\\n', ' ', 'é']
    >>> token_texts(["▁Hello", "▁world", "<0x0A>"]), token_texts(["*", "7", "</thought>", " x"])
    ([' Hello', ' world', '\\n'], ['*', '7', '</thought>', ' x'])
    """
    if ids is not None and tokenizer is not None and len(ids) == len(tokens):
        return _tokenizer_texts(list(ids), tokenizer)
    alphabet = byte_decoder()
    if all(c in alphabet for token in tokens for c in token):
        return _byte_texts([bytes(alphabet[c] for c in token) for token in tokens])
    if any("▁" in token or _SENTENCEPIECE_BYTE.fullmatch(token) for token in tokens):
        return _byte_texts([bytes([int(m.group(1), 16)]) if (m := _SENTENCEPIECE_BYTE.fullmatch(token))
                            else token.replace("▁", " ").encode() for token in tokens])
    return list(tokens)


def _byte_texts(pieces: list[bytes]) -> list[str]:
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    texts = [decoder.decode(piece) for piece in pieces]
    if texts:
        texts[-1] += decoder.decode(b"", final=True)
    return texts


def _tokenizer_texts(ids: list[int], tokenizer) -> list[str]:
    def decode(part: list[int]) -> str:
        return tokenizer.decode(part, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    texts, start, emitted = [], 0, 0  # decode from `start` on (decoders treat a text's first token specially)
    for i in range(len(ids)):
        full = decode(ids[start:i + 1])
        stable = full.rstrip("\ufffd") if i + 1 < len(ids) else full  # a character cut between tokens: wait
        texts.append(stable[emitted:])
        emitted = max(emitted, len(stable))
        if stable == full and i - start > 16:  # nothing pending: restart the window a few tokens back
            start = i - 3
            emitted = len(decode(ids[start:i + 1]))
    return texts


def samples_at(run_dir: Path, step: int) -> list[dict]:
    """The samples a run logged at `step` with their credit, read from `samples.jsonl` one line at a time
    (up to the first later step: the file is in step order)."""
    found = []
    for record in iter_jsonl(run_dir / "samples.jsonl"):
        if record["step"] > step:
            break
        if record["step"] == step and "credit" in record:
            found.append(record)
    return found


def run_tokenizer(run_dir: Path):
    """The tokenizer a run saved with its model (`model/`), or None when there is none or it cannot load."""
    model = run_dir / "model"
    if not (model / "tokenizer_config.json").exists():
        return None
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(model, trust_remote_code=False)
    except (OSError, ValueError, KeyError, ImportError):  # without it the page shows the generic decoding
        return None


def collect_samples(runs_by_method: dict, step: int) -> list[dict]:
    """The heatmap's records: each method's first seed's samples at `step`, with `method`, `seed` and the
    decoded `text` of each token (through the run's tokenizer where the samples carry token `ids`)."""
    records = []
    for method, runs in runs_by_method.items():
        if not runs:
            continue
        run = min(runs, key=lambda r: r.seed)
        samples = samples_at(run.path, step)
        tokenizer = run_tokenizer(run.path) if any(s.get("ids") for s in samples) else None
        for sample in samples:
            text = token_texts(sample["tokens"], sample.get("ids"), tokenizer)
            records.append({"method": method, "seed": run.seed, **sample, "text": text})
        if not samples:
            records.append({"method": method, "seed": run.seed, "step": step, "missing": True})
    return records


def row_blame_precision(sample: dict) -> float | None:
    """A failed response's share of negative credit on or after its first wrong step (`credo.diagnostics`,
    one row); None for a correct response, an unknown step, or a row without negative credit.

    >>> row_blame_precision({"correct": False, "blame_start": 2, "credit": [-1.0, -1.0, -2.0, 0.5]})
    0.5
    """
    start = sample.get("blame_start")
    if sample.get("correct") or start is None or start < 0:
        return None
    blame = [max(0.0, -c) for c in sample["credit"]]
    total = sum(blame)
    return sum(blame[start:]) / total if total > 0 else None


def no_credit_reason(sample: dict, prompt_rewards: Sequence[float] = ()) -> str | None:
    """Why a row got no credit at all (None when some token got some).

    `prompt_rewards`: the rewards of the page's responses to the same prompt at the same step (its group,
    as far as the log shows it)."""
    credit = sample["credit"]
    if any(c != 0 for c in credit):
        return None
    if not credit:
        return "no credit: empty response"
    mask, advantage = sample.get("loss_mask"), sample.get("advantage")
    if mask is not None and not any(mask):
        return "no credit: outside the loss mask (none of its tokens is trained)"
    if advantage is not None:
        trained = [a for a, m in zip(advantage, mask or [True] * len(advantage)) if m]
        if all(a == 0 for a in trained):
            if len(prompt_rewards) > 1 and len(set(prompt_rewards)) == 1:
                return (f"no credit: zero advantage (all {len(prompt_rewards)} logged responses to this prompt have "
                        f"reward {prompt_rewards[0]:g}: a group of equal rewards carries no signal)")
            return "no credit: zero advantage (the method's credit gave this response none)"
        return "no credit: its advantage is not zero, but the loss passed no gradient (clipped or weighted 0)"
    return "no credit (the log holds no advantage or loss mask to say why)"


def _mix(stops: tuple[tuple[int, int, int], ...], level: float) -> str:
    position = level * (len(stops) - 1)
    i = min(int(position), len(stops) - 2)
    t = position - i
    rgb = (round(a + (b - a) * t) for a, b in zip(stops[i], stops[i + 1]))
    return "#{:02x}{:02x}{:02x}".format(*rgb)


@dataclass(frozen=True)
class Scale:
    """How |credit| maps to a shade: linear up to `top`, or logarithmic over `DECADES` decades below it."""

    top: float
    log: bool = False

    def level(self, value: float) -> float:
        """0 (white) to 1 (the full colour) for |value|; a value that is not 0 never maps to white."""
        if value == 0 or self.top <= 0:
            return 0.0
        if self.log:
            level = 1 + math.log10(min(1.0, abs(value) / self.top)) / DECADES
        else:
            level = min(1.0, abs(value) / self.top)
        return max(level, 1 / SHADES)

    def shade(self, value: float) -> str:
        return "z" if value == 0 else f"{'n' if value < 0 else 'p'}{round(SHADES * self.level(value))}"

    def ticks(self) -> list[tuple[float, str]]:
        """(position 0-1 on the bar, label): the bar runs from -top through 0 to +top."""
        if self.top <= 0:
            return [(0.5, "0")]
        magnitudes = [self.top / 10**k for k in range(DECADES)] if self.log else [self.top, self.top / 2]
        out = [(0.5, "0")]
        for m in magnitudes:
            out += [(0.5 - self.level(m) / 2, f"−{m:.2g}"), (0.5 + self.level(m) / 2, f"+{m:.2g}")]
        return sorted(out)


def page_scale(records: list[dict]) -> Scale:
    """One scale for the page: linear to its largest |credit|, or logarithmic (`DECADES` decades) when rows'
    largest |credit| differ by more than 10x (methods with other normalisers, e.g. GRPO-lambda's sum over
    tokens, would otherwise leave every other row white).

    >>> page_scale([{"credit": [0.1, -0.2]}, {"credit": [0.05]}]), page_scale([{"credit": [2.0]}, {"credit": [0.04]}] * 2)
    (Scale(top=0.2, log=False), Scale(top=2.0, log=True))
    """
    peaks = sorted(max(abs(c) for c in r["credit"]) for r in records if any(r["credit"]))
    if not peaks:
        return Scale(0.0)
    return Scale(peaks[-1], log=peaks[-1] > 10 * peaks[(len(peaks) - 1) // 2])


def _visible(text: str) -> str:
    """A token's text for the page: newlines shown as ↵ before the break, an empty token as a faint dot."""
    if text == "":
        return '<i class="e">·</i>'
    return html.escape(text).replace("\n", '<i class="e">↵</i>\n')


def render_row(sample: dict, scale: Scale, prompt_rewards: Sequence[float] = ()) -> str:
    """One response: meta line (reward, verdict, blame precision, advantage, reason for no credit) and its
    tokens as spans coloured on the page's scale and on the row's own (the page's switch picks one)."""
    credit = sample["credit"]
    texts = sample.get("text") or token_texts(sample["tokens"])
    mask = sample.get("loss_mask") or [True] * len(credit)
    advantage = sample.get("advantage")
    row_scale = Scale(max((abs(c) for c in credit), default=0.0))
    start = sample.get("blame_start")
    blamed_from = start if not sample["correct"] and start is not None and start >= 0 else None
    spans = []
    for t, (text, value) in enumerate(zip(texts, credit)):
        classes = [f"g{scale.shade(value)}", f"r{row_scale.shade(value)}"]
        if not mask[t]:
            classes.append("m")
        if blamed_from is not None and t >= blamed_from:
            classes.append("b")
        raw = sample["tokens"][t] if t < len(sample.get("tokens", ())) else text
        tip = f"{raw!r} credit {value:+.4g}" + (f" advantage {advantage[t]:+.4g}" if advantage else "")
        tip += "" if mask[t] else " (outside the loss mask)"
        spans.append(f'<span class="{" ".join(classes)}" title="{html.escape(tip)}">{_visible(text)}</span>')
    if sample["correct"]:
        verdict = "correct" + (f" (yet it holds a wrong step from step {sample['first_wrong_step']})"
                               if sample.get("first_wrong_step") is not None else "")
    elif sample.get("first_wrong_step") is not None:
        verdict = f"wrong from step {sample['first_wrong_step']} (underlined)"
    else:
        verdict = "wrong"
    meta = [f"reward {sample['reward']:g}", verdict, f"{len(credit)} tokens"]
    precision = row_blame_precision(sample)
    if precision is not None:
        meta.append(f"blame precision {precision:.2f}")
    if advantage:
        trained = [a for a, m in zip(advantage, mask) if m]
        if trained:
            low, high = min(trained) + 0.0, max(trained) + 0.0  # + 0.0: no "-0"
            meta.append(f"advantage {low:+.3g}" if low == high else f"advantage {low:+.3g} to {high:+.3g}")
    masked = sum(1 for m in mask if not m)
    if masked and masked < len(mask):
        meta.append(f"{masked} tokens outside the loss mask (grey)")
    reason = no_credit_reason(sample, prompt_rewards)
    notes = f'<span class="why">{html.escape(reason)}</span>' if reason else ""
    return (f'<div class="row{" none" if reason else ""}"><div class="meta">{html.escape(" · ".join(meta))}{notes}</div>'
            f'<div class="toks">{"".join(spans)}</div></div>')


def _prompt(text: str) -> str:
    if len(text) <= 120 and "\n" not in text:
        return f'<div class="prompt">prompt: <span class="ptext">{html.escape(text)}</span></div>'
    head = html.escape(" ".join(text.split())[:100])
    return (f'<details class="prompt"><summary>prompt: {head}… ({len(text):,} characters)</summary>'
            f'<div class="ptext">{html.escape(text)}</div></details>')


def _css_rules(prefix: str, body: str) -> str:
    rules = []
    for sign, stops in (("n", NEGATIVE), ("p", POSITIVE)):
        for level in range(SHADES + 1):
            colour = _mix(stops, level / SHADES)
            text = ";color:#fff" if level > 0.65 * SHADES else ""
            rules.append(f"body.{body} .{prefix}{sign}{level}{{background:{colour}{text}}}")
    return "".join(rules)


STYLE = (
    "*{box-sizing:border-box}"
    "body{font-family:sans-serif;max-width:1200px;margin:0 auto;padding:0 16px 2em;color:#222;overflow-wrap:anywhere}"
    "h2{margin:1.4em 0 .3em;font-size:1.2em}h2 small{font-weight:normal;color:#555;font-size:.8em}"
    ".key{position:sticky;top:0;background:#fff;padding:8px 0;border-bottom:1px solid #ddd;z-index:1;font-size:13px}"
    ".bar{display:flex;align-items:flex-start;gap:14px;flex-wrap:wrap}"
    ".lpage,.lrow{width:420px;max-width:55vw}.ticks{position:relative;height:15px;font-size:11px}"
    ".ticks span{position:absolute;transform:translateX(-50%);white-space:nowrap}.note{color:#666;font-size:11px}"
    ".grad{height:14px;border:1px solid #aaa;background:linear-gradient(to right,"
    + ",".join(_mix(NEGATIVE, 1 - i / 6) for i in range(7)) + "," + ",".join(_mix(POSITIVE, i / 6) for i in range(1, 7))
    + ")}"
    "body.page .lrow,body.row .lpage{display:none}"
    ".row{margin:10px 0;padding:6px 8px;border-left:3px solid #ddd}.row.none{border-left-color:#999;background:#fafafa}"
    ".meta{color:#555;font-size:12px;margin-bottom:3px}.why{margin-left:.6em;color:#333;font-style:italic}"
    ".prompt{color:#333;font-size:12px;margin-top:.8em}.ptext{font-family:monospace;white-space:pre-wrap;"
    "overflow-wrap:anywhere}"
    ".toks{font-family:monospace;font-size:14px;line-height:1.7;white-space:pre-wrap;overflow-wrap:anywhere;"
    "word-break:break-word;tab-size:4}"
    ".toks span{border-radius:2px}.toks .m{color:#999;background:none!important;text-decoration:line-through #bbb}"
    ".toks .b{text-decoration:underline;text-decoration-thickness:2px;text-underline-offset:3px}"
    ".e{color:#999;font-style:normal}"
)


def render_page(records: list[dict], *, title: str, scale: str = "page") -> str:
    """The heatmap page of `collect_samples`' records (grouped by method, in their order)."""
    if scale not in SCALES:
        raise ValueError(f"heatmap scale must be one of {SCALES}, got {scale!r}")
    with_credit = [r for r in records if not r.get("missing")]
    scale_of_page = page_scale(with_credit)
    rewards: dict[tuple, list[float]] = {}
    for r in with_credit:
        rewards.setdefault((r["method"], r["step"], r["prompt"]), []).append(r["reward"])
    sections: dict[str, list[str]] = {}
    seeds: dict[str, int] = {}
    last_prompt: dict[str, str] = {}
    for r in records:
        method = r["method"]
        rows = sections.setdefault(method, [])
        seeds[method] = r["seed"]
        if r.get("missing"):
            rows.append("<p>no samples with credit logged at this step</p>")
            continue
        if last_prompt.get(method) != r["prompt"]:
            rows.append(_prompt(r["prompt"]))
            last_prompt[method] = r["prompt"]
        rows.append(render_row(r, scale_of_page, rewards[(method, r["step"], r["prompt"])]))
    heads = {}
    for method in sections:
        mine = [s for s in with_credit if s["method"] == method]
        located = [s for s in mine if row_blame_precision(s) is not None]
        blame = sum(max(0.0, -c) for s in located for c in s["credit"])
        after = sum(max(0.0, -c) for s in located for c in s["credit"][s["blame_start"]:])
        summary = f" · blame precision over its failed rows {after / blame:.2f}" if blame > 0 else ""
        heads[method] = (f"<h2>{html.escape(method)} <small>seed {seeds[method]} · {len(mine)} responses"
                         f"{summary}</small></h2>")
    body = "".join(heads[m] + "".join(rows) for m, rows in sections.items())
    def bar(ticks: list[tuple[float, str]], kind: str, note: str) -> str:
        labels = "".join(f'<span style="left:{100 * x:.1f}%">{html.escape(t)}</span>' for x, t in ticks)
        return (f'<div class="{kind}"><div class="grad"></div><div class="ticks">{labels}</div>'
                f'<div class="note">{html.escape(note)}</div></div>')

    page_note = (f"one scale for the page, logarithmic: {DECADES} decades below its largest |credit|"
                 if scale_of_page.log else "one scale for the page, linear to its largest |credit|")
    key = (
        '<div class="key"><div class="bar"><span>pushed down</span>'
        + bar(scale_of_page.ticks(), "lpage", page_note)
        + bar([(0.0, "−row max"), (0.5, "0"), (1.0, "+row max")], "lrow", "each row linear to its own largest |credit|")
        + '<span>pushed up</span>'
        f'<label><input type="checkbox" id="rowscale"{" checked" if scale == "row" else ""} '
        "onchange=\"document.body.className=this.checked?'row':'page'\"> scale each row to its own largest |credit|"
        "</label></div></div>"
    )
    legend = ("<p>Credit of a token = −rows · dLoss/dlogp of its mini-batch (summed over the step's updates): orange "
              "pushes the token down, blue up, white is none; one colour scale for the page (the bar), or each row's "
              "own with the switch. Underlined: a failed response's tokens from its first wrong step on (where "
              "perfect blame would fall); its blame precision is the share of its negative credit there. Grey, struck "
              "through: outside the loss mask. ↵ marks a newline. Hover a token for its raw form and values.</p>")
    style = STYLE + _css_rules("g", "page") + _css_rules("r", "row")
    return (f"<!doctype html><html><head><meta charset='utf-8'><meta name='viewport' content='width=device-width'>"
            f"<title>{html.escape(printable(title, 200))}</title><style>{style}</style></head><body class=\"{scale}\">"
            f"<h1>{html.escape(title)}</h1>{legend}{key}{body}</body></html>\n")


def write_heatmap(records: list[dict], path: Path, *, title: str, scale: str = "page") -> Path:
    """The page (`path`) and its records beside it (`path` with `.jsonl`), both written atomically."""
    write_lines_atomic(path.with_suffix(".jsonl"), (json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    write_text_atomic(path, render_page(records, title=title, scale=scale))
    return path
