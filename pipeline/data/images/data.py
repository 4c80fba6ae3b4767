"""Image data from local files only (nothing is downloaded): CIFAR-10/100, CIFAR-10-C, digits.

Layouts read:

- CIFAR-10 python batches (``cifar-10-batches-py``): ``data_batch_1`` .. ``data_batch_5`` and
  ``test_batch``, each a pickled dict with ``b"data"`` (n, 3072) uint8 (rows of 1,024 red, then
  green, then blue values, each row-major 32x32) and ``b"labels"`` (n ints); ``batches.meta``
  (optional) holds ``b"label_names"``.
- CIFAR-100 python (``cifar-100-python``): ``train`` and ``test`` with ``b"data"``,
  ``b"fine_labels"`` and ``b"coarse_labels"``; ``meta`` (optional) ``b"fine_label_names"``.
- CIFAR-10-C (Hendrycks & Dietterich 2019): ``<corruption>.npy`` (5·n, 32, 32, 3) uint8, the n
  test images at severity 1, then 2, ..., 5; ``labels.npy`` (5·n,) their labels.
- scikit-learn's bundled handwritten digits (1,797 8x8 images, values 0..16), upsampled
  bilinearly and split by seed (stratified, the same split for a seed every time).

Pickles are read with an unpickler that admits only the globals a numpy array needs, so a
tampered batch file cannot run code. Every problem with a file raises ``VisionDataError``
with one line naming the file.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.core.errors import PipelineError

CIFAR10_TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))  # CIFAR-10 training batch files
CIFAR10_TEST = ("test_batch",)  # CIFAR-10 test batch file
CIFAR_SIDE = 32  # CIFAR image side (pixels)
CIFAR_C_SEVERITIES = 5  # severities stacked in one CIFAR-10-C file
DIGITS_SPLIT = (0.6, 0.2, 0.2)  # train / val / test fractions of each digit class


class VisionDataError(PipelineError, ValueError):
    """A missing or malformed image data file, or an argument naming data that does not exist; the
    message names the file or the argument (a ``PipelineError``: the CLI prints it as one line)."""


@dataclass
class ImageSet:
    """Images with integer labels."""

    images: np.ndarray  # (N, C, H, W): uint8 0..255 or float32 in [0, 1]
    labels: np.ndarray  # (N,) int64 class ids in [0, num_classes)
    num_classes: int  # classes of the task (not only those present)
    name: str  # where it came from, for messages and reports

    def __post_init__(self) -> None:
        if self.images.ndim != 4 or self.labels.shape != (self.images.shape[0],):
            raise VisionDataError(f"{self.name}: images must be (N, C, H, W) and labels (N,), got "
                             f"{self.images.shape} and {self.labels.shape}")
        if self.images.dtype not in (np.uint8, np.float32):
            raise VisionDataError(f"{self.name}: images must be uint8 or float32, got {self.images.dtype}")
        if self.labels.size and (self.labels.min() < 0 or self.labels.max() >= self.num_classes):
            raise VisionDataError(f"{self.name}: labels must lie in [0, {self.num_classes})")

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def floats(self, index: np.ndarray | slice | None = None) -> np.ndarray:
        """Images (n, C, H, W) as float32 in [0, 1] (all, or the rows of ``index``)."""
        x = self.images if index is None else self.images[index]
        return x.astype(np.float32) / 255.0 if x.dtype == np.uint8 else np.asarray(x, dtype=np.float32)

    def subset(self, index: np.ndarray, name: str | None = None) -> "ImageSet":
        return ImageSet(self.images[index], self.labels[index], self.num_classes, name or self.name)

    def channel_stats(self) -> tuple[list[float], list[float]]:
        """Per-channel mean and standard deviation over all pixels, in [0, 1] units."""
        x = self.floats()
        return x.mean(axis=(0, 2, 3)).tolist(), x.std(axis=(0, 2, 3)).tolist()


# ---------------------------------------------------------------------------- safe unpickling


_NUMPY_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
    ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode"),
}


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickler admitting builtin containers and numpy arrays only."""

    def find_class(self, module: str, name: str):
        if (module, name) in _NUMPY_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load global {module}.{name}")


def _load_pickle(path: Path) -> dict:
    if not path.is_file():
        raise VisionDataError(f"{path}: not found")
    try:
        with open(path, "rb") as fh:
            obj = _ArrayUnpickler(fh, encoding="bytes").load()
    except Exception as exc:  # noqa: BLE001 (any unpickling failure is a malformed file)
        raise VisionDataError(f"{path}: not a CIFAR python batch ({type(exc).__name__}: {exc})") from None
    if not isinstance(obj, dict):
        raise VisionDataError(f"{path}: not a CIFAR python batch (a pickled {type(obj).__name__}, expected a dict)")
    return {(k.decode("latin1") if isinstance(k, bytes) else k): v for k, v in obj.items()}


def _batch_arrays(path: Path, label_key: str) -> tuple[np.ndarray, np.ndarray]:
    """(images (n, 3, 32, 32) uint8, labels (n,) int64) of one CIFAR python batch file."""
    batch = _load_pickle(path)
    for key in ("data", label_key):
        if key not in batch:
            raise VisionDataError(f"{path}: malformed CIFAR batch: no {key!r} entry (has {sorted(map(str, batch))})")
    data = np.asarray(batch["data"])
    side = CIFAR_SIDE * CIFAR_SIDE
    if data.ndim != 2 or data.shape[1] != 3 * side or data.dtype != np.uint8:
        raise VisionDataError(f"{path}: malformed CIFAR batch: 'data' must be (n, {3 * side}) uint8, "
                              f"got {data.shape} {data.dtype}")
    try:
        labels = np.asarray(batch[label_key], dtype=np.int64)
    except (TypeError, ValueError):
        raise VisionDataError(f"{path}: malformed CIFAR batch: {label_key!r} is not a list of integers") from None
    if labels.shape != (data.shape[0],):
        raise VisionDataError(f"{path}: malformed CIFAR batch: {labels.shape[0] if labels.ndim else 0} labels "
                              f"for {data.shape[0]} images")
    # (n, 3072) -> (n, 3, 32, 32): channel planes of row-major pixels
    return data.reshape(-1, 3, CIFAR_SIDE, CIFAR_SIDE), labels


def read_cifar(root: Path | str, dataset: str = "cifar10", split: str = "train",
               label_mode: str = "fine") -> ImageSet:
    """CIFAR-10 or CIFAR-100 ``split`` (train | test) from its python batch directory ``root``.

    ``label_mode`` (CIFAR-100 only): ``fine`` (100 classes) or ``coarse`` (20 superclasses).
    Labels outside the class range make the file malformed.
    """
    root = Path(root)
    if split not in ("train", "test"):
        raise VisionDataError(f"split must be 'train' or 'test', got {split!r}")
    if dataset == "cifar10":
        files, key, classes = (CIFAR10_TRAIN if split == "train" else CIFAR10_TEST), "labels", 10
    elif dataset == "cifar100":
        if label_mode not in ("fine", "coarse"):
            raise VisionDataError(f"label_mode must be 'fine' or 'coarse', got {label_mode!r}")
        files, key, classes = (split,), f"{label_mode}_labels", (100 if label_mode == "fine" else 20)
    else:
        raise VisionDataError(f"dataset must be 'cifar10' or 'cifar100', got {dataset!r}")
    if not root.is_dir():
        raise VisionDataError(f"{root}: not a directory (expected the {dataset} python batches)")
    images, labels = [], []
    for name in files:
        x, y = _batch_arrays(root / name, key)
        if y.size and (y.min() < 0 or y.max() >= classes):
            raise VisionDataError(f"{root / name}: malformed CIFAR batch: labels outside [0, {classes})")
        images.append(x)
        labels.append(y)
    return ImageSet(np.concatenate(images), np.concatenate(labels), classes, f"{dataset}:{split}")


def read_cifar_c(root: Path | str, corruption: str, severity: int, num_classes: int = 10) -> ImageSet:
    """One corruption at one severity (1..5) of CIFAR-10-C (or CIFAR-100-C) in ``.npy`` layout."""
    root = Path(root)
    if not 1 <= severity <= CIFAR_C_SEVERITIES:
        raise VisionDataError(f"severity must lie in 1..{CIFAR_C_SEVERITIES}, got {severity}")
    images = _load_npy(root / f"{corruption}.npy")
    labels = _load_npy(root / "labels.npy")
    path = root / f"{corruption}.npy"
    if images.ndim != 4 or images.shape[3] != 3 or images.dtype != np.uint8:
        raise VisionDataError(f"{path}: malformed CIFAR-C file: expected (5·n, H, W, 3) uint8, "
                              f"got {images.shape} {images.dtype}")
    if images.shape[0] % CIFAR_C_SEVERITIES:
        raise VisionDataError(f"{path}: malformed CIFAR-C file: {images.shape[0]} images do not split into "
                              f"{CIFAR_C_SEVERITIES} severities")
    if labels.shape != (images.shape[0],) or labels.dtype.kind not in "iu":
        raise VisionDataError(f"{root / 'labels.npy'}: malformed CIFAR-C labels: expected ({images.shape[0]},) "
                              f"integers, got {labels.shape} {labels.dtype}")
    n = images.shape[0] // CIFAR_C_SEVERITIES
    rows = slice((severity - 1) * n, severity * n)
    y = np.asarray(labels[rows], dtype=np.int64)
    if y.size and (y.min() < 0 or y.max() >= num_classes):
        raise VisionDataError(f"{root / 'labels.npy'}: malformed CIFAR-C labels: outside [0, {num_classes})")
    x = np.ascontiguousarray(np.asarray(images[rows]).transpose(0, 3, 1, 2))  # (n, H, W, 3) -> (n, 3, H, W)
    return ImageSet(x, y, num_classes, f"{root.name}:{corruption}:{severity}")


def _load_npy(path: Path) -> np.ndarray:
    if not path.is_file():
        raise VisionDataError(f"{path}: not found")
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except Exception as exc:  # noqa: BLE001 (any load failure is a malformed file)
        raise VisionDataError(f"{path}: not a .npy array ({type(exc).__name__}: {exc})") from None


# ---------------------------------------------------------------------------- digits


@dataclass
class Splits:
    """Train / validation / test sets of one dataset."""

    train: ImageSet
    val: ImageSet
    test: ImageSet


def digits_splits(seed: int = 0, size: int = 16, fractions: tuple[float, float, float] = DIGITS_SPLIT) -> Splits:
    """scikit-learn's digits as float32 [0, 1] images (N, 1, size, size), split by ``seed``.

    Each class is permuted with ``numpy.random.default_rng(seed)`` (classes in order) and cut
    at the cumulative ``fractions``, so a seed always gives the same split. Upsampling is
    bilinear (``torch.nn.functional.interpolate``, align_corners=False) from 8x8.
    """
    import torch
    from sklearn.datasets import load_digits
    from torch.nn import functional as F

    if len(fractions) != 3 or min(fractions) <= 0 or abs(sum(fractions) - 1.0) > 1e-9:
        raise VisionDataError(f"fractions must be three positive numbers summing to 1, got {fractions}")
    if size < 8:
        raise VisionDataError(f"size must be >= 8 (the digits are 8x8), got {size}")
    digits = load_digits()
    x = torch.from_numpy(digits.images.astype(np.float32) / 16.0).unsqueeze(1)  # (N, 8, 8) -> (N, 1, 8, 8)
    if size != 8:
        x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False).clamp_(0.0, 1.0)
    images, labels = x.numpy(), digits.target.astype(np.int64)
    rng = np.random.default_rng(seed)
    parts: list[list[np.ndarray]] = [[], [], []]
    for c in range(10):
        idx = rng.permutation(np.flatnonzero(labels == c))
        cuts = np.round(np.cumsum(fractions)[:2] * idx.size).astype(int)
        for part, chunk in zip(parts, np.split(idx, cuts)):
            part.append(chunk)
    sets = [ImageSet(images[np.sort(np.concatenate(p))], labels[np.sort(np.concatenate(p))], 10,
                     f"digits:{name}:seed{seed}") for p, name in zip(parts, ("train", "val", "test"))]
    return Splits(*sets)


def cifar_splits(root: Path | str, dataset: str = "cifar10", val_fraction: float = 0.0, seed: int = 0) -> Splits:
    """CIFAR train (less a random validation share, by ``seed``) / validation / test sets.

    With ``val_fraction`` 0 (the published runs train on all 50,000) the validation set is the
    test set.
    """
    train = read_cifar(root, dataset, "train")
    test = read_cifar(root, dataset, "test")
    if not 0.0 <= val_fraction < 1.0:
        raise VisionDataError(f"val_fraction must lie in [0, 1), got {val_fraction}")
    if val_fraction == 0.0:
        return Splits(train, test, test)
    order = np.random.default_rng(seed).permutation(len(train))
    n_val = int(round(val_fraction * len(train)))
    return Splits(train.subset(np.sort(order[n_val:]), f"{dataset}:train"),
                  train.subset(np.sort(order[:n_val]), f"{dataset}:val"), test)
